// Package tfstate is what the agent's Kubernetes Job runner and the
// terraform plugin agree on about a component's Terraform state in the
// kubernetes backend: the environment that selects it, the names of its
// Secret and lock Lease, and the state lock as Terraform describes it
// (LockInfo, read from a Lease or from a failed command's output).
//
// It is its own package, with no dependency beyond schemas, so that
// nuon-agent, which links no plugin, can read a lock the plugin's
// terraform left (reconciler/terraform uses it to write the backend block
// and break a dead job's lock).
package tfstate
