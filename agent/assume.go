package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

// AssumeRoleFrom returns a Config.AssumeRole that assumes a sandbox's
// role (the stack's maintenance role) with its ExternalId, from the
// agent's own AWS identity, which identity returns for each job (so
// expiring pod credentials are refreshed), with stack.AssumeRole and opts.
// The role's temporary credentials become the job's environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and
// AWS_REGION), never its manifest; the secret key and session token are
// also given as secrets of the job (redact.EnvPrefix), so the job redacts
// them from its log and result like any secret.
func AssumeRoleFrom(identity func(context.Context) (aws.Config, error), opts ...stack.AssumeOption) func(context.Context, schemas.SandboxRole) ([]string, error) {
	return func(ctx context.Context, role schemas.SandboxRole) ([]string, error) {
		cfg, err := identity(ctx)
		if err != nil {
			return nil, fmt.Errorf("the agent's AWS identity: %w", err)
		}
		creds, err := stack.AssumeRole(ctx, cfg, role.ARN, role.ExternalID, opts...)
		if err != nil {
			return nil, err
		}
		var env []string
		for k, v := range creds.Env() {
			env = append(env, k+"="+v)
			if k == "AWS_SECRET_ACCESS_KEY" || k == "AWS_SESSION_TOKEN" {
				env = append(env, redact.EnvPrefix+k+"="+v)
			}
		}
		slices.Sort(env)
		return env, nil
	}
}
