// Package lifecycle creates and deletes installs: what `nuon install
// create` and `nuon install delete` run.
//
// [Create] is a list of phases, each an ordered step function that first
// looks at what exists and does only what is missing, so a run killed or
// failed anywhere is continued by running it again, with no duplicate
// resources:
//
//  1. keys: the install's ed25519 key pair (agent.key, agent.key.pub) and
//     the agent's trust file (trust: allowed_signers of the render key) in
//     the install's directory, which the operator names. Never committed:
//     only the public key goes into installs/<id>.yaml, as agentKey.
//  2. sandbox: the sandbox module (sandboxes.Extract) applied with the real
//     terraform (terraform-exec); locally the module is in sandbox/module
//     and its state in sandbox/terraform.tfstate, the layout of the
//     agent's terraform jobs, and its outputs are recorded in
//     sandbox/outputs.json.
//  3. install-file: installs/<id>.yaml written as a commit on the branch
//     nuon/install/<id> for review, or on main (Options.Commit). The
//     hand-over: when main's nuon.yaml declares a sandbox, the file names
//     it (sandbox.name; its version is the channel's pin) with this
//     install's module inputs, and on AWS the maintenance role and
//     ExternalId the agent assumes for upgrades; no registry is written,
//     the sandbox's registry output stands for it. Without a declared
//     sandbox the registry is the sandbox's registry output (url and
//     repository_prefix), copied. An identical file is left alone.
//  4. agent: on the local sandbox (no kubelet) nuon-agent runs as a process
//     in its own session, with a pid file and its log in the install's
//     directory, reading the registry password from the sandbox's
//     password file into its environment (never argv), and with
//     --sandbox-dir naming sandbox/, whose state its first pass adopts.
//     With
//     [AgentKubernetes], manifests/ are applied to the sandbox's cluster
//     by server-side apply ([ApplyAgent], fluxcd/pkg/ssa) with the install
//     key and registry password as Secrets, the trust file and registry CA
//     as ConfigMaps.
//
// Each phase reports an [Event] when it ends. [Delete] reverses it.
//
// On CloudAWS the sandbox phase assumes the install's provision role
// (stack.AssumeRole: ExternalId, a deadline on every call) and applies
// sandboxes/aws-eks with only that role's credentials in terraform's
// environment, its state in the stack's S3 bucket. Not built yet, and
// refused with [ErrUnsupported]: the agent bootstrap on EKS (manifests/ by
// server-side apply from inside the VPC) and Delete on AWS (the check for
// controller-made load balancers, the agent's ECR repositories, destroy
// with the deprovision role).
package lifecycle
