package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/testenv"
)

// BenchmarkLogRequestRoundTrip measures a log request from `nuon logs` to
// the answer printed, with the binaries on loopback: the agent polls every
// 5 s (--interval 5s) and the CLI looks for the answer every 5 s (--poll
// 5s); a stand-in for the tenant server renders whenever the requests ref
// moves (checked every 500 ms). Expect about one agent interval plus one
// CLI poll at worst.
func BenchmarkLogRequestRoundTrip(b *testing.B) {
	tf := testenv.TerraformConfig(b)
	root := repoRoot()
	srv := gittest.NewServer(b)
	bare := srv.InitBare(b, "tenant.git")
	src := b.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		b.Fatal(err)
	}
	keys := filepath.Join(root, "fixtures", "keys")
	operator, _ := os.ReadFile(filepath.Join(keys, "initech.pub"))
	if err := os.MkdirAll(filepath.Join(src, "trust"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "trust", "requests"), []byte("alice "+string(operator)), 0o644); err != nil {
		b.Fatal(err)
	}
	gittest.CommitDir(b, bare, "main", src, "shop")
	url := srv.URL("tenant.git")
	work := b.TempDir()
	trust := filepath.Join(work, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		b.Fatal(err)
	}
	requestTrust := filepath.Join(work, "request_signers")
	if err := os.WriteFile(requestTrust, []byte("alice "+string(operator)), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + tf, "NUON_SECRET_LICENSE_KEY=bench-license", "CHECKPOINT_DISABLE=1"}
	cache := "--cache-dir=" + filepath.Join(work, "cache")
	render := func() { nuon(b, env, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"), cache) }
	layout := fixtureLayout(b)
	agentArgs := []string{"agent", "--repo", url, "--install", "acme", "--trust", trust, "--request-trust", requestTrust,
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "acme"),
		"--artifacts", layout, "--insecure-skip-artifact-verification"}
	render()
	nuon(b, env, 0, append(agentArgs, "--once")...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := exec.CommandContext(ctx, nuonBinary(b), append(agentArgs, "--interval", "5s")...)
	agent.Env = append(os.Environ(), env...)
	if err := agent.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); _ = agent.Wait() }()
	go func() {
		last := ""
		for ctx.Err() == nil {
			head, _ := gittest.Run(bare, nil, "for-each-ref", "--format=%(objectname)", "refs/heads/nuon/requests")
			if h := strings.TrimSpace(string(head)); h != last {
				last = h
				_ = exec.CommandContext(ctx, nuonBinary(b), "render", "--repo", url, "--key", filepath.Join(keys, "render"), cache).Run()
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	for b.Loop() {
		out := nuon(b, env, 0, "logs", "acme", "database", "--repo", url, "--key", filepath.Join(keys, "initech"), "--poll", "5s", cache)
		if !strings.Contains(out, "job") {
			b.Fatalf("answer:\n%s", out)
		}
	}
}
