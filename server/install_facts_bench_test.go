package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
)

// factsRollout is the rollout the benchmarks add to channel stable: the
// controller reads the install files only while a channel declares one.
const factsRollout = "rollout:\n  waves:\n    - {name: one, percent: 1}\n    - {name: rest, rest: true}\n"

// factsFleet is a tenant of n installs on fixtures/tenant's app, on
// channels stable and beta with a few label sets, committed on main.
func factsFleet(b *testing.B, n int) (dir string, main plumbing.Hash) {
	b.Helper()
	dir = filepath.Join(b.TempDir(), "tenant.git")
	gittest.InitBare(b, dir)
	files := map[string][]byte{}
	for _, sub := range []string{"nuon.yaml", "channels/beta.yaml", "channels/stable.yaml"} {
		files[sub] = mustRead(os.ReadFile(filepath.Join("../fixtures/tenant", sub)))
	}
	files["channels/stable.yaml"] = append(files["channels/stable.yaml"], factsRollout...)
	rels, err := os.ReadDir("../fixtures/tenant/releases")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range rels {
		files["releases/"+e.Name()] = mustRead(os.ReadFile(filepath.Join("../fixtures/tenant/releases", e.Name())))
	}
	acme := string(mustRead(os.ReadFile("../fixtures/tenant/installs/acme.yaml")))
	key := acme[strings.Index(acme, "agentKey:"):]
	for i := range n {
		id := fmt.Sprintf("i%07d", i)
		ch := []string{"stable", "beta"}[i%2]
		files["installs/"+id+".yaml"] = fmt.Appendf(nil, "channel: %s\ninputs: {cidr: 10.0.0.0/16, domain: %s.shop.example}\ncloud: {provider: aws, region: us-east-1, accountID: \"111111111111\"}\nsandbox: {name: aws-eks, version: 0.4.0}\nregistry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-%s\nlabels: {ring: r%d, region: eu}\n%s",
			ch, id, id, i%5, key)
	}
	return dir, plumbing.NewHash(gittest.FastImport(b, dir, "main", "", time.Unix(1e9, 0), files))
}

// factsMillion is a hard-link copy of the cached million-install
// repository (NUON_BENCH_FACTS_REPO, its rendered.git), with a rollout
// added to channel stable on main.
func factsMillion(b *testing.B, src string) (dir string, main plumbing.Hash) {
	b.Helper()
	dir = gittest.LinkCopy(b, src, "rendered.git")
	old := gittest.Git(b, dir, "rev-parse", "main")
	stable := gittest.Git(b, dir, "show", "main:channels/stable.yaml")
	return dir, plumbing.NewHash(gittest.FastImport(b, dir, "main", old, time.Unix(2e9, 0),
		map[string][]byte{"channels/stable.yaml": []byte(stable + "\n" + factsRollout)}))
}

// BenchmarkRolloutInstallsFirstRead: the rollout controller's first read
// of main's install files after a start, cold (no store) and after a
// restart (the store of the cold read), at NUON_BENCH_FACTS_N installs
// (100,000 unless set) or over NUON_BENCH_FACTS_REPO. It reports the
// files parsed, the store's bytes and the heap the read holds.
//
//	go test -run '^$' -bench BenchmarkRolloutInstallsFirstRead -benchtime=1x ./server/
func BenchmarkRolloutInstallsFirstRead(b *testing.B) {
	var dir string
	var main plumbing.Hash
	if src := os.Getenv("NUON_BENCH_FACTS_REPO"); src != "" {
		dir, main = factsMillion(b, src)
	} else {
		n := 100_000
		if s := os.Getenv("NUON_BENCH_FACTS_N"); s != "" {
			var err error
			if n, err = strconv.Atoi(s); err != nil {
				b.Fatal(err)
			}
		}
		dir, main = factsFleet(b, n)
	}
	repo, err := gitrepo.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	store := filepath.Join(b.TempDir(), installFactsFile)
	read := func(b *testing.B, cold bool) {
		var before, after runtime.MemStats
		for b.Loop() {
			b.StopTimer()
			if cold {
				os.Remove(store)
			}
			ri := &rolloutInstalls{store: store}
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.StartTimer()
			st := repo.Storer()
			fsys, err := renderer.SourceFS(st, main)
			if err != nil {
				b.Fatal(err)
			}
			_, files, _, err := ri.read(context.Background(), st, main, fsys)
			if err != nil {
				b.Fatal(err)
			}
			if ri.saveErr != nil {
				b.Fatal(ri.saveErr)
			}
			b.StopTimer()
			if len(ri.fleet()) == 0 {
				b.Fatal("no installs")
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(len(files)), "installs")
			b.ReportMetric(float64(ri.parsed), "parsed")
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "heldMB")
			runtime.KeepAlive(ri)
			b.StartTimer()
		}
		if fi, err := os.Stat(store); err == nil {
			b.ReportMetric(float64(fi.Size())/(1<<20), "storeMB")
		}
	}
	b.Run("cold", func(b *testing.B) { read(b, true) })
	b.Run("restart", func(b *testing.B) { read(b, false) })
}
