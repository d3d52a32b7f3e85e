package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// handshakeOK is a POSIX sh snippet that answers a handshake for a plugin
// called sh that needs nothing, and falls through on other operations.
const handshakeOK = `req=$(cat)
case "$req" in *'"operation":"handshake"'*)
  echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"handshake","plugin":{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"sh","version":"1.0.0","protocols":[1],"operations":["apply","destroy","debug"],"capabilities":{}}}'
  exit 0;;
esac
`

// script writes an executable sh plugin.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBadPlugins: each way a plugin can break the protocol is a clear
// error, bounded in time and output, and the state directory is left as
// it was.
func TestBadPlugins(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		granted schemas.PluginCapabilities
		timeout time.Duration
		is      error
		want    string
	}{
		{name: "garbage", body: handshakeOK + "echo 'applied everything!'",
			is: ErrProtocol, want: "invalid JSON"},
		{name: "nothing", body: handshakeOK + "exit 0",
			is: ErrNoResponse, want: "no response"},
		{name: "nothing and a failure", body: handshakeOK + "echo boom >&2; exit 1",
			is: ErrProtocol, want: "exited 1 (the operation failed) with no response"},
		{name: "exit 0 with an error", body: handshakeOK +
			`echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","error":{"code":"failed","message":"zone is locked"}}'`,
			is: ErrFailed, want: "zone is locked (failed, exit 0)"},
		{name: "a failure code without an error", body: handshakeOK +
			`echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply"}'; exit 1`,
			is: ErrProtocol, want: "exited 1 (the operation failed) with a response that has no error"},
		{name: "an answer to another operation", body: handshakeOK +
			`echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"destroy","changed":true}'`,
			is: ErrProtocol, want: "response to destroy, the request was apply"},
		{name: "two documents", body: handshakeOK +
			`echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply"} {}'`,
			is: ErrProtocol, want: "plugin response"},
		{name: "a field the schema does not know", body: handshakeOK +
			`echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","applied":true}'`,
			is: ErrProtocol, want: `unknown field "applied"`},
		{name: "hangs", body: handshakeOK + "sleep 600", timeout: 300 * time.Millisecond,
			is: context.DeadlineExceeded, want: "stopped"},
		{name: "hangs ignoring SIGTERM, with a child", body: handshakeOK + "trap '' TERM; sleep 600 & sleep 600", timeout: 300 * time.Millisecond,
			is: context.DeadlineExceeded, want: "stopped"},
		{name: "writes 1 GB", body: handshakeOK + "head -c 1073741824 /dev/zero",
			is: ErrTooLarge, want: "more than 16777216 bytes on stdout"},
		{name: "unknown protocol", body: `cat >/dev/null; echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":7,"operation":"handshake","plugin":{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"sh","version":"9.0.0","protocols":[7],"operations":["apply"],"capabilities":{}}}'`,
			is: ErrVersion, want: "plugin sh speaks protocols [7] and chose 7; this job speaks [1]"},
		{name: "a capability not granted", body: `cat >/dev/null; echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"handshake","plugin":{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"sh","version":"1.0.0","protocols":[1],"operations":["apply"],"capabilities":{"network":true,"env":["KUBECONFIG"]}}}'`,
			granted: schemas.PluginCapabilities{Env: []string{"HOME"}},
			is:      ErrNotGranted, want: "plugin sh 1.0.0 needs network, env KUBECONFIG: capability not granted by this job"},
		{name: "a handshake without a manifest", body: `cat >/dev/null; echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"handshake"}'`,
			is: ErrProtocol, want: "no plugin manifest"},
		{name: "not executable", body: "", is: nil, want: "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := script(t, tt.body)
			if tt.name == "not executable" {
				os.Chmod(path, 0o644)
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			job := testJob(t, "sh", schemas.OpUpdate, nil)
			if err := os.MkdirAll(job.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			p := &Process{Runner: Runner{Path: path, KillGrace: 200 * time.Millisecond}, Granted: tt.granted}
			start := time.Now()
			res, err := p.Apply(ctx, job, reconciler.Env{StateDir: job.StateDir})
			if err == nil {
				t.Fatalf("apply = %+v, want an error", res)
			}
			t.Log(err)
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
			entries, _ := os.ReadDir(job.StateDir)
			if len(entries) != 0 {
				t.Errorf("state directory has %d entries", len(entries))
			}
		})
	}
}

