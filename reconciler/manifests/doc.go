// Package manifests is the plugin that applies manifests components: plain
// Kubernetes YAML, applied with server-side apply through fluxcd/pkg/ssa,
// inside a job process.
//
// # Manifests
//
// The job's "manifests" artifact (or its only one) is a directory tree of
// .yaml, .yml and .json files, read in lexical path order; each file may
// hold several documents and List objects. Files and folders whose names
// start with a dot are ignored. There are no templates, only substitution
// of the job's inputs, in string values (never in keys):
//
//	data:
//	  domain: ${inputs.domain}            # the input's value, typed
//	  url: https://${inputs.domain}/api   # its text inside a string
//	  host: ${inputs.database.endpoint}   # a key of a map input
//	  literal: $${inputs.domain}          # "${inputs.domain}", unreplaced
//
// A string that is exactly one reference takes the input's value with its
// type (a number stays a number, a map a map); inside a longer string the
// value is printed (maps and lists as JSON). An unknown input fails the
// job with ErrInvalid. Inputs holding ${secrets.NAME} are resolved from
// NUON_SECRET_NAME in the job's environment first, as for the other
// plugins (see reconciler.ResolveSecrets); a missing one fails the job
// with reconciler.ErrSecretMissing.
//
// Namespaced objects without a namespace go to manifests.namespace (or
// "default"). Every object gets the labels nuon.dev/install and
// nuon.dev/component, and is applied with the field manager "nuon",
// forcing ownership of the fields it sets.
//
// # State directory
//
//	STATEDIR/manifests/       the artifact, extracted afresh for each job
//	STATEDIR/inventory.json   what the last job applied (Inventory)
//
// The inventory lists every object with the digest of what was applied and
// the resourceVersion it had right after. It is also the job's "inventory"
// output (Kind/namespace/name per object).
//
// # Apply
//
// Apply runs these steps in order and stops at the first that fails; the
// error names the step and the component ("manifests wait dashboards:
// ..."):
//
//  1. inputs: resolve ${secrets.NAME} in the inputs.
//  2. extract: the artifact into STATEDIR/manifests.
//  3. connect: a client from Plugin.Config, Plugin.Kubeconfig, KUBECONFIG
//     or the pod's service account.
//  4. load: parse, substitute, set namespaces and labels, digest.
//  5. inventory: read the last job's inventory.
//  6. plan: one metadata-only LIST per kind and namespace gives every live
//     object's resourceVersion. An object that does not exist is created;
//     one whose digest and resourceVersion both match the inventory is
//     skipped with no request at all; one whose digest matches but whose
//     resourceVersion moved is checked for drift; anything else is
//     updated. A re-apply of unchanged manifests on an unchanged cluster
//     therefore costs one LIST per kind and sends no PATCH.
//  7. apply: in stages as ssa.ApplyAllStaged does: CRDs, namespaces and
//     cluster roles first (and waited for), then classes, then the rest.
//     New objects are applied directly, in parallel; drift checks are ssa
//     dry-runs (Diff); updates go through ssa's ApplyAll (a dry-run, then
//     an apply of what differs). An object whose immutable fields changed
//     fails with ErrImmutable, unless manifests.recreate allows deleting
//     and recreating it.
//  8. prune: delete the inventory's objects that the manifests dropped,
//     if they still carry the component's labels.
//  9. record: read back resourceVersions and write the new inventory.
//  10. wait: with manifests.wait, wait until kstatus finds every object
//     Current, for manifests.timeout or until shortly before the job's
//     deadline. A timeout fails with ErrNotReady and names each object
//     that is not ready, with kstatus's reason ("Deployment/shop/web is
//     InProgress (Replicas: 0/1)").
//  11. health: kstatus of every object, from one full LIST per kind and
//     namespace, as the result's Health (Ready, Progressing, Failed,
//     Unknown; the objects that are not Ready are listed).
//
// # Drift
//
// Drift is a change someone else made to a field the plugin manages,
// since the last apply. The plan finds candidates for free (their
// resourceVersion moved while the manifests did not) and a server-side
// dry-run tells a real change from a status update. Drifted objects are
// set back, and listed in the "drift" output with the paths that differed:
//
//	drift: [{object: ConfigMap/shop/settings, fields: [data.theme]}]
//
// # Drift checks, health and debug commands
//
// A drift job (Drift) runs the same steps up to plan, with the manifests
// extracted into a directory of its own, and then only reads: an object
// the plan settled (digest and resourceVersion unchanged since the last
// apply) costs nothing more; any other is dry-run with ssa's Diff. The
// result lists each object that differs: changed (with the fields),
// missing (desired or in the inventory, but not in the cluster) or extra
// (in the inventory and the cluster, dropped from the manifests). A drift
// check never sends a PATCH that is not a dry-run, never deletes and never
// writes the inventory. BenchmarkDrift500 measures it: 500 untouched
// objects cost 6 requests; with every resourceVersion moved, 500 dry-runs.
// Correcting drift is an ordinary Apply.
//
// A health job (Health) reads the inventory and computes kstatus for its
// objects: no artifact, no write. A debug job (Debug) answers the
// Kubernetes commands of package internal/debugcmd through package
// reconciler/kube, in manifests.namespace or the install's namespaces.
//
// # Destroy
//
// Destroy deletes every object in the inventory that still carries the
// component's labels (namespaces last), then the inventory. Without an
// inventory it does nothing.
package manifests
