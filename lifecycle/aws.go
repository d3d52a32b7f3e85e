package lifecycle

import (
	"context"
	"os"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"

	"nuon.dev/nuon/sandboxes"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

// roleARN is the ARN of the install's role for phase p in the customer's
// account.
func (o *Options) roleARN(p stack.Phase) string {
	return "arn:aws:iam::" + o.AWS.Account + ":role/" + stack.RoleName(o.ID, p)
}

// assume assumes the install's role for phase p with its ExternalId,
// with a deadline on the call.
func (o *Options) assume(ctx context.Context, p stack.Phase) (*stack.Credentials, error) {
	opts := []stack.AssumeOption{stack.WithSessionName("nuon-install-" + o.ID)}
	if o.AWS.STSEndpoint != "" {
		opts = append(opts, stack.WithEndpoint(o.AWS.STSEndpoint))
	}
	if o.AWS.Timeout > 0 {
		opts = append(opts, stack.WithTimeout(o.AWS.Timeout))
	}
	cfg := o.AWS.Tenant.Copy()
	cfg.Region = o.AWS.Region
	return stack.AssumeRole(ctx, cfg, o.roleARN(p), o.AWS.ExternalID, opts...)
}

// SandboxStateKey is the key of the sandbox's Terraform state in the
// stack's bucket on AWS.
const SandboxStateKey = "sandbox/terraform.tfstate"

// sandboxState is where create keeps the sandbox's state on AWS, which
// installs/<id>.yaml names (sandbox.state) so that the agent's sandbox
// jobs keep using it.
func (o *Options) sandboxState() *schemas.S3State {
	return &schemas.S3State{Bucket: o.AWS.StateBucket, Key: SandboxStateKey, Region: o.AWS.Region}
}

// backendFile makes sandboxes/aws-eks keep its state in the stack's
// bucket; the bucket, key and region come as -backend-config.
const backendFile = `# Written by nuon install create: the state is in the customer's bucket.
terraform {
  backend "s3" {}
}
`

// awsTerraform is terraform-exec on sandboxes/aws-eks with the assumed
// role's credentials in its environment (never on its command line) and
// its S3 backend initialized.
func (o *Options) awsTerraform(ctx context.Context, creds *stack.Credentials) (*tfexec.Terraform, error) {
	dir := o.path(SandboxDir)
	if err := sandboxes.Extract(sandboxes.AWSEKS, dir); err != nil {
		return nil, err
	}
	if _, err := writeIfChanged(o.path(SandboxDir+"/backend.tf"), []byte(backendFile), 0o644); err != nil {
		return nil, err
	}
	tf, err := tfexec.NewTerraform(dir, o.Terraform)
	if err != nil {
		return nil, err
	}
	env := map[string]string{"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") && !strings.HasPrefix(k, "AWS_ENDPOINT_URL") {
			continue // only the assumed role's credentials, never the tenant's
		}
		env[k] = v
	}
	for k, v := range creds.Env() {
		env[k] = v
	}
	if o.TFCLIConfig != "" {
		env["TF_CLI_CONFIG_FILE"] = o.TFCLIConfig
	}
	if err := tf.SetEnv(tfexec.CleanEnv(env)); err != nil {
		return nil, err
	}
	st := o.sandboxState()
	err = tf.Init(ctx, tfexec.Upgrade(false), tfexec.Reconfigure(true),
		tfexec.BackendConfig("bucket="+st.Bucket),
		tfexec.BackendConfig("key="+st.Key),
		tfexec.BackendConfig("region="+st.Region),
		tfexec.BackendConfig("use_lockfile=true"),
		tfexec.BackendConfig("encrypt=true"))
	if err != nil {
		return nil, o.initError(err)
	}
	return tf, nil
}

// awsVars are sandboxes/aws-eks's variables; open lists the CIDRs the
// public endpoint is open to (none: private only).
func (o *Options) awsVars(open []string) []string {
	return []string{"install_id=" + o.ID, "region=" + o.AWS.Region, "domain=" + o.AWS.Domain,
		`availability_zones=` + hclList(o.AWS.AvailabilityZones),
		"maintenance_role_arn=" + o.roleARN(stack.Maintenance),
		"public_access_cidrs=" + hclList(open)}
}

func hclList(xs []string) string {
	if len(xs) == 0 {
		return "[]"
	}
	return `["` + strings.Join(xs, `","`) + `"]`
}

// awsSandbox assumes the provision role and applies sandboxes/aws-eks
// with it.
func awsSandbox(ctx context.Context, o *Options, st *state) (string, string, error) {
	creds, err := o.assume(ctx, stack.Provision)
	if err != nil {
		return "", "", err
	}
	o.Logger.InfoContext(ctx, "assumed the provision role", "install", o.ID, "credentials", creds)
	tf, err := o.awsTerraform(ctx, creds)
	if err != nil {
		return "", "", err
	}
	return applyAndRecord(ctx, o, st, tf, o.awsVars(o.AWS.BootstrapCIDRs))
}

// closeEndpoint applies sandboxes/aws-eks again with the public endpoint
// closed, once the agent is bootstrapped. Without BootstrapCIDRs the
// sandbox phase never opened it.
func closeEndpoint(ctx context.Context, o *Options, st *state) (string, string, error) {
	if len(o.AWS.BootstrapCIDRs) == 0 {
		return Unchanged, "private only (never opened)", nil
	}
	creds, err := o.assume(ctx, stack.Provision)
	if err != nil {
		return "", "", err
	}
	tf, err := o.awsTerraform(ctx, creds)
	if err != nil {
		return "", "", err
	}
	res, _, err := applyAndRecord(ctx, o, st, tf, o.awsVars(nil))
	if err != nil {
		return "", "", err
	}
	return res, "private only", nil
}
