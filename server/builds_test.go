package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// trustBuilds puts fixtures/keys' build trust lists on main.
func (e *env) trustBuilds() {
	e.t.Helper()
	work := filepath.Join(e.t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	for file, from := range map[string]string{schemas.BuildTrustFile: "builds.allowed", schemas.BuildAgentTrustFile: "build-agents.allowed"} {
		data, err := os.ReadFile(filepath.Join(fixtureKeys, from))
		if err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, file), data, 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	sources := "components:\n  network:\n    - repository: https://git.vendor.example/shop.git\n  database:\n    - repository: https://git.vendor.example/shop.git\n      refs: [refs/heads/main, refs/tags/v*]\n"
	if err := os.WriteFile(filepath.Join(work, schemas.BuildSourcesFile), []byte(sources), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.mustGit(work, "add", "-A")
	e.mustGit(work, "commit", "--quiet", "-m", "trust builds")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	if err := e.srv.Sync(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func buildRequest(t testing.TB, key *signature.Signer, id, component string, edit ...func(*schemas.BuildRequest)) schemas.SignedBuildRequest {
	t.Helper()
	now := time.Now()
	r := schemas.BuildRequest{ID: id, Component: component, Repository: "https://git.vendor.example/shop.git",
		Commit: strings.Repeat("ab", 20), Version: "1.0.0", Requester: "vendor-ci", Created: now, Expires: now.Add(time.Hour)}
	if component == "database" {
		r.Ref = "refs/heads/main"
	}
	for _, f := range edit {
		f(&r)
	}
	sub, err := buildreq.SignRequest(r, key)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestBuilds files a request, has a build agent take and answer it, and
// reads the answer; then tries what an attacker would.
func TestBuilds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ci, _ := loadKey(t, "ci")
	agentKey, _ := loadKey(t, "build-agent")
	operator, _ := loadKey(t, "operator")
	vendor := buildreq.NewClient(e.http.URL, ci)
	agent := buildreq.NewClient(e.http.URL, agentKey)

	// Before main lists any key, nobody is trusted.
	if _, err := vendor.File(ctx, buildRequest(t, ci, "early", "network")); err == nil || !strings.Contains(err.Error(), "not trusted for builds") {
		t.Fatalf("a request before trust/builds: %v", err)
	}
	e.trustBuilds()

	if sub, err := agent.Next(ctx, 0, 0); err != nil || sub != nil {
		t.Fatalf("next on an empty queue: %v %v", sub, err)
	}
	st, err := vendor.File(ctx, buildRequest(t, ci, "b1", "network"))
	if err != nil || st.State != schemas.BuildQueued || st.Requester != "vendor-ci" {
		t.Fatalf("file: %+v %v", st, err)
	}
	// A long poll started before the request wakes when it is filed.
	got := make(chan *schemas.SignedBuildRequest, 1)
	go func() {
		sub, err := agent.Next(ctx, 10, 0)
		if err != nil {
			t.Error(err)
		}
		got <- sub
	}()
	sub := <-got
	if sub == nil || !strings.Contains(string(sub.Request), `"id":"b1"`) {
		t.Fatalf("next: %v", sub)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		res, _ := json.Marshal(map[string]string{"digest": "sha256:" + strings.Repeat("0", 64)})
		if err := agent.Answer(ctx, "b1", schemas.BuildOutcome{Result: res}); err != nil {
			t.Error(err)
		}
	}()
	st, err = vendor.Status(ctx, "b1", 10)
	if err != nil || st.State != schemas.BuildSucceeded || st.Agent != "build-agent-1" || st.Finished == nil || len(st.Result) == 0 {
		t.Fatalf("status after the answer: %+v %v", st, err)
	}

	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"replayed request", func() error { _, err := vendor.File(ctx, buildRequest(t, ci, "b1", "network")); return err }, "replay"},
		{"unknown component", func() error { _, err := vendor.File(ctx, buildRequest(t, ci, "b2", "payments")); return err }, `no component "payments"`},
		{"untrusted key", func() error {
			_, err := buildreq.NewClient(e.http.URL, operator).File(ctx, buildRequest(t, operator, "b3", "network"))
			return err
		}, "not trusted for builds"},
		{"signed by another key than the HTTP request", func() error {
			_, err := buildreq.NewClient(e.http.URL, ci).File(ctx, buildRequest(t, agentKey, "b4", "network"))
			return err
		}, "not trusted"},
		{"vendor CI takes requests", func() error { _, err := vendor.Next(ctx, 0, 0); return err }, "build-agents on main does not list it"},
		{"build agent files requests", func() error { _, err := agent.File(ctx, buildRequest(t, agentKey, "b5", "network")); return err }, "trust/builds on main does not list it"},
		{"source repository not allowed", func() error {
			_, err := vendor.File(ctx, buildRequest(t, ci, "b7", "network", func(r *schemas.BuildRequest) { r.Repository = "https://evil.example/shop.git" }))
			return err
		}, "may not be built from https://evil.example/shop.git"},
		{"component with no allowed source", func() error { _, err := vendor.File(ctx, buildRequest(t, ci, "b8", "api")); return err }, `allows no source for component "api"`},
		{"ref not allowed", func() error {
			_, err := vendor.File(ctx, buildRequest(t, ci, "b9", "database", func(r *schemas.BuildRequest) { r.Ref = "refs/heads/unreviewed" }))
			return err
		}, `not at ref "refs/heads/unreviewed"`},
		{"no ref where refs are named", func() error {
			_, err := vendor.File(ctx, buildRequest(t, ci, "b10", "database", func(r *schemas.BuildRequest) { r.Ref = "" }))
			return err
		}, `not at ref ""`},
		{"answer again", func() error { return agent.Answer(ctx, "b1", schemas.BuildOutcome{Error: "x"}) }, "not being built"},
		{"answer a request nobody took", func() error {
			if _, err := vendor.File(ctx, buildRequest(t, ci, "b6", "database")); err != nil {
				return err
			}
			return agent.Answer(ctx, "b6", schemas.BuildOutcome{Error: "x"})
		}, "not being built"},
		{"answer an unknown request", func() error { return agent.Answer(ctx, "nope", schemas.BuildOutcome{}) }, "no build request nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, buildreq.ErrServer) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	// The request refused for its component was never queued: the next
	// one taken is b6.
	if sub, err := agent.Next(ctx, 0, 0); err != nil || sub == nil || !strings.Contains(string(sub.Request), `"id":"b6"`) {
		t.Errorf("next after the refusals: %v %v", sub, err)
	}
	if sub, err := agent.Next(ctx, 0, 0); err != nil || sub != nil {
		t.Errorf("a refused request was queued: %v %v", sub, err)
	}
}

// restart starts another server on e's repository, as a restarted
// process would: it knows only what the repository holds.
func (e *env) restart() string {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{Dir: e.dir, RenderKey: e.keys["render"], PollInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(e.log, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	h := httptest.NewServer(srv)
	e.t.Cleanup(func() { h.Close(); cancel(); srv.Close() })
	return h.URL
}

// TestBuildQueueDurable: the queue is on git refs. A restarted server
// keeps queued and running requests and refuses a filed id again; a lease
// that runs out queues the request again for another take; an answer after
// the lease is refused; every change is a commit signed by the server.
func TestBuildQueueDurable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ci, _ := loadKey(t, "ci")
	agentKey, _ := loadKey(t, "build-agent")
	e.trustBuilds()
	vendor, agent := buildreq.NewClient(e.http.URL, ci), buildreq.NewClient(e.http.URL, agentKey)
	for _, id := range []string{"q1", "q2", "q3"} {
		if _, err := vendor.File(ctx, buildRequest(t, ci, id, "network")); err != nil {
			t.Fatal(err)
		}
	}
	// q1's lease is long enough for a loaded machine to reach q2's take
	// after the restart first.
	if sub, err := agent.Next(ctx, 0, 4); err != nil || sub == nil || !strings.Contains(string(sub.Request), `"id":"q1"`) {
		t.Fatalf("take q1: %v %v", sub, err)
	}

	url := e.restart()
	vendor, agent = buildreq.NewClient(url, ci), buildreq.NewClient(url, agentKey)
	if st, err := vendor.Status(ctx, "q1", 0); err != nil || st.State != schemas.BuildRunning || st.Agent != "build-agent-1" || st.Attempt != 1 {
		t.Fatalf("q1 after the restart: %+v %v", st, err)
	}
	if _, err := vendor.File(ctx, buildRequest(t, ci, "q1", "network")); err == nil || !strings.Contains(err.Error(), "replay") {
		t.Errorf("q1 filed again after the restart: %v", err)
	}
	if sub, err := agent.Next(ctx, 0, 2); err != nil || sub == nil || !strings.Contains(string(sub.Request), `"id":"q2"`) {
		t.Fatalf("take q2 after the restart: %v %v", sub, err)
	}
	// Nobody renews q1's lease: it runs out, q1 goes back to the front.
	st, err := vendor.Status(ctx, "q1", 5)
	for err == nil && st.State == schemas.BuildRunning {
		st, err = vendor.Status(ctx, "q1", 5)
	}
	if err != nil || st.State != schemas.BuildQueued || !strings.Contains(st.Note, "lease of build agent build-agent-1 expired") {
		t.Fatalf("q1 after its lease: %+v %v", st, err)
	}
	// q2's lease runs out too: its late answer is refused.
	if st, err := vendor.Status(ctx, "q2", 0); err != nil {
		t.Fatal(err)
	} else if st.LeaseUntil != nil {
		time.Sleep(time.Until(*st.LeaseUntil) + 50*time.Millisecond)
	}
	if err := agent.Answer(ctx, "q2", schemas.BuildOutcome{Error: "late"}); err == nil || !strings.Contains(err.Error(), "not being built") {
		t.Errorf("an answer after the lease: %v", err)
	}
	sub, err := agent.Next(ctx, 0, 2)
	if err != nil || sub == nil || (!strings.Contains(string(sub.Request), `"id":"q1"`) && !strings.Contains(string(sub.Request), `"id":"q2"`)) {
		t.Fatalf("take a requeued request: %v %v", sub, err)
	}
	var taken schemas.BuildRequest
	json.Unmarshal(sub.Request, &taken)
	if st, err := agent.Lease(ctx, taken.ID, "build"); err != nil || st.Attempt != 2 || st.Phase != "build" {
		t.Fatalf("renew %s: %+v %v", taken.ID, st, err)
	}
	release := strings.Repeat("c", 40)
	if err := agent.Answer(ctx, taken.ID, schemas.BuildOutcome{ReleaseCommit: release, Result: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if st, _ := vendor.Status(ctx, taken.ID, 0); st.State != schemas.BuildSucceeded || st.ReleaseCommit != release {
		t.Errorf("%s answered: %+v", taken.ID, st)
	}

	// The history of the ref tells the story, each commit signed by the
	// server's key.
	subjects := e.mustGit(e.dir, "log", "--reverse", "--format=%s", schemas.BuildRef(taken.ID))
	for _, want := range []string{"filed by vendor-ci", "taken by build-agent-1 (attempt 1", "queued again: the lease", "taken by build-agent-1 (attempt 2", "succeeded: released in " + release} {
		if !strings.Contains(subjects, want) {
			t.Errorf("the history of %s lacks %q:\n%s", taken.ID, want, subjects)
		}
	}
	repo, err := gitrepo.Open(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	tip, _ := repo.Ref(plumbing.ReferenceName(schemas.BuildRef(taken.ID)))
	operator, _ := loadKey(t, "operator")
	for name, key := range map[string]*signature.Signer{"render": e.keys["render"], "operator": operator} {
		trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"x"}, Key: key.PublicKey()}}}
		_, err := buildreq.ReadRecord(repo.Storer(), taken.ID, tip, trust)
		if (err == nil) != (name == "render") {
			t.Errorf("read the record trusting the %s key: %v", name, err)
		}
	}

	// A queue ref written by anyone but the server is not served.
	forged := gitobj.NewBatch()
	var rec buildreq.Record
	rec.Request = buildRequest(t, ci, "q9", "network")
	rec.Status = schemas.BuildStatus{ID: "q9", State: schemas.BuildQueued, Component: "network", Commit: strings.Repeat("ab", 20), Version: "1.0.0", Requester: "vendor-ci"}
	h, err := buildreq.CommitRecord(forged, plumbing.ZeroHash, rec, operator, object.Signature{Name: "x", Email: "x@x", When: time.Now()}, "forged")
	if err != nil {
		t.Fatal(err)
	}
	if err := forged.Flush(repo.Storer()); err != nil {
		t.Fatal(err)
	}
	e.mustGit(e.dir, "update-ref", schemas.BuildRef("q9"), h.String())
	url = e.restart()
	vendor, agent = buildreq.NewClient(url, ci), buildreq.NewClient(url, agentKey)
	if st, err := vendor.Status(ctx, "q9", 0); err != nil || st.State != schemas.BuildFailed || !strings.Contains(st.Error, "not signed by the tenant server") {
		t.Errorf("a forged queue ref: %+v %v", st, err)
	}
	for {
		sub, err := agent.Next(ctx, 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if sub == nil {
			break
		}
		if strings.Contains(string(sub.Request), `"id":"q9"`) {
			t.Fatal("the forged request was handed to an agent")
		}
	}
}

// BenchmarkBuildQueueRoundTrip measures what the durable queue costs a
// build: file a request, take it, renew its lease, answer it (four signed
// HTTP requests, three signed commits on the request's ref), no build.
func BenchmarkBuildQueueRoundTrip(b *testing.B) {
	root := b.TempDir()
	src := filepath.Join(root, "src")
	if err := os.CopyFS(src, os.DirFS(fixtureTenant)); err != nil {
		b.Fatal(err)
	}
	for file, from := range map[string]string{schemas.BuildTrustFile: "builds.allowed", schemas.BuildAgentTrustFile: "build-agents.allowed"} {
		data, _ := os.ReadFile(filepath.Join(fixtureKeys, from))
		os.WriteFile(filepath.Join(src, file), data, 0o644)
	}
	os.WriteFile(filepath.Join(src, schemas.BuildSourcesFile), []byte("components:\n  network:\n    - repository: https://git.vendor.example/shop.git\n"), 0o644)
	dir := filepath.Join(root, "served.git")
	gittest.InitBare(b, dir)
	gittest.CommitDir(b, dir, "main", src, "tenant")
	render, _ := loadKey(b, "render")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, server.Config{Dir: dir, RenderKey: render, PollInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	h := httptest.NewServer(srv)
	defer h.Close()
	ci, _ := loadKey(b, "ci")
	agentKey, _ := loadKey(b, "build-agent")
	vendor, agent := buildreq.NewClient(h.URL, ci), buildreq.NewClient(h.URL, agentKey)
	n := 0
	for b.Loop() {
		n++
		id := fmt.Sprintf("rt-%d", n)
		if _, err := vendor.File(ctx, buildRequest(b, ci, id, "network")); err != nil {
			b.Fatal(err)
		}
		if sub, err := agent.Next(ctx, 0, 60); err != nil || sub == nil {
			b.Fatalf("next: %v %v", sub, err)
		}
		if _, err := agent.Lease(ctx, id, "build"); err != nil {
			b.Fatal(err)
		}
		if err := agent.Answer(ctx, id, schemas.BuildOutcome{ReleaseCommit: strings.Repeat("c", 40)}); err != nil {
			b.Fatal(err)
		}
	}
}
