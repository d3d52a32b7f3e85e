// Package metrics is the agent's Prometheus metrics and health endpoints,
// served by `nuon agent --metrics-addr` on a local listener.
//
// It observes the agent from the outside, through the seams the agent
// already has: the Remote (polls, fetches, pushes), the job Runner (jobs by
// plugin and result, job duration), the Syncer's Copied hook (artifact
// bytes) and agent.Config.Observe (reconcile passes and their outcome). No
// series is labelled by anything unbounded: plugins and results are fixed
// sets.
//
// # Health
//
//   - /healthz is 200 while the process serves HTTP: it is alive.
//   - /readyz is 200 once a reconcile pass finished without error and the
//     last pass did too; after a failed pass (the tenant server down, a
//     disk error) it is 503 with the error, while the agent keeps its
//     applied state and retries. An agent serves no traffic, so readiness
//     is a signal for rollouts and alerts, not for load balancing.
package metrics
