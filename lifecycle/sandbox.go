package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/terraform-exec/tfexec"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/sandboxes"
)

// Outputs are the sandbox's outputs (sandboxes/README.md), as recorded in
// sandbox/outputs.json.
type Outputs struct {
	Cluster struct {
		Name                 string `json:"name"`
		Endpoint             string `json:"endpoint"`
		CertificateAuthority string `json:"certificate_authority"`
		ARN                  string `json:"arn"`
		Kubeconfig           string `json:"kubeconfig,omitempty"`
	} `json:"cluster"`
	VPC struct {
		ID               string   `json:"id"`
		PublicSubnetIDs  []string `json:"public_subnet_ids"`
		PrivateSubnetIDs []string `json:"private_subnet_ids"`
	} `json:"vpc"`
	Registry struct {
		URL              string `json:"url"`
		RepositoryPrefix string `json:"repository_prefix"`
		Region           string `json:"region"`
		Username         string `json:"username,omitempty"`
		PasswordFile     string `json:"password_file,omitempty"`
		CAFile           string `json:"ca_file,omitempty"`
	} `json:"registry"`
	DNS struct {
		Domain        string `json:"domain"`
		PublicZoneID  string `json:"public_zone_id"`
		PrivateZoneID string `json:"private_zone_id"`
	} `json:"dns"`
	Agent struct {
		RoleARN        string `json:"role_arn"`
		Namespace      string `json:"namespace"`
		ServiceAccount string `json:"service_account"`
	} `json:"agent"`
}

// terraform returns terraform-exec on the install's sandbox module,
// extracted from this binary into ModuleDir, its state in
// SandboxDir/terraform.tfstate: the layout of the agent's terraform jobs
// (package reconciler/terraform), so that the agent, given SandboxDir,
// adopts the sandbox with the same module path and state, and its first
// apply changes nothing.
func (o *Options) terraform() (*tfexec.Terraform, error) {
	dir := o.path(ModuleDir)
	if pids := reapOrphans(dir); len(pids) > 0 {
		o.Logger.Info("stopped processes a killed run left in the sandbox module", "install", o.ID, "pids", pids)
	}
	if err := sandboxes.Extract(sandboxes.Local, dir); err != nil {
		return nil, err
	}
	if _, err := writeIfChanged(filepath.Join(dir, localBackendFile), localBackend(o.path(SandboxDir+"/terraform.tfstate")), 0o600); err != nil {
		return nil, err
	}
	tf, err := tfexec.NewTerraform(dir, o.Terraform)
	if err != nil {
		return nil, err
	}
	env := map[string]string{"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if o.TFCLIConfig != "" {
		env["TF_CLI_CONFIG_FILE"] = o.TFCLIConfig
	}
	if err := tf.SetEnv(tfexec.CleanEnv(env)); err != nil {
		return nil, err
	}
	return tf, nil
}

// localBackendFile is the override file the agent's terraform plugin
// writes too: it keeps the state outside the module's folder, which each
// job replaces.
const localBackendFile = "nuon_override.tf.json"

// localBackend is the override that keeps the state in the local file
// state, as the terraform plugin writes it.
func localBackend(state string) []byte {
	b, _ := json.MarshalIndent(map[string]any{
		"terraform": map[string]any{"backend": map[string]any{"local": map[string]any{"path": state}}},
	}, "", "  ")
	return append(b, '\n')
}

// initError wraps an error of terraform init with the CLI configuration
// it read and how to give another: providers cannot come from the public
// registry on an offline machine.
func (o *Options) initError(err error) error {
	inUse := o.TFCLIConfig
	if inUse == "" {
		inUse = os.Getenv("TF_CLI_CONFIG_FILE")
	}
	return fmt.Errorf("terraform init: %w\n(%s)", err, toolcache.TerraformHint("--tf-cli-config", inUse))
}

func (o *Options) sandboxVars() []string {
	return []string{"install_id=" + o.ID, "dir=" + o.path(RuntimeDir), "kube_assets=" + o.KubeAssets}
}

// lockWait is how long terraform waits for the state lock, which a run
// killed a moment ago can still hold while its terraform finishes.
const lockWait = "5m"

// sandbox applies the install's sandbox module when its plan has changes
// and records its outputs.
func sandbox(ctx context.Context, o *Options, st *state) (string, string, error) {
	if o.Cloud == CloudAWS {
		return awsSandbox(ctx, o, st)
	}
	if err := toolcache.CheckKubeAssets(o.KubeAssets, "--kube-assets"); err != nil {
		return "", "", fmt.Errorf("the local sandbox needs the kube binaries: %w", err)
	}
	tf, err := o.terraform()
	if err != nil {
		return "", "", err
	}
	if err := tf.Init(ctx, tfexec.Upgrade(false)); err != nil {
		return "", "", o.initError(err)
	}
	return applyAndRecord(ctx, o, st, tf, o.sandboxVars(), o.deadPieces()...)
}

