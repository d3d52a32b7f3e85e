package renderer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
)

// fleet returns the fixture app with n generated installs, spread over the
// two channels, each with its own inputs, cloud account and registry.
func fleet(tb testing.TB, n int) map[string][]byte {
	tb.Helper()
	files := fixtureFiles(tb)
	key, err := os.ReadFile(filepath.Join(fixtureKeys, "acme.pub"))
	if err != nil {
		tb.Fatal(err)
	}
	for name := range files {
		if strings.HasPrefix(name, "installs/") {
			delete(files, name)
		}
	}
	channels := []string{"stable", "beta"}
	regions := []string{"us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"}
	for i := range n {
		id := fmt.Sprintf("i%05d", i)
		account := fmt.Sprintf("%012d", 100000000000+i)
		region := regions[i%len(regions)]
		files["installs/"+id+".yaml"] = fmt.Appendf(nil, `channel: %s
inputs:
  cidr: 10.%d.%d.0/24
  domain: %s.shop.example
cloud:
  provider: aws
  region: %s
  accountID: "%s"
sandbox:
  name: aws-eks
  version: 0.4.0
registry: %s.dkr.ecr.%s.amazonaws.com/nuon-%s
agentKey: %s`, channels[i%2], i/256%256, i%256, id, region, account, account, region, id, key)
	}
	return files
}

// BenchmarkRender10k renders 10,000 installs cold into a bare repository on
// disk (render, write the objects, move 10,001 refs: ns/op), then, in the
// same run, has git fast-import write the same blobs, trees and commits
// (fastimport-ns, and the ratio x-fastimport), then re-renders after one
// install's input changed (rerender-ms).
func BenchmarkRender10k(b *testing.B) {
	const n = 10000
	files := fleet(b, n)
	seed := filepath.Join(b.TempDir(), "seed.git")
	gittest.InitBare(b, seed)
	r, err := gitrepo.Open(seed)
	if err != nil {
		b.Fatal(err)
	}
	source := commitFiles(b, r, "refs/heads/main", plumbing.ZeroHash, files)
	opts := options(b)
	ctx := context.Background()

	var fastImport, rerender time.Duration
	loops := 0
	for b.Loop() {
		loops++
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "tenant.git")
		if out, err := exec.Command("cp", "-a", seed, dir).CombinedOutput(); err != nil {
			b.Fatalf("copy seed: %v: %s", err, out)
		}
		b.StartTimer()

		repo, err := gitrepo.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		res, err := renderRepo(ctx, repo, "main", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := apply(ctx, repo, res, res.Updates); err != nil {
			b.Fatal(err)
		}

		b.StopTimer()
		if got := res.ChangedCount(); got != n {
			b.Fatalf("rendered %d installs, want %d", got, n)
		}
		fastImport += fastImportRender(b, res, repo, dir)

		id := "i04242"
		files["installs/"+id+".yaml"] = bytes.Replace(files["installs/"+id+".yaml"], []byte("cidr: 10."), []byte("cidr: 172."), 1)
		commitFiles(b, repo, "refs/heads/main", source, files)
		start := time.Now()
		repo, err = gitrepo.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		res, err = renderRepo(ctx, repo, "main", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := apply(ctx, repo, res, res.Updates); err != nil {
			b.Fatal(err)
		}
		rerender += time.Since(start)
		if got := res.ChangedCount(); got != 1 {
			b.Fatalf("re-render changed %d installs, want 1: %+v %s", got, installsByID(res)["i04242"], gittest.Git(b, dir, "show", "nuon/installs/i04242:components/database.json"))
		}
		files["installs/"+id+".yaml"] = bytes.Replace(files["installs/"+id+".yaml"], []byte("cidr: 172."), []byte("cidr: 10."), 1)
		b.StartTimer()
	}
	count := float64(loops)
	b.ReportMetric(float64(fastImport.Nanoseconds())/count, "fastimport-ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fastImport.Nanoseconds()), "x-fastimport")
	b.ReportMetric(float64(rerender.Milliseconds())/count, "rerender-ms/op")
}

// fastImportRender has git fast-import write what a render wrote into a
// fresh copy of the repository at dir: every install's files as blobs, one
// commit per install on its own ref and the rendered commit, whose install
// folders are the install commits' trees. It returns how long git took.
func fastImportRender(tb testing.TB, res *renderer.Result, repo *gitrepo.Repo, dir string) time.Duration {
	tb.Helper()
	src, err := renderer.LoadSource(repo.Storer(), res.Source)
	if err != nil {
		tb.Fatal(err)
	}
	var s bytes.Buffer
	data := func(b []byte) {
		fmt.Fprintf(&s, "data %d\n", len(b))
		s.Write(b)
		s.WriteByte('\n')
	}
	who := fmt.Sprintf("nuon renderer <renderer@nuon.invalid> %d +0000", renderTime.Unix())
	mark := 0
	var rendered bytes.Buffer
	for _, id := range src.InstallIDs() {
		files, err := renderer.Install(src, id)
		if err != nil {
			tb.Fatal(err)
		}
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		sort.Strings(names)
		marks := map[string]int{}
		for _, name := range names {
			mark++
			marks[name] = mark
			fmt.Fprintf(&s, "blob\nmark :%d\n", mark)
			data(files[name])
		}
		fmt.Fprintf(&s, "commit %s\ncommitter %s\n", renderer.InstallRef(id), who)
		data(fmt.Appendf(nil, "nuon: render %s generation 1\n\n%s: %s\n", id, "Nuon-Source", res.Source))
		for _, name := range names {
			fmt.Fprintf(&s, "M 100644 :%d %s\n", marks[name], name)
			fmt.Fprintf(&rendered, "M 100644 :%d installs/%s/%s\n", marks[name], id, name)
		}
		s.WriteByte('\n')
	}
	fmt.Fprintf(&s, "commit %s\ncommitter %s\n", renderer.RenderedRef, who)
	data([]byte("nuon: render\n"))
	s.Write(rendered.Bytes())
	s.WriteString("\ndone\n")

	if f := os.Getenv("NUON_FASTIMPORT_DUMP"); f != "" {
		os.WriteFile(f, s.Bytes(), 0o644)
	}
	target := filepath.Join(tb.TempDir(), "fast-import.git")
	gittest.InitBare(tb, target)
	cmd := exec.Command("git", "fast-import", "--quiet", "--done")
	cmd.Dir = target
	cmd.Stdin = &s
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		tb.Fatalf("git fast-import: %v: %s", err, out)
	}
	for _, in := range res.Installs {
		if got := gittest.Git(tb, target, "rev-parse", renderer.InstallRef(in.ID).String()+"^{tree}"); got != in.Tree {
			tb.Fatalf("fast-import wrote tree %s for %s, the renderer %s", got, in.ID, in.Tree)
		}
		break
	}
	return took
}
