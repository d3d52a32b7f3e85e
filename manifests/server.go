package manifests

import "embed"

// Server holds the tenant server's manifests, in server/: its namespace
// and service account (no Role: it uses no Kubernetes API), the writer
// (one replica with the repository on a volume, its Service) and the read
// replicas (a Deployment with a mirror each in an emptyDir, the Service
// agents reach, a PodDisruptionBudget). Probes use /healthz and /readyz.
//
//go:embed server/*.yaml
var Server embed.FS
