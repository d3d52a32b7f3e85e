package terraform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"nuon.dev/nuon/schemas"
)

// The environment that sends a job's state to Terraform's kubernetes
// backend instead of the local state file. The Kubernetes Job runner
// (agent/jobs.Kube) sets it on the job's container; Plugin reads it unless
// Plugin.Backend is set.
const (
	// EnvStateNamespace is the namespace of the state Secret and lock
	// Lease: the install's own (the runner's Jobs namespace).
	EnvStateNamespace = "NUON_TF_STATE_NAMESPACE"
	// EnvStateSecretSuffix is the backend's secret_suffix
	// (StateSecretSuffix of the install and component).
	EnvStateSecretSuffix = "NUON_TF_STATE_SECRET_SUFFIX"
	// EnvStaleLock is the ID of a state lock the agent found held by a
	// job it knows is dead; the job breaks that lock, and only that one.
	EnvStaleLock = "NUON_TF_STATE_STALE_LOCK"
)

// Names Terraform's kubernetes backend gives its objects in the default
// workspace, the only one nuon uses.
const (
	stateSecretPrefix = "tfstate-default-"
	stateLeasePrefix  = "lock-tfstate-default-"
	// LeaseLockAnnotation holds the lock's LockInfo as JSON on the Lease.
	LeaseLockAnnotation = "app.terraform.io/lock-info"
)

// DefaultLockPoll is how often a job retries a state another live job has
// locked.
const DefaultLockPoll = 5 * time.Second

// KubernetesBackend keeps a component's state in Terraform's built-in
// kubernetes backend: a Secret (StateSecretName) holding the state, and a
// Lease (StateLeaseName) as its lock, both in Namespace.
type KubernetesBackend struct {
	// Namespace of the Secret and the Lease. Required.
	Namespace string
	// SecretSuffix names them (StateSecretSuffix). Required.
	SecretSuffix string
	// Kubeconfig is the kubeconfig terraform reaches the API server with.
	// Default: KUBECONFIG from the job's environment, else the pod's
	// service account (in_cluster_config).
	Kubeconfig string
}

// backendFromEnv is the kubernetes backend the environment names, or nil.
func backendFromEnv(lookup func(string) (string, bool)) *KubernetesBackend {
	ns, _ := lookup(EnvStateNamespace)
	suffix, _ := lookup(EnvStateSecretSuffix)
	if ns == "" || suffix == "" {
		return nil
	}
	return &KubernetesBackend{Namespace: ns, SecretSuffix: suffix}
}

// config is the backend block: namespace and secret_suffix, and the
// kubeconfig's path or the in-cluster configuration. The kubeconfig is
// named by path only: no credential is written into the block, which
// terraform copies into .terraform/.
func (b *KubernetesBackend) config(lookup func(string) (string, bool)) map[string]any {
	c := map[string]any{
		"namespace":     escapeTemplate(b.Namespace),
		"secret_suffix": escapeTemplate(b.SecretSuffix),
	}
	path := b.Kubeconfig
	if path == "" {
		path, _ = lookup("KUBECONFIG")
		if i := strings.IndexByte(path, os.PathListSeparator); i >= 0 {
			path = path[:i]
		}
	}
	if path != "" {
		c["config_path"] = escapeTemplate(path)
	} else {
		c["in_cluster_config"] = true
	}
	return c
}

// The AWS SDK's own variables for its endpoints, which the s3 backend
// block repeats when they are set (a private endpoint, or a test's
// stand-ins: internal/s3test, internal/ststest).
const (
	EnvS3Endpoint  = "AWS_ENDPOINT_URL_S3"
	EnvSTSEndpoint = "AWS_ENDPOINT_URL_STS"
)

// S3Backend keeps a component's state in Terraform's built-in s3 backend:
// the object Key in Bucket, locked by the lock file Key.tflock beside it
// (use_lockfile: a conditional PutObject, no DynamoDB table), encrypted at
// rest. A job names it with its State (the sandbox on AWS: the object
// nuon install create applied it with); the credentials are the job's
// environment (AWS_ACCESS_KEY_ID…), never the block.
type S3Backend struct {
	schemas.S3State
}

// config is the backend block. When EnvS3Endpoint or EnvSTSEndpoint is
// set the block names them as endpoints, and S3 is reached path-style
// (http://endpoint/bucket/key), which an endpoint without per-bucket DNS
// needs.
func (b *S3Backend) config(lookup func(string) (string, bool)) map[string]any {
	c := map[string]any{
		"bucket":       escapeTemplate(b.Bucket),
		"key":          escapeTemplate(b.Key),
		"region":       escapeTemplate(b.Region),
		"use_lockfile": true,
		"encrypt":      true,
	}
	endpoints := map[string]any{}
	if v, _ := lookup(EnvS3Endpoint); v != "" {
		endpoints["s3"] = escapeTemplate(v)
		c["use_path_style"] = true
	}
	if v, _ := lookup(EnvSTSEndpoint); v != "" {
		endpoints["sts"] = escapeTemplate(v)
	}
	if len(endpoints) > 0 {
		c["endpoints"] = endpoints
	}
	return c
}

