// Package terraform is the plugin that applies terraform components: it runs
// the terraform CLI, through terraform-exec, inside a job process.
//
// # State directory
//
// Every component has its own state directory (reconciler.Env.StateDir),
// kept from one job to the next:
//
//	STATEDIR/terraform.tfstate   the state, written by the local backend
//	STATEDIR/module/             the module, extracted afresh for each job
//
// The state lives beside the module, not in it, so replacing the module
// never touches it. A generated override file, module/nuon_override.tf.json,
// points the local backend at it and replaces any backend the module
// declares.
//
// # State in the cluster
//
// A job of the Kubernetes Job runner has no state directory that outlives
// it. There, the runner sets tfstate.EnvStateNamespace and tfstate.EnvStateSecretSuffix
// (or Plugin.Backend is set), and the override file configures Terraform's
// built-in kubernetes backend instead: the state in the Secret
// tfstate-default-SUFFIX, locked by the Lease lock-tfstate-default-SUFFIX,
// both in that namespace, reached with KUBECONFIG's path when set and the
// pod's service account (in_cluster_config) otherwise; no credential is
// written into the backend block. The suffix (tfstate.StateSecretSuffix) is one
// per install and component. Without a local state file the plugin cannot
// tell before init whether anything was applied: Destroy, Drift, Health
// and Debug then run terraform, which finds an empty state itself. A
// component's local state is not migrated into the cluster.
//
// # State in S3
//
// A job whose manifest names an S3 object (Job.State: the sandbox on AWS,
// where nuon install create applied it) keeps its state there, whatever
// else the environment says: the override file configures Terraform's
// built-in s3 backend (S3Backend) with the bucket, key and region,
// use_lockfile (the lock is the object KEY.tflock, taken with a
// conditional PutObject) and encrypt. The credentials are the job's
// environment (the maintenance role's temporary credentials, which the
// agent hands the job), never the block. When AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL_STS is set the block names those endpoints, and S3 is
// reached path-style. As with the kubernetes backend, the plugin cannot
// tell before init whether anything was applied.
//
// # State locks
//
// Every command that takes the state lock (plan, apply, destroy) goes
// through the same handling. When terraform fails with "Error acquiring
// the state lock", the plugin reads the lock's ID, operation, holder and
// time from terraform's "Lock Info" (tfstate.ParseLockError). If the ID is the
// one the agent found held by a dead job (tfstate.EnvStaleLock, Plugin.StaleLock),
// it runs `terraform force-unlock -force ID`, says so in the log, reports
// the lock as JobResult.BrokenLock and runs the command again. Any other
// lock may be a live job's: the plugin waits, retrying every
// Plugin.LockPoll until the job's context ends, and never breaks it.
//
// # Apply
//
// Apply runs these steps in order and stops at the first that fails; the
// error names the step and the component ("terraform plan network: ..."):
//
//  1. inputs: resolve each ${secrets.NAME} in the job's inputs from the
//     environment variable NUON_SECRET_NAME (see reconciler.SecretEnv).
//     Every other reference was resolved by the agent before the job
//     started. A missing secret fails the job with
//     reconciler.ErrSecretMissing before terraform runs.
//  2. extract: empty module/, extract the job's "module" artifact (or its
//     only one) into it, write the backend override and the inputs as
//     module/nuon.auto.tfvars.json, which terraform loads by itself.
//  3. init: install providers, as the CLI config says (TF_CLI_CONFIG_FILE
//     or Plugin.CLIConfig), without upgrading them.
//  4. plan: save a plan; whether it changes anything becomes
//     JobResult.Changed.
//  5. apply: apply exactly the saved plan.
//  6. output: read the outputs. Non-sensitive ones go into
//     JobResult.Outputs; sensitive ones are only named, in
//     JobResult.Sensitive: their values stay in the state.
//  7. health: with terraform.health, the named output must be true; the
//     result's Health is Ready, or Failed with why (false, missing, not a
//     boolean). A failed check does not fail the job: the apply happened.
//
// # Drift checks, health and debug commands
//
// A drift job (Drift) runs inputs, extract and init, then exactly one
// `terraform plan -detailed-exitcode` (it refreshes and does not write the
// state) and `terraform show -json` of the saved plan, whose output never
// reaches the log (it holds the variables). Each resource the plan would
// touch is reported by address: missing (create), extra (delete) or
// changed (update, replace) with the attributes that differ, never their
// values; a change made outside terraform (resource_drift) is said in
// Diff. A file a local_file manages, edited by hand, shows as missing
// ("deleted or replaced outside terraform"): the provider drops it from
// the refreshed state. Correcting drift is an ordinary Apply.
//
// A health job (Health) reads the outputs of the state and runs the
// check. A debug job (Debug) answers `state list` and `state show
// ADDRESS` from `terraform show -json`: the address is looked up in the
// JSON, never handed to terraform, and every attribute terraform marks
// sensitive (the provider's schema or the configuration) shows as
// Sensitive.
//
// # Destroy
//
// Destroy runs inputs, extract and init as Apply does, then terraform
// destroy, with the same state and variables. Without a state file nothing
// was ever applied, and Destroy returns at once.
//
// # Secrets
//
// Secrets reach terraform through the variables file only: the NUON_SECRET_
// variables are removed from terraform's environment, and the variables
// file and the saved plan are deleted when the job ends. Terraform prints
// the value of any variable a module does not mark sensitive, in its own
// escaping and word-wrapped; the job process (package jobrun) redacts
// everything terraform prints to reconciler.Env.Log and every error the
// plugin returns, with package internal/redact, before it leaves the job.
// The state holds whatever terraform stores in it, secrets included.
//
// # Cancellation
//
// terraform runs in its own process group. When the job's context ends,
// terraform is interrupted, stops what it runs, and writes its state; if it
// has not exited after Plugin.Grace it is killed. The error then satisfies
// errors.Is with context.Canceled or context.DeadlineExceeded.
package terraform
