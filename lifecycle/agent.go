package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/client-go/tools/clientcmd"

	"nuon.dev/nuon/internal/atomicfile"
)

// registryPasswordEnv is where nuon-agent reads the install registry's
// password (cmd/internal/cli).
const registryPasswordEnv = "NUON_REGISTRY_PASSWORD"

// gitTokenEnv is where nuon-agent reads the tenant repository's token.
const gitTokenEnv = "NUON_GIT_TOKEN"

// agentPID returns the pid of the install's running agent, or 0.
func agentPID(o *Options) int {
	b, err := os.ReadFile(o.path(AgentPIDFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	// A recycled pid is not our agent: its command line names the install.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && !strings.Contains(string(cmdline), o.path(AgentDir)) {
		return 0
	}
	return pid
}

func (o *Options) agentBinary() (string, error) {
	if o.Agent != "" {
		return exec.LookPath(o.Agent)
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "nuon-agent"); fileExists(p) {
			return p, nil
		}
	}
	return exec.LookPath("nuon-agent")
}

// startAgent runs nuon-agent as a process in its own session, unless it
// runs already: on the local sandbox no kubelet runs the agent's
// Deployment.
func startAgent(ctx context.Context, o *Options, st *state) (string, string, error) {
	if o.Cloud == CloudAWS {
		return awsAgent(ctx, o, st)
	}
	if o.AgentMode == AgentKubernetes {
		return applyAgent(ctx, o, st)
	}
	if pid := agentPID(o); pid != 0 {
		return Unchanged, fmt.Sprintf("pid %d, log %s", pid, o.path(AgentLogFile)), nil
	}
	outs := st.outputs
	if outs == nil {
		var err error
		if outs, err = readOutputs(o); err != nil {
			return "", "", fmt.Errorf("sandbox outputs: %w (the sandbox phase records them: run create without --phase, or with --phase sandbox)", err)
		}
	}
	bin, err := o.agentBinary()
	if err != nil {
		return "", "", fmt.Errorf("nuon-agent: %w (--agent-binary names it)", err)
	}
	password, err := os.ReadFile(outs.Registry.PasswordFile)
	if err != nil {
		return "", "", fmt.Errorf("registry password: %w", err)
	}
	args := []string{"agent", "--repo", o.Repo, "--install", o.ID}
	// The trust root given at creation, when there is one; otherwise the
	// allowed_signers file of the render key (deprecated).
	if fileExists(o.path(TrustRootFile)) {
		args = append(args, "--trust-root", o.path(TrustRootFile))
	} else {
		args = append(args, "--trust", o.path(TrustFile))
	}
	args = append(args, "--key", o.path(KeyFile), "--workdir", o.path(AgentDir),
		"--registry", outs.Registry.URL, "--registry-ca", outs.Registry.CAFile,
		"--registry-username", outs.Registry.Username, "--kubeconfig", outs.Cluster.Kubeconfig,
		// The hand-over: the agent's sandbox jobs keep their state where
		// the sandbox phase left it.
		"--sandbox-dir", o.path(SandboxDir))
	// The sandbox's inputs that are paths of this machine, which the
	// install file does not hold.
	args = append(args, o.agentSandboxInputs()...)
	// What its terraform jobs and its secrets need, as create was given
	// them; --agent-flag comes after, and a flag given twice takes the
	// last value.
	if o.TFCLIConfig != "" {
		args = append(args, "--tf-cli-config", o.TFCLIConfig)
	}
	if o.SecretsFile != "" {
		args = append(args, "--secrets-file", o.SecretsFile)
	}
	args = append(args, o.AgentFlags...)
	logf, err := os.OpenFile(o.path(AgentLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", "", err
	}
	defer logf.Close()
	token, err := o.gitToken()
	if err != nil {
		return "", "", err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), registryPasswordEnv+"="+strings.TrimSpace(string(password)))
	if token != "" {
		cmd.Env = append(cmd.Env, gitTokenEnv+"="+token)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("start nuon-agent: %w", err)
	}
	pid := cmd.Process.Pid
	if err := atomicfile.Write(o.path(AgentPIDFile), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		return "", "", err
	}
	// An agent that exits at once (a bad flag, a missing file) is an error
	// now rather than a silent absence.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		os.Remove(o.path(AgentPIDFile))
		log, _ := os.ReadFile(o.path(AgentLogFile))
		return "", "", fmt.Errorf("nuon-agent exited at once (%v); its log:\n%s", err, tail(string(log), 2000))
	case <-time.After(500 * time.Millisecond):
	}
	return Done, fmt.Sprintf("pid %d, log %s", pid, o.path(AgentLogFile)), nil
}