// StateSecretSuffix is the kubernetes backend's secret_suffix for a
// component of an install: a label value of at most 59 characters, unique
// per install and component (a hash of both), that never ends in
// -<number> (which the backend refuses: it numbers its chunks so).
func StateSecretSuffix(install, component string) string {
	sum := sha256.Sum256([]byte(install + "\x00" + component))
	name := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(install+"-"+component), "-"), "-")
	if len(name) > 44 {
		name = strings.TrimRight(name[:44], "-")
	}
	if name != "" {
		name += "-"
	}
	return name + hex.EncodeToString(sum[:])[:8] + "-state"
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// StateSecretName is the Secret that holds the state of suffix.
func StateSecretName(suffix string) string { return stateSecretPrefix + suffix }

// StateLeaseName is the Lease that locks the state of suffix.
func StateLeaseName(suffix string) string { return stateLeasePrefix + suffix }

// LockInfo is a state lock as Terraform describes it: in the error of a
// command that could not take the lock, and in the lock itself (the
// kubernetes backend's Lease annotation LeaseLockAnnotation).
type LockInfo struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation,omitempty"`
	Who       string    `json:"Who,omitempty"`
	Version   string    `json:"Version,omitempty"`
	Created   time.Time `json:"Created,omitzero"`
	Info      string    `json:"Info,omitempty"`
}

// schema is the lock as a JobResult reports it.
func (l *LockInfo) schema() *schemas.StateLock {
	if l == nil {
		return nil
	}
	s := &schemas.StateLock{ID: l.ID, Operation: l.Operation, Who: l.Who}
	if !l.Created.IsZero() {
		s.Created = l.Created.UTC().Format(time.RFC3339Nano)
	}
	return s
}

func (l LockInfo) String() string {
	s := "lock " + l.ID
	if l.Operation != "" {
		s += ", " + l.Operation
	}
	if l.Who != "" {
		s += " by " + l.Who
	}
	if !l.Created.IsZero() {
		s += " since " + l.Created.UTC().Format(time.RFC3339)
	}
	return s
}

// ParseLeaseLock reads the LockInfo a kubernetes backend Lease holds in
// its LeaseLockAnnotation.
func ParseLeaseLock(annotation string) (LockInfo, error) {
	var l LockInfo
	if err := json.Unmarshal([]byte(annotation), &l); err != nil {
		return LockInfo{}, fmt.Errorf("lease lock info: %w", err)
	}
	if l.ID == "" {
		return LockInfo{}, fmt.Errorf("lease lock info: no ID")
	}
	return l, nil
}

// lockLine matches one field of the "Lock Info:" block terraform prints
// when it cannot take the state lock.
var lockLine = regexp.MustCompile(`(?m)^\s*(ID|Path|Operation|Who|Version|Created|Info):[ \t]*(.*?)\s*$`)

// ParseLockError reads the lock from the output of a terraform command
// that failed because the state is locked ("Error acquiring the state
// lock" and its "Lock Info:" block). ok is false for any other failure.
func ParseLockError(out string) (l LockInfo, ok bool) {
	i := strings.Index(out, "Error acquiring the state lock")
	if i < 0 {
		return LockInfo{}, false
	}
	j := strings.Index(out[i:], "Lock Info:")
	if j < 0 {
		return LockInfo{}, false
	}
	block := out[i+j+len("Lock Info:"):]
	// The block ends at the first blank line after its fields.
	if k := strings.Index(strings.TrimLeft(block, "\n"), "\n\n"); k >= 0 {
		block = strings.TrimLeft(block, "\n")[:k]
	}
	for _, m := range lockLine.FindAllStringSubmatch(block, -1) {
		switch m[1] {
		case "ID":
			l.ID = m[2]
		case "Operation":
			l.Operation = m[2]
		case "Who":
			l.Who = m[2]
		case "Version":
			l.Version = m[2]
		case "Info":
			l.Info = m[2]
		case "Created":
			// Go's time.Time String, as terraform prints it.
			if t, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", m[2]); err == nil {
				l.Created = t
			}
		}
	}
	if l.ID == "" || strings.ContainsAny(l.ID, " \t\r") {
		return LockInfo{}, false
	}
	return l, true
}

// locking runs cmd, a terraform command that takes the state lock. When
// the state is locked: the lock Plugin.StaleLock names (one the agent
// found held by a dead job) is broken with `terraform force-unlock`,
// reported, and cmd runs again; any other lock belongs to a job that may
// be alive, and is waited for, cmd retried every lock poll until ctx ends.
// No other lock is ever broken.
func (r *run) locking(ctx context.Context, cmd func(context.Context) error) error {
	waiting := false
	for {
		err := cmd(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		l, ok := ParseLockError(err.Error())
		if !ok {
			return err
		}
		if r.staleLock != "" && l.ID == r.staleLock && r.brokenLock == nil {
			fmt.Fprintf(r.out, "nuon: the state is locked by a job that is no longer running (%s): force-unlock\n", l)
			r.logger.Warn("breaking the state lock of a dead job", "lock", l.ID, "who", l.Who, "operation", l.Operation, "created", l.Created)
			if err := r.tf.ForceUnlock(ctx, l.ID); err != nil {
				return fmt.Errorf("force-unlock %s: %w", l, err)
			}
			r.brokenLock = &l
			continue
		}
		if !waiting {
			fmt.Fprintf(r.out, "nuon: the state is locked by a job that may still run (%s): waiting for it\n", l)
			r.logger.Info("state locked; waiting", "lock", l.ID, "who", l.Who, "operation", l.Operation, "created", l.Created)
			waiting = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("state locked (%s): %w", l, ctx.Err())
		case <-time.After(r.lockPoll):
		}
	}
}
