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
)

// BenchmarkLogRequestRoundTrip measures a log request from `nuon logs` to
// the answer printed, with the binaries on loopback: the agent polls every
// 5 s (--interval 5s) and the CLI looks for the answer every 5 s (--poll
// 5s); a stand-in for the tenant server renders whenever the requests ref
// moves (checked every 500 ms). Expect about one agent interval plus one
// CLI poll at worst.
func BenchmarkLogRequestRoundTrip(b *testing.B) {
	ot := newOpsTenant(b, nil)
	agentArgs := ot.agentArgs(b)
	ot.render(b)
	nuon(b, ot.env, 0, append(agentArgs, "--once")...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := exec.CommandContext(ctx, nuonBinary(b), append(agentArgs, "--interval", "5s")...)
	agent.Env = append(os.Environ(), ot.env...)
	if err := agent.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); _ = agent.Wait() }()
	go func() {
		last := ""
		for ctx.Err() == nil {
			head, _ := gittest.Run(ot.bare, nil, "for-each-ref", "--format=%(objectname)", "refs/heads/nuon/requests")
			if h := strings.TrimSpace(string(head)); h != last {
				last = h
				_ = exec.CommandContext(ctx, nuonBinary(b), ot.renderArgs()...).Run()
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	for b.Loop() {
		out := nuon(b, ot.env, 0, "logs", "acme", "database", "--repo", ot.url, "--key", filepath.Join(ot.keys, "initech"), "--poll", "5s", ot.cache)
		if !strings.Contains(out, "job") {
			b.Fatalf("answer:\n%s", out)
		}
	}
}
