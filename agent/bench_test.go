package agent_test

import (
	"context"
	"fmt"
	"nuon.dev/nuon/schemas"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
)

// addInstallRefs creates n more install refs on the tenant, all pointing
// at one commit: what a fleet of n installs looks like to a poll.
func addInstallRefs(tb testing.TB, bare string, n int) {
	tb.Helper()
	head := gittest.Git(tb, bare, "rev-parse", "refs/heads/nuon/installs/globex")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "create refs/heads/nuon/installs/fleet-%05d %s\n", i, head)
	}
	if _, err := gittest.Run(bare, []byte(b.String()), "update-ref", "--stdin"); err != nil {
		tb.Fatal(err)
	}
	// A git host keeps its refs packed; 10,000 loose ref files would make
	// every ls-refs read the directory.
	gittest.Git(tb, bare, "pack-refs", "--all")
}

// BenchmarkIdlePoll measures a whole reconcile of an agent whose desired
// ref did not move, with 1, 1,000 and 10,000 installs in the repository:
// requests and response bytes per poll, counted at the git server.
func BenchmarkIdlePoll(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			tn := newTenant(b)
			addInstallRefs(b, tn.bare, n-2)
			a := tn.agentIn("acme", b.TempDir())
			if _, err := a.Reconcile(context.Background()); err != nil {
				b.Fatal(err)
			}
			tn.srv.Reset()
			for b.Loop() {
				rep, err := a.Reconcile(context.Background())
				if err != nil || !rep.Idle {
					b.Fatalf("poll: idle %v, %v", rep.Idle, err)
				}
			}
			b.ReportMetric(float64(tn.srv.Requests())/float64(b.N), "requests/op")
			b.ReportMetric(float64(tn.srv.Bytes())/float64(b.N), "bytes/op")
		})
	}
}

// BenchmarkFetchAfterFleetRender measures what this agent downloads after a
// render that changed every other install and this one: the bytes of its
// fetch, counted at the git server, with 10 and 1,000 installs.
func BenchmarkFetchAfterFleetRender(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			tn := newTenant(b)
			for i := range n - 2 {
				id := fmt.Sprintf("fleet-%04d", i)
				tn.keys[id] = tn.keys["globex"]
				tn.setInstall(id, tn.keys["globex"], "false", "0s")
			}
			tn.commit("a fleet")
			tn.renderMain()
			remote := agent.NewRemote(tn.srv.URL("tenant.git"), nil)
			var bytes, requests int64
			round := 0
			for b.Loop() {
				round++
				b.StopTimer()
				st := memory.NewStorage()
				first := heads(b, remote, "acme")
				if err := remote.Fetch(context.Background(), st, first); err != nil {
					b.Fatal(err)
				}
				_ = st.SetReference(plumbing.NewHashReference("refs/nuon/fetched", first))
				// Re-render every install: acme and every other one change.
				for id := range tn.keys {
					tn.setInstall(id, tn.keys[id], "false", fmt.Sprintf("%dms", round))
				}
				tn.commit("change every install")
				tn.renderMain()
				next := heads(b, remote, "acme")
				tn.srv.Reset()
				b.StartTimer()
				if err := remote.Fetch(context.Background(), st, next); err != nil {
					b.Fatal(err)
				}
				bytes += tn.srv.Bytes()
				requests += tn.srv.Requests()
			}
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/op")
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
			rendered := gittest.Git(b, tn.bare, "count-objects", "-v")
			b.Logf("repository after the renders: %s", strings.ReplaceAll(rendered, "\n", ", "))
		})
	}
}

func heads(tb testing.TB, r agent.Remote, id string) plumbing.Hash {
	tb.Helper()
	h, err := r.Heads(context.Background(), plumbing.ReferenceName(schemas.InstallRef(id)))
	if err != nil {
		tb.Fatal(err)
	}
	return h[plumbing.ReferenceName(schemas.InstallRef(id))]
}
