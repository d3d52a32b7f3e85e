package terraform

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"nuon.dev/nuon/internal/tfstate"
	"nuon.dev/nuon/schemas"
)

// DefaultLockPoll is how often a job retries a state another live job has
// locked.
const DefaultLockPoll = 5 * time.Second

// KubernetesBackend keeps a component's state in Terraform's built-in
// kubernetes backend: a Secret (tfstate.StateSecretName) holding the state, and a
// Lease (tfstate.StateLeaseName) as its lock, both in Namespace.
type KubernetesBackend struct {
	// Namespace of the Secret and the Lease. Required.
	Namespace string
	// SecretSuffix names them (tfstate.StateSecretSuffix). Required.
	SecretSuffix string
	// Kubeconfig is the kubeconfig terraform reaches the API server with.
	// Default: KUBECONFIG from the job's environment, else the pod's
	// service account (in_cluster_config).
	Kubeconfig string
}

// backendFromEnv is the kubernetes backend the environment names, or nil.
func backendFromEnv(lookup func(string) (string, bool)) *KubernetesBackend {
	ns, _ := lookup(tfstate.EnvStateNamespace)
	suffix, _ := lookup(tfstate.EnvStateSecretSuffix)
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
		l, ok := tfstate.ParseLockError(err.Error())
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