// stopAgent stops the agent's session (the agent and its jobs) with
// SIGTERM and, after grace, SIGKILL.
func stopAgent(ctx context.Context, o *Options, grace time.Duration) (string, error) {
	pid := agentPID(o)
	if pid == 0 {
		os.Remove(o.path(AgentPIDFile))
		return Unchanged, nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if syscall.Kill(pid, 0) == nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	os.Remove(o.path(AgentPIDFile))
	return Done, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// applyAgent applies manifests/ to the sandbox's cluster with the
// install's key, trust file and registry (see ApplyAgent).
func applyAgent(ctx context.Context, o *Options, st *state) (string, string, error) {
	outs := st.outputs
	if outs == nil {
		var err error
		if outs, err = readOutputs(o); err != nil {
			return "", "", fmt.Errorf("sandbox outputs: %w (the sandbox phase records them: run create without --phase, or with --phase sandbox)", err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", outs.Cluster.Kubeconfig)
	if err != nil {
		return "", "", fmt.Errorf("the sandbox's kubeconfig: %w", err)
	}
	b := Bootstrap{Install: o.ID, Repo: o.Repo, Registry: outs.Registry.URL, RegistryUsername: outs.Registry.Username}
	if b.Key, err = os.ReadFile(o.path(KeyFile)); err != nil {
		return "", "", err
	}
	if err = o.bootstrapTrust(&b); err != nil {
		return "", "", err
	}
	if outs.Registry.PasswordFile != "" {
		pw, err := os.ReadFile(outs.Registry.PasswordFile)
		if err != nil {
			return "", "", err
		}
		b.RegistryPassword = strings.TrimSpace(string(pw))
	}
	if outs.Registry.CAFile != "" {
		if b.RegistryCA, err = os.ReadFile(outs.Registry.CAFile); err != nil {
			return "", "", err
		}
	}
	if b.GitToken, err = o.gitToken(); err != nil {
		return "", "", err
	}
	cs, err := ApplyAgent(ctx, cfg, b)
	if err != nil {
		return "", "", err
	}
	changed := 0
	for _, e := range cs.Entries {
		if e.Action != ssa.UnchangedAction {
			changed++
		}
	}
	if changed == 0 {
		return Unchanged, fmt.Sprintf("%d objects in %s", len(cs.Entries), outs.Cluster.Endpoint), nil
	}
	return Done, fmt.Sprintf("%d of %d objects applied to %s", changed, len(cs.Entries), outs.Cluster.Endpoint), nil
}

// gitToken reads GitTokenFile, if set.
func (o *Options) gitToken() (string, error) {
	if o.GitTokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(o.GitTokenFile)
	if err != nil {
		return "", fmt.Errorf("git token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// bootstrapTrust fills what judges desired state in b: the trust root's
// version kept at creation (TrustRootFile) when the install has one, else
// the allowed_signers file (TrustFile, deprecated).
func (o *Options) bootstrapTrust(b *Bootstrap) error {
	var err error
	if fileExists(o.path(TrustRootFile)) {
		b.TrustRoot, err = os.ReadFile(o.path(TrustRootFile))
		return err
	}
	b.Trust, err = os.ReadFile(o.path(TrustFile))
	return err
}
