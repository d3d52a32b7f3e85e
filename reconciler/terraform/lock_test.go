package terraform

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockedStateWaits holds the component's state lock with another,
// live terraform apply and runs an Apply whose stale lock (the one the
// agent would say is a dead job's) is another ID: the Apply sees "state
// locked", waits without breaking the lock, and applies once the other
// apply released it; the other apply ends well.
func TestLockedStateWaits(t *testing.T) {
	p := realPlugin(t, nil)
	p.StaleLock, p.LockPoll = "00000000-dead-dead-dead-000000000000", 200*time.Millisecond
	stateDir := t.TempDir()
	state := filepath.Join(stateDir, stateFile)

	// The holder: its own working directory, the component's state file.
	holder := t.TempDir()
	main := fmt.Sprintf(`terraform {
  backend "local" { path = %q }
}
resource "terraform_data" "hold" {
  provisioner "local-exec" { command = "sleep 3" }
}
`, state)
	if err := os.WriteFile(filepath.Join(holder, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := func(args ...string) *exec.Cmd {
		cmd := exec.Command(DefaultBinary, args...)
		cmd.Dir = holder
		cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE="+p.CLIConfig)
		return cmd
	}
	if out, err := tf("init", "-input=false", "-no-color").CombinedOutput(); err != nil {
		t.Fatalf("terraform init: %v\n%s", err, out)
	}
	var holderOut strings.Builder
	apply := tf("apply", "-auto-approve", "-input=false", "-no-color")
	apply.Stdout, apply.Stderr = &holderOut, &holderOut
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- apply.Wait() }()
	t.Cleanup(func() { _ = apply.Process.Kill() })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(stateDir, ".terraform.tfstate.lock.info")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder never took the lock:\n%s", holderOut.String())
		}
	}

	module := t.TempDir()
	if err := os.WriteFile(filepath.Join(module, "main.tf"), []byte(`resource "terraform_data" "thing" { input = "v1" }`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newEnv(stateDir)
	res, err := p.Apply(t.Context(), newJob("network", module, nil), env.Env)
	if err != nil {
		t.Fatalf("Apply: %v\n%s", err, env.log.String())
	}
	if err := <-held; err != nil {
		t.Errorf("the holder's apply: %v (its lock broken?)\n%s", err, holderOut.String())
	}
	log := env.log.String()
	if !strings.Contains(log, "Error acquiring the state lock") || !strings.Contains(log, "may still run") {
		t.Errorf("the Apply did not meet and wait for the lock:\n%s", log)
	}
	if strings.Contains(log, "force-unlock") || res.BrokenLock != nil {
		t.Errorf("the Apply broke a live lock (%+v):\n%s", res.BrokenLock, log)
	}
}
