// Package helm is the plugin that applies helm components with the Helm SDK
// (helm.sh/helm/v3's action package), inside a job process.
//
// # Release
//
// The release is named helm.release (default: the component's name) and
// lives in helm.namespace (default "default"). The namespace is created if
// it is missing and the job may read namespaces; a job whose role is
// limited to that namespace needs it to exist. Helm keeps the history as
// usual, in Secrets of that namespace (sh.helm.release.v1.NAME.vN), at most
// Plugin.MaxHistory revisions, so `helm history` and `helm rollback` work
// on it by hand too.
//
// # Apply
//
// Apply runs these steps in order and stops at the first that fails; the
// error names the step and the component ("helm release api: ..."):
//
//  1. values: the job's inputs are the chart's values, as they are (maps
//     stay maps). Every reference but secrets was resolved by the agent;
//     each ${secrets.NAME} is replaced by NUON_SECRET_NAME from the job's
//     environment (see reconciler.SecretEnv), and a missing one fails the
//     job with reconciler.ErrSecretMissing before anything is sent.
//  2. extract: the job's "chart" artifact (or its only one), pinned by
//     digest, into STATEDIR/chart, and loaded.
//  3. connect: Plugin.Config, Plugin.Kubeconfig, KUBECONFIG or the pod's
//     service account.
//  4. release: from the release's history:
//     - no release: install. If the install fails, the failed release is
//     uninstalled and the job fails with ErrInstallFailed.
//     - a last revision left pending by a killed job: it is marked failed
//     first (the job's lock rules out a concurrent operation).
//     - no deployed revision (only failed ones): uninstall, then install.
//     - the deployed revision is the last one and was made from the same
//     chart digest and values (the nuon.dev/spec release label holds
//     their hash): nothing to do; Changed is false.
//     - otherwise: upgrade, with the job's values only (no values reused
//     from earlier revisions). If the upgrade fails, the release is
//     rolled back to the revision that was deployed and the job fails
//     with ErrUpgradeFailed, which says why and to which revision.
//
// With Plugin.Wait every operation waits, up to helm.timeout (or until
// shortly before the job's deadline), for the release's resources to be
// ready, as `helm --wait` does; without it (the default, as in the helm
// CLI) an operation succeeds once the API server accepted every object.
//
// When the chart and values match the deployed revision, Apply still
// dry-runs the release's objects (as a drift job does); if any drifted it
// upgrades to the same chart and values, whose three-way merge sets hand
// edits back and recreates deleted objects.
//
// With helm.wait the apply then waits, within the job's timeout, until
// kstatus finds every object of the release Ready, and fails with
// ErrNotReady naming those that are not. Every apply reports the objects'
// health as the result's Health.
//
// The job's outputs are the release's name, namespace, revision, status,
// chart (name-version) and appVersion.
//
// # Drift checks, health and debug commands
//
// A drift job (Drift) changes nothing: the release itself is changed if
// the job's chart digest or values differ from the deployed revision's
// spec label, or missing if there is none; every object of the deployed
// manifest is dry-run with server-side apply under Helm's field manager
// ("helm") and is missing or changed, with the fields that differ. A
// health job (Health) computes kstatus for the deployed manifest's
// objects. A debug job (Debug) answers `status RELEASE` and `history
// RELEASE` for releases in helm.namespace, never with values or notes, and
// the Kubernetes commands of package internal/debugcmd through package
// reconciler/kube.
//
// # Plans bound to their hash
//
// A job with Job.Plan is plan-bound (Apply routes it). Mode record
// (Record) dry-runs the install or upgrade on the server (Helm renders
// against the cluster, lookups included, and writes nothing) and saves
// STATEDIR/plans/HEX.release.json: a SavedRelease (chart digest, values,
// the rendered manifest and hooks, the deployed and last revision as
// base) as canonical JSON whose SHA-256 is the plan hash, so an identical
// re-plan keeps its hash and its approval. The record's summary compares
// the rendered objects, and hooks, with the deployed revision's by id;
// the diff is package reconciler/kube's (a Secret's values never shown),
// redacted of the job's secrets. Mode apply (ApplySaved) refuses with
// ErrPlanMismatch, before any write, a saved file whose bytes have
// another hash, a job whose chart digest or values are not the plan's, a
// release whose revisions moved since, or a chart whose hooks render
// otherwise; it then deploys as Apply does with a post-renderer that
// returns the saved manifest bytes, and removes the saved plan.
//
// # Destroy
//
// Destroy uninstalls the release and purges its history. A release that
// does not exist is already gone.
//
// # Secrets
//
// Resolved secrets reach Helm in the values only, which Helm stores in the
// release's Secret, as it always does. The job process (package jobrun)
// redacts Helm's log lines and the errors the plugin returns with package
// internal/redact before they leave the job.
package helm
