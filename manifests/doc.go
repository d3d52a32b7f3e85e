// Package manifests holds the Kubernetes manifests that run an install's
// agent in its cluster (the YAML files in this folder, in the order of
// their names), and embeds them for tests and tools:
//
//   - 00-namespaces.yaml: nuon-system for the agent and its jobs and
//     nuon-state for the terraform components' state, both enforcing the
//     restricted Pod Security Standard, and the app's namespace (shop for
//     the sample app).
//   - 10-agent-rbac.yaml: the agent's service account, allowed to run Jobs
//     in nuon-system (Jobs, their ConfigMaps, their pods' logs) and to read
//     the state locks (Leases) in nuon-state, and nothing else.
//   - 20-jobs-rbac.yaml: the jobs' service account, allowed to manage the
//     app's kinds of objects in the app's namespace only, and the
//     terraform state in nuon-state (Secrets: get, list, create, update;
//     Leases: get, create, update), what Terraform's kubernetes backend
//     calls.
//   - 30-agent.yaml: the agent's Deployment (one replica, Recreate) and
//     its state volume; its key, trust file and the jobs' secrets come
//     from a Secret and ConfigMaps the operator creates first (see the
//     file's header). The customer's policy (package policy) is the
//     ConfigMap nuon-customer-policy, owned and edited by the customer,
//     mounted at /etc/nuon/customer when it exists and enforced with
//     --customer-policy=/etc/nuon/customer/policy.yaml.
//
// Apply them with `kubectl apply --server-side -f manifests/`, or with the
// manifests plugin, as the test does against a real API server.
package manifests

import "embed"

// FS holds the manifests.
//
//go:embed *.yaml
var FS embed.FS
