package renderer_test

import (
	"context"
	"errors"
	"github.com/go-git/go-git/v5/plumbing"
	"nuon.dev/nuon/schemas"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
)

// TestRenderOverHTTP renders a repository reached by URL on a smart-HTTP
// server: one push moves every ref; a second render pushes nothing.
func TestRenderOverHTTP(t *testing.T) {
	tn, srv := newServedTenant(t)
	res := tn.render(options(t))
	remote := lsRemote(t, srv.URL("tenant.git"))
	if got := remote[plumbing.ReferenceName(schemas.RenderedRef).String()]; got != res.Rendered.String() {
		t.Errorf("server %s = %q, want %s", plumbing.ReferenceName(schemas.RenderedRef), got, res.Rendered)
	}
	for _, in := range res.Installs {
		if got := remote[plumbing.ReferenceName(schemas.InstallRef(in.ID)).String()]; got != in.Commit.String() {
			t.Errorf("server %s = %q, want %s", plumbing.ReferenceName(schemas.InstallRef(in.ID)), got, in.Commit)
		}
	}
	if pushes := receivePacks(srv); pushes != 1 {
		t.Errorf("%d pushes, want one", pushes)
	}
	checkConsistent(t, tn.dir)
	if out := gittest.Git(t, tn.dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck --strict on the server: %s", out)
	}

	srv.Reset()
	res = tn.render(options(t))
	if len(res.Updates) != 0 {
		t.Errorf("second render: updates %v", res.Updates)
	}
	if pushes := receivePacks(srv); pushes != 0 {
		t.Errorf("second render pushed %d times", pushes)
	}
	if diff := cmp.Diff(remote, lsRemote(t, srv.URL("tenant.git"))); diff != "" {
		t.Errorf("server refs moved (-before +after):\n%s", diff)
	}
}

// TestPushRace lets another writer move the rendered ref on the server
// between the renderer's fetch and its push: the push fails as a whole,
// moving no ref, and a fresh render on top of the other writer succeeds.
func TestPushRace(t *testing.T) {
	tn, _ := newServedTenant(t)
	tn.render(options(t))
	tn.edit("channels/stable.yaml", "\n  api: 2.3.0\n", "\n  api: 2.4.0\n")
	tn.commit("promote api 2.4.0 to stable")

	ctx := context.Background()
	r := tn.open()
	res, err := renderRepo(ctx, r, "main", options(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Updates) < 2 {
		t.Fatalf("want an install and the rendered ref to move, got %v", res.Updates)
	}
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	other := gittest.Git(t, tn.dir, "commit-tree", rendered+"^{tree}", "-p", rendered, "-m", "another writer")
	gittest.Git(t, tn.dir, "update-ref", rendered, other)
	before := refs(t, tn.dir)

	err = apply(ctx, r, res, res.Updates)
	if !errors.Is(err, gitrepo.ErrStale) {
		t.Fatalf("push after another writer: %v, want ErrStale", err)
	}
	if diff := cmp.Diff(before, refs(t, tn.dir)); diff != "" {
		t.Errorf("a failed push moved refs on the server (-before +after):\n%s", diff)
	}

	res = tn.render(options(t))
	// The other writer did not sign: the renderer continues its own
	// history and keeps the other commit as a second parent.
	if got := gittest.Git(t, tn.dir, "rev-parse", rendered+"^2"); got != other {
		t.Errorf("rendered second parent %s, want the other writer's %s", got, other)
	}
	if len(res.Warnings) == 0 {
		t.Error("no warning about the rendered commit the renderer did not sign")
	}
	if res.ChangedCount() == 0 {
		t.Error("the retry changed no install")
	}
	checkConsistent(t, tn.dir)
}

// lsRemote lists a remote's refs with the git CLI.
func lsRemote(tb testing.TB, url string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(gittest.Git(tb, "", "ls-remote", url), "\n") {
		if h, name, ok := strings.Cut(line, "\t"); ok {
			out[name] = h
		}
	}
	return out
}

// receivePacks counts the pushes a server received.
func receivePacks(s *gittest.Server) int {
	n := 0
	for _, r := range s.Log() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/git-receive-pack") {
			n++
		}
	}
	return n
}
