package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
)

// BenchmarkAgentIdleMemory runs the agent binary (nuon-agent, and for
// comparison the whole nuon CLI's `nuon agent`) against a smart-HTTP git
// server, lets it converge and then poll idly every 100 ms for 3 s, and
// reports its resident memory (VmRSS) and peak (VmHWM) from /proc.
func BenchmarkAgentIdleMemory(b *testing.B) {
	for _, bin := range []string{"nuon-agent", "nuon"} {
		b.Run(bin, func(b *testing.B) { benchAgentIdleMemory(b, bin) })
	}
}

func benchAgentIdleMemory(b *testing.B, bin string) {
	root := repoRoot()
	keys := filepath.Join(root, "fixtures", "keys")
	srv := gittest.NewServer(b)
	bare := srv.InitBare(b, "tenant.git")
	src := b.TempDir()
	pub, _ := os.ReadFile(filepath.Join(keys, "acme.pub"))
	files := map[string]string{
		"nuon.yaml":            "name: idle\ncomponents:\n  - name: web\n    type: image\n    repository: registry.test/idle/web\n",
		"channels/stable.yaml": "components: {web: 1.0.0}\n",
		"releases/web.yaml":    "component: web\nversions:\n  - version: 1.0.0\n    artifacts:\n      image: {digest: \"sha256:" + strings.Repeat("a", 64) + "\"}\n",
		"installs/acme.yaml":   "channel: stable\ncloud: {provider: local}\nsandbox: {name: local}\nregistry: 127.0.0.1:5000/acme\nagentKey: " + string(bytes.TrimSpace(pub)) + "\n",
	}
	for name, content := range files {
		p := filepath.Join(src, name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	gittest.CommitDir(b, bare, "main", src, "idle app")
	work := b.TempDir()
	cache := "--cache-dir=" + filepath.Join(work, "cache")
	nuon(b, nil, 0, "render", "--repo", srv.URL("tenant.git"), "--key", filepath.Join(keys, "render"), cache)
	rpub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	trust := filepath.Join(work, "allowed_signers")
	_ = os.WriteFile(trust, []byte("renderer "+string(rpub)), 0o644)

	var rss, hwm, anon, file float64
	for b.Loop() {
		exe := nuonBinary(b)
		if bin == "nuon-agent" {
			exe = agentBinary(b)
		}
		cmd := exec.Command(exe, "agent", "--repo", srv.URL("tenant.git"), "--install", "acme",
			"--trust", trust, "--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "agent"),
			"--interval", "100ms", "--log-level", "warn",
			// No registry here: the image component stays Unsupported
			// rather than failing, and retried, for want of a vendor key.
			"--insecure-skip-artifact-verification")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := gittest.Run(bare, nil, "rev-parse", "--verify", "refs/heads/nuon/status/acme"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				b.Fatalf("agent did not report:\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		srv.Reset()
		time.Sleep(3 * time.Second)
		polls := srv.Requests()
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		rss, hwm = procKB(status, "VmRSS:")/1024, procKB(status, "VmHWM:")/1024
		anon, file = procKB(status, "RssAnon:")/1024, procKB(status, "RssFile:")/1024
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if polls < 10 {
			b.Fatalf("only %d polls in 3 s: not idle polling", polls)
		}
	}
	b.ReportMetric(rss, "rss-MB")
	b.ReportMetric(hwm, "peak-rss-MB")
	b.ReportMetric(anon, "anon-rss-MB")
	b.ReportMetric(file, "file-rss-MB")
}

func procKB(status []byte, key string) float64 {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				return v
			}
		}
	}
	return 0
}
