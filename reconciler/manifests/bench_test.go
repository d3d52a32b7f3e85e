package manifests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/schemas"
)

// benchObjects writes n objects, half ConfigMaps and half Deployments, in
// files of 50, with the given generation in the first changed of every 10.
func benchObjects(tb testing.TB, dir string, n, changed int) {
	tb.Helper()
	var b strings.Builder
	for i := range n {
		gen := 1
		if i%10 == 0 && i/10 < changed {
			gen = 2
		}
		if i%2 == 0 {
			fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%03d\ndata:\n  generation: %q\n  payload: %q\n---\n", i, fmt.Sprint(gen), strings.Repeat("x", 200))
		} else {
			fmt.Fprintf(&b, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-%03d
spec:
  replicas: 1
  selector:
    matchLabels: {app: web-%03d}
  template:
    metadata:
      labels: {app: web-%03d}
    spec:
      containers:
        - name: web
          image: registry.example/web:%d
          env:
            - {name: GENERATION, value: "%d"}
---
`, i, i, i, gen, gen)
		}
		if (i+1)%50 == 0 || i == n-1 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("objects-%03d.yaml", i/50)), []byte(b.String()), 0o644); err != nil {
				tb.Fatal(err)
			}
			b.Reset()
		}
	}
}

// BenchmarkApply500 applies 500 objects (250 ConfigMaps, 250 Deployments)
// with the plugin and with `kubectl apply --server-side` on the same API
// server: create, a no-op re-apply, and a change to 10% of the objects.
func BenchmarkApply500(b *testing.B) {
	const n, changed = 500, 50
	srv := kubetest.Shared(b)
	kubectl := kubetest.Kubectl(b)
	v1, v2 := b.TempDir(), b.TempDir()
	benchObjects(b, v1, n, 0)
	benchObjects(b, v2, n, changed)

	var nuon, kctl [3]time.Duration
	var noopPatches, noopRequests int
	for b.Loop() {
		// The plugin.
		ns := srv.Namespace(b)
		p, counts := testPlugin(b, srv)
		stateDir := b.TempDir()
		for i, dir := range []string{v1, v1, v2} {
			env, log := testEnv(b, stateDir)
			job := newJob("bench", ns, dir, nil)
			counts.reset()
			began := time.Now()
			res, err := p.Apply(b.Context(), job, env)
			nuon[i] += time.Since(began)
			if err != nil {
				b.Fatalf("%v\n%s", err, log)
			}
			sent := counts.reset()
			if i == 1 {
				noopPatches += sent["PATCH"] + sent["PATCH dry-run"]
				for _, c := range sent {
					noopRequests += c
				}
				if res.Changed {
					b.Errorf("the no-op re-apply changed something:\n%s", log)
				}
			}
			if i == 2 && !strings.Contains(log.String(), fmt.Sprintf("%d configured", changed)) {
				b.Errorf("10%% change:\n%s", lastLine(log.String()))
			}
		}

		// kubectl, on the same objects in another namespace.
		ns = srv.Namespace(b)
		for i, dir := range []string{v1, v1, v2} {
			cmd := exec.CommandContext(b.Context(), kubectl, "--kubeconfig", srv.Kubeconfig, "apply", "--server-side",
				"--field-manager=kubectl-bench", "-n", ns, "-f", dir)
			began := time.Now()
			out, err := cmd.CombinedOutput()
			kctl[i] += time.Since(began)
			if err != nil {
				b.Fatalf("kubectl: %v\n%s", err, out)
			}
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(per(nuon[0]), "create-ms")
	b.ReportMetric(per(nuon[1]), "noop-ms")
	b.ReportMetric(per(nuon[2]), "change10pct-ms")
	b.ReportMetric(per(kctl[0]), "kubectl-create-ms")
	b.ReportMetric(per(kctl[1]), "kubectl-noop-ms")
	b.ReportMetric(per(kctl[2]), "kubectl-change10pct-ms")
	b.ReportMetric(float64(kctl[0])/float64(nuon[0]), "create-speedup")
	b.ReportMetric(float64(noopPatches)/float64(b.N), "noop-patches")
	b.ReportMetric(float64(noopRequests)/float64(b.N), "noop-requests")
	if noopPatches != 0 {
		b.Errorf("a no-op re-apply sent %d PATCH requests", noopPatches)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// BenchmarkDrift500 runs drift checks of 500 objects (250 ConfigMaps, 250
// Deployments) with no drift against the real API server: as the agent
// runs them (the objects untouched since the apply: the plan's LISTs
// settle every one), and with every object's resourceVersion moved since
// the apply (a controller wrote their status: each is dry-run). Neither
// may send a PATCH that is not a dry-run.
func BenchmarkDrift500(b *testing.B) {
	const n = 500
	srv := kubetest.Shared(b)
	ns := srv.Namespace(b)
	p, counts := testPlugin(b, srv)
	dir := b.TempDir()
	benchObjects(b, dir, n, 0)
	stateDir := b.TempDir()
	env, log := testEnv(b, stateDir)
	if _, err := p.Apply(b.Context(), newJob("bench", ns, dir, nil), env); err != nil {
		b.Fatalf("%v\n%s", err, log)
	}
	inv, ok, err := readInventory(stateDir)
	if err != nil || !ok {
		b.Fatalf("inventory: %v", err)
	}
	moved := *inv
	moved.Objects = slices.Clone(inv.Objects)
	for i := range moved.Objects {
		moved.Objects[i].ResourceVersion = "0"
	}

	type variant struct {
		name string
		inv  *Inventory
	}
	var took [2]time.Duration
	var sent [2]map[string]int
	for b.Loop() {
		for i, v := range []variant{{"untouched", inv}, {"moved", &moved}} {
			if err := v.inv.write(stateDir); err != nil {
				b.Fatal(err)
			}
			env, log := testEnv(b, stateDir)
			job := newJob("bench", ns, dir, nil)
			job.Operation = schemas.OpDrift
			counts.reset()
			began := time.Now()
			res, err := p.Drift(b.Context(), job, env)
			took[i] += time.Since(began)
			got := counts.reset()
			if err != nil {
				b.Fatalf("%s: %v\n%s", v.name, err, log)
			}
			if len(res.Drift) != 0 {
				b.Fatalf("%s: drift %+v, want none", v.name, res.Drift)
			}
			if got["PATCH"] != 0 || got["DELETE"] != 0 || got["POST"] != 0 || got["PUT"] != 0 {
				b.Fatalf("%s: a drift check wrote: %v", v.name, got)
			}
			sent[i] = got
		}
	}
	total := func(m map[string]int) (t int) {
		for _, c := range m {
			t += c
		}
		return t
	}
	per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(per(took[0]), "untouched-ms")
	b.ReportMetric(float64(total(sent[0])), "untouched-requests")
	b.ReportMetric(float64(sent[0]["PATCH dry-run"]), "untouched-dryruns")
	b.ReportMetric(per(took[1]), "moved-ms")
	b.ReportMetric(float64(total(sent[1])), "moved-requests")
	b.ReportMetric(float64(sent[1]["PATCH dry-run"]), "moved-dryruns")
	b.ReportMetric(float64(sent[0]["PATCH"]+sent[1]["PATCH"]), "patches")
}