// TestRunnerKillsProcessGroup: when a job is stopped, nothing the plugin
// started survives it.
func TestRunnerKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	path := script(t, handshakeOK+"sleep 600 & echo $! > "+pidFile+"; wait")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	job := testJob(t, "sh", schemas.OpUpdate, nil)
	p := &Process{Runner: Runner{Path: path, KillGrace: 100 * time.Millisecond}}
	if _, err := p.Apply(ctx, job, reconciler.Env{StateDir: job.StateDir}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("apply = %v", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, c := range strings.TrimSpace(string(b)) {
		pid = pid*10 + int(c-'0')
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's child %d outlived the job", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunnerEnvironment: a plugin sees only what it is granted.
func TestRunnerEnvironment(t *testing.T) {
	environ := []string{"PATH=/usr/bin:/bin", "HOME=/root", "AWS_SECRET_ACCESS_KEY=aws-secret",
		"NUON_SECRET_DB=db-secret", "KUBECONFIG=/k", "GITHUB_TOKEN=ghp-x", "SSH_AUTH_SOCK=/s"}
	body := handshakeOK + `printf '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","outputs":{"env":"%s"}}' "$(env | sort | tr '\n' ' ')"`
	tests := []struct {
		name    string
		granted schemas.PluginCapabilities
		want    []string
	}{
		{"nothing", schemas.PluginCapabilities{}, nil},
		{"secrets", schemas.PluginCapabilities{Secrets: true}, []string{"NUON_SECRET_DB=db-secret"}},
		{"cloud role and an env variable", schemas.PluginCapabilities{CloudRole: true, Env: []string{"KUBECONFIG", "HOME"}},
			[]string{"AWS_SECRET_ACCESS_KEY=aws-secret", "KUBECONFIG=/k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := testJob(t, "sh", schemas.OpUpdate, nil)
			p := &Process{Runner: Runner{Path: script(t, body), Environ: environ}, Granted: tt.granted}
			res, err := p.Apply(context.Background(), job, reconciler.Env{StateDir: job.StateDir})
			if err != nil {
				t.Fatal(err)
			}
			env, _ := res.Outputs["env"].(string)
			for _, kv := range environ {
				k, _, _ := strings.Cut(kv, "=")
				want := false
				for _, w := range tt.want {
					want = want || w == kv
				}
				if k == "PATH" {
					want = true
				}
				if got := strings.Contains(env, kv); got != want {
					t.Errorf("%s passed = %v, want %v (env: %s)", kv, got, want, env)
				}
			}
			if !strings.Contains(env, "NUON_PLUGIN_PROTOCOL=1") || strings.Contains(env, "HOME=/root") {
				t.Errorf("env = %s", env)
			}
		})
	}
}

// TestRunnerLogBounded: a plugin that floods stderr is not blocked, and
// the job's log keeps only the bound.
func TestRunnerLogBounded(t *testing.T) {
	body := handshakeOK + `head -c 5000000 /dev/zero | tr '\0' x >&2; echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply"}'`
	var log bytes.Buffer
	job := testJob(t, "sh", schemas.OpUpdate, nil)
	p := &Process{Runner: Runner{Path: script(t, body), MaxLog: 1000}}
	if _, err := p.Apply(context.Background(), job, reconciler.Env{StateDir: job.StateDir, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if log.Len() > 1100 || !strings.Contains(log.String(), "[plugin log cut off after 1000 bytes]") {
		t.Errorf("log has %d bytes: %.200q", log.Len(), log.String())
	}
}

// TestRefusedDebugCommand: a plugin's refusal is a debugcmd refusal to
// the job, so the agent answers the request with its reason.
func TestRefusedDebugCommand(t *testing.T) {
	body := handshakeOK + `echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"debug","error":{"code":"refused","message":"rm is not a read-only command"}}'; exit 4`
	job := testJob(t, "sh", schemas.OpDebug, nil)
	job.Debug = &schemas.DebugRequest{Command: []string{"rm", "-rf", "/"}}
	p := &Process{Runner: Runner{Path: script(t, body)}}
	err := p.Debug(context.Background(), job, reconciler.Env{StateDir: job.StateDir}, debugcmd.Command{}, &bytes.Buffer{})
	if !errors.Is(err, debugcmd.ErrRefused) || !strings.Contains(err.Error(), "exit 4") {
		t.Errorf("debug = %v, want a refusal", err)
	}
}

// TestRunnerNetwork: a plugin not granted the network cannot reach a
// server the job can; granted it, it can.
func TestRunnerNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	// Perl is the only tool at hand that opens a TCP connection.
	body := handshakeOK + fmt.Sprintf(`got=$(perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:%d", Timeout => 2) or do { print "refused: $!"; exit }; print scalar <$s>' | tr -d '\n"')
printf '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","outputs":{"got":"%%s"}}' "$got"`, port)
	for _, tt := range []struct {
		name    string
		granted schemas.PluginCapabilities
		want    string
	}{
		{"not granted", schemas.PluginCapabilities{}, "refused: Network is unreachable"},
		{"granted", schemas.PluginCapabilities{Network: true}, "hello"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := testJob(t, "sh", schemas.OpUpdate, nil)
			p := &Process{Runner: Runner{Path: script(t, body)}, Granted: tt.granted}
			res, err := p.Apply(context.Background(), job, reconciler.Env{StateDir: job.StateDir})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Outputs["got"]; got != tt.want {
				t.Errorf("the plugin got %q, want %q", got, tt.want)
			}
		})
	}
}