// applyAndRecord plans with vars (replacing the resources replace names),
// applies when the plan has changes and records the outputs.
func applyAndRecord(ctx context.Context, o *Options, st *state, tf *tfexec.Terraform, vars []string, replace ...string) (string, string, error) {
	plan := o.path(SandboxDir + "/tfplan")
	popts := []tfexec.PlanOption{tfexec.Out(plan), tfexec.LockTimeout(lockWait)}
	for _, addr := range replace {
		popts = append(popts, tfexec.Replace(addr))
	}
	for _, v := range vars {
		popts = append(popts, tfexec.Var(v))
	}
	changes, err := tf.Plan(ctx, popts...)
	if err != nil {
		return "", "", fmt.Errorf("terraform plan: %w", err)
	}
	result := Unchanged
	if changes {
		if err := tf.Apply(ctx, tfexec.DirOrPlan(plan), tfexec.LockTimeout(lockWait)); err != nil {
			return "", "", fmt.Errorf("terraform apply: %w", err)
		}
		result = Done
	}
	os.Remove(plan)
	out, err := tf.Output(ctx)
	if err != nil {
		return "", "", fmt.Errorf("terraform output: %w", err)
	}
	values := map[string]json.RawMessage{}
	for k, v := range out {
		values[k] = v.Value
	}
	b, err := json.MarshalIndent(values, "", "  ")
	if err != nil {
		return "", "", err
	}
	outs := &Outputs{}
	if err := json.Unmarshal(b, outs); err != nil {
		return "", "", fmt.Errorf("sandbox outputs: %w", err)
	}
	if outs.Registry.URL == "" || outs.Cluster.Endpoint == "" {
		return "", "", fmt.Errorf("sandbox outputs lack the registry url or the cluster endpoint")
	}
	if err := atomicfile.Write(o.path(OutputsFile), append(b, '\n'), 0o644); err != nil {
		return "", "", err
	}
	st.outputs = outs
	return result, outs.Cluster.Endpoint + ", registry " + outs.Registry.URL, nil
}

// readOutputs reads the outputs the sandbox phase recorded.
func readOutputs(o *Options) (*Outputs, error) {
	b, err := os.ReadFile(o.path(OutputsFile))
	if err != nil {
		return nil, err
	}
	outs := &Outputs{}
	return outs, json.Unmarshal(b, outs)
}

// destroySandbox destroys the sandbox module; with no state it does
// nothing.
func destroySandbox(ctx context.Context, o *Options) (string, error) {
	if !fileExists(o.path(SandboxDir + "/terraform.tfstate")) {
		return Unchanged, nil
	}
	tf, err := o.terraform()
	if err != nil {
		return "", err
	}
	if err := tf.Init(ctx, tfexec.Upgrade(false)); err != nil {
		return "", o.initError(err)
	}
	st, err := tf.Show(ctx)
	if err != nil {
		return "", fmt.Errorf("terraform show: %w", err)
	}
	if st.Values == nil || st.Values.RootModule == nil || len(st.Values.RootModule.Resources) == 0 {
		return Unchanged, nil
	}
	dopts := []tfexec.DestroyOption{tfexec.LockTimeout(lockWait), tfexec.Refresh(false)}
	for _, v := range o.sandboxVars() {
		dopts = append(dopts, tfexec.Var(v))
	}
	if err := tf.Destroy(ctx, dopts...); err != nil {
		return "", fmt.Errorf("terraform destroy: %w", err)
	}
	// The outputs named what is gone now.
	if err := os.Remove(o.path(OutputsFile)); err != nil && !os.IsNotExist(err) {
		return "", err
	}
	return Done, nil
}

// pieces of the local sandbox: the resource, its pid files and the files
// its outputs read.
var localPieces = []struct {
	addr        string
	pids, files []string
}{
	{"terraform_data.kube", []string{"kube/etcd.pid", "kube/kube-apiserver.pid"}, []string{"kube/kubeconfig"}},
	{"terraform_data.registry", []string{"registry/pid"}, []string{"registry/host", "registry/password", "registry/cert.pem"}},
}

// deadPieces lists the local sandbox's resources that the state has but
// whose processes are not running or whose files are missing: a run killed
// half way, or a machine restarted. They are replaced: the destroy-time
// provisioner stops what is left, the create-time one starts them again.
func (o *Options) deadPieces() []string {
	b, err := os.ReadFile(o.path(SandboxDir + "/terraform.tfstate"))
	if err != nil {
		return nil
	}
	var st struct {
		Resources []struct {
			Mode, Type, Name string
		} `json:"resources"`
	}
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	inState := map[string]bool{}
	for _, r := range st.Resources {
		if r.Mode == "managed" {
			inState[r.Type+"."+r.Name] = true
		}
	}
	var dead []string
	for _, p := range localPieces {
		if !inState[p.addr] {
			continue
		}
		ok := true
		for _, f := range p.pids {
			ok = ok && pidAlive(o.path(RuntimeDir+"/"+f))
		}
		for _, f := range p.files {
			ok = ok && fileExists(o.path(RuntimeDir+"/"+f))
		}
		if !ok {
			dead = append(dead, p.addr)
		}
	}
	return dead
}

// pidAlive tells whether the pid file names a running process.
func pidAlive(file string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid > 0 && syscall.Kill(pid, 0) == nil
}
