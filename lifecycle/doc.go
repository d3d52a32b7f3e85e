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
//     install's module inputs (on AWS; the local sandbox's are paths of
//     this machine, which the agent gets as --sandbox-input flags), and on
//     AWS the maintenance role and ExternalId the agent assumes for
//     upgrades and the S3 object of the state; no registry is written,
//     the sandbox's registry output stands for it. Without a declared
//     sandbox the registry is the sandbox's registry output (url and
//     repository_prefix), copied. An identical file is left alone.
//  4. agent: on the local sandbox (no kubelet) nuon-agent runs as a process
//     in its own session, with a pid file and its log in the install's
//     directory, reading the registry password from the sandbox's
//     password file (and Options.GitTokenFile, the repository's token)
//     into its environment (never argv), and with --sandbox-dir naming
//     sandbox/, whose state its first pass adopts, and the local
//     sandbox's dir and kube_assets as --sandbox-input. With
//     [AgentKubernetes], manifests/ are applied to the sandbox's cluster
//     by server-side apply ([ApplyAgent], fluxcd/pkg/ssa) with the install
//     key, registry password and repository token as Secrets, the trust
//     file and registry CA as ConfigMaps.
//
// Each phase reports an [Event] when it ends. [Delete] reverses it.
//
// [Options.Only] runs some phases alone (for example the agent bootstrap
// again); they read what earlier phases made from the install's directory.
//
// # AWS
//
// On CloudAWS the sandbox phase assumes the install's provision role
// (stack.AssumeRole: ExternalId, a deadline on every call) and applies
// sandboxes/aws-eks with only that role's credentials in terraform's
// environment, its state in the stack's S3 bucket (SandboxStateKey). The
// install file then names that object as sandbox.state, beside the
// maintenance role as sandbox.role, so that the agent's sandbox jobs keep
// the same state with that role's credentials.
//
// The cluster's API endpoint is private, and the tenant is outside the
// VPC. The one-time agent bootstrap reaches it like this, with least
// privilege and no standing access:
//
//  1. sandbox: applied with public_access_cidrs = AWSOptions.BootstrapCIDRs,
//     the tenant's egress CIDRs: the endpoint is public as well, from those
//     addresses only (still behind EKS authentication). Without them it
//     stays private and create must run inside the VPC (peering, a VPN).
//  2. agent (eks.go): as the provision role, DescribeCluster (endpoint,
//     CA); CreateAccessEntry for the role and AssociateAccessPolicy
//     [BootstrapPolicy] at cluster scope (manifests/ makes Namespaces and
//     Roles: a namespace-scoped policy cannot); wait until the cluster
//     lets the role in; [ApplyAgent] with EKS tokens (aws-iam-authenticator's
//     format: "k8s-aws-v1." + base64url of a presigned STS
//     GetCallerIdentity URL signing x-k8s-aws-id, made locally with the
//     SDK's presigner, refreshed before its 60 s expiry); then
//     DeleteAccessEntry, also when the apply failed, and ListAccessEntries
//     to check it is gone. A run killed in between leaves the entry: the
//     next run reuses it (ResourceInUseException; the entry is tagged
//     nuon.dev/purpose=agent-bootstrap) and removes it. An entry for the
//     role without that tag is standing access someone else made: the
//     bootstrap refuses with [ErrStandingAccess] and leaves it alone. The
//     agent pulls from ECR with its own role (Pod Identity), so no
//     registry password goes into the cluster.
//  3. endpoint: sandboxes/aws-eks applied again with public_access_cidrs
//     empty: private only. When the agent phase fails, Create stops before
//     it: no access entry is left, but the endpoint stays open to the
//     bootstrap CIDRs until Create runs again (Options.Only "endpoint"
//     closes it alone).
//
// Every AWS call has a deadline (AWSOptions.Timeout: stack.ErrTimeout),
// every request to the cluster too (KubeTimeout): an endpoint this host
// cannot reach is [ErrUnreachable] at once, with what to change. A
// re-run of create opens and closes the endpoint again.
//
// One agent phase with nothing to change takes ~70-80 ms and ~80 ms of CPU
// (every process: the test, the stand-ins, kube-apiserver and etcd) on
// the 2-core machine against the stand-ins (BenchmarkAWSAgentBootstrap);
// on AWS the access entry's propagation (seconds) and the endpoint's
// updates in the sandbox and endpoint phases (minutes each) dominate.
//
// Ways that need no public endpoint at all (an SSM session on a node, a
// Lambda function in the VPC) need compute or code in the customer's
// account that cannot be tested here without AWS; this path is tested up
// to the AWS boundary: internal/ststest and internal/ekstest speak the
// SDK's wire protocols, and a real kube-apiserver authenticates the EKS
// tokens through ekstest's webhook, only while the access entry exists.
//
// # Delete on AWS
//
// Once the agent reported every component deleted, [Delete] assumes the
// install's deprovision role, which may only describe and delete, and
// uses nothing else (sandboxes/README.md, teardown order):
//
//   - load-balancers: load balancers that Kubernetes controllers made for
//     Services and Ingresses are in no Terraform state; left behind, they
//     hold network interfaces and security groups in the subnets and
//     terraform destroy fails on the VPC half way. Both ELB APIs are
//     listed (DescribeLoadBalancers, DescribeTags): one tagged
//     elbv2.k8s.aws/cluster=<cluster> or kubernetes.io/cluster/<cluster>,
//     or in the sandbox's VPC, is waited for (AWSOptions.LoadBalancerWait),
//     then named in a [LoadBalancersLeftError]. Delete never deletes one
//     itself, and has no flag to: its controller owns it with its target
//     groups, listeners and security groups, and makes it again while its
//     Service or Ingress exists, so the fix is in the cluster (or, with
//     the cluster gone, the customer's), and the deprovision role needs no
//     load balancer deletion.
//   - registry: the ECR repositories under the sandbox's repository
//     prefix (nuon/<id>/) are deleted with force: the agent made them,
//     so terraform does not know them.
//   - sandbox: terraform destroy of sandboxes/aws-eks with the role's
//     credentials and the S3 backend; ECR repositories (force_delete) and
//     Route53 zones (force_destroy) go even when not empty.
//
// The cluster's name, VPC and repository prefix come from
// sandbox/outputs.json when Create recorded it, else from the names
// sandboxes/aws-eks gives (nuon-<id>, nuon/<id>). Every AWS call has a
// deadline (AWSOptions.Timeout): an endpoint that does not answer fails
// with stack.ErrTimeout, a refusal is stack.ErrAccessDenied.
//
// # The audit log
//
// The archive phase keeps the install's history: its desired and status
// refs are copied under refs/nuon/archive/<id>/ and deleted, in one atomic
// push on a remote repository (gitrepo.Apply). Each deletion of an id is
// a generation of its archive (schemas.ArchiveGenRef): the first keeps
// refs/nuon/archive/<id>/installs and /status, an install created again
// under the id and deleted again goes to refs/nuon/archive/<id>/2/, and
// so on; an earlier generation is never written again, so no install's
// history is left unreferenced for git gc. The generation is the one
// after the newest there, unless the newest already holds the live refs
// (each its ref there or an ancestor of it): then a re-run of the same
// deletion only deletes them. Copies and deletions go in one atomic
// update, the deletions leased at the tips read, so a run that stopped
// half way left either every live ref or none, and two runs cannot both
// archive the same refs.
// Run it against the repository a tenant server follows (its upstream, or
// its own repository when it has none): the server reads the archive
// refs, drops the install's refs, and moves under the archive any status
// it accepted that the archive lacks (package server, "Archived
// installs").
package lifecycle
