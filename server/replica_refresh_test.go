package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// refreshFleet is a writer's repository of n installs made with git
// fast-import: main, each install's desired and status ref, a rollout and
// a build request's ref, an archive ref.
func refreshFleet(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "writer.git")
	rgit(t, "", nil, "init", "--quiet", "--bare", dir)
	var b strings.Builder
	mark := 0
	commit := func(ref, file, content string, from int) int {
		mark++
		blob := mark
		fmt.Fprintf(&b, "blob\nmark :%d\ndata %d\n%s\n", blob, len(content), content)
		mark++
		fmt.Fprintf(&b, "commit %s\nmark :%d\ncommitter t <t@nuon.invalid> 1700000000 +0000\ndata 2\nc\n", ref, mark)
		if from > 0 {
			fmt.Fprintf(&b, "from :%d\n", from)
		}
		fmt.Fprintf(&b, "M 100644 :%d %s\n\n", blob, file)
		return mark
	}
	main := commit(schemas.MainRef, "README", "main", 0)
	for i := range n {
		id := fmt.Sprintf("i%05d", i)
		commit(schemas.InstallRef(id), "desired.json", "desired "+id, main)
		commit(schemas.StatusRef(id), "status.json", "status "+id, 0)
	}
	commit(schemas.RolloutRefPrefix+"r1", "state.json", "rollout", 0)
	commit(schemas.BuildRefPrefix+"b1", "request.json", "build", 0)
	commit(schemas.ArchiveRefPrefix+"gone", "archived.json", "archived", 0)
	rgit(t, dir, strings.NewReader(b.String()), "fast-import", "--quiet")
	return dir
}

// rgit runs git in dir and returns its output.
func rgit(t *testing.T, dir string, stdin io.Reader, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@nuon.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@nuon.invalid")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// newCommit makes a commit on dir's ref with one file, parent the ref's
// tip when it has one (or parent when not empty), and returns it.
func newCommit(t *testing.T, dir, parent, file, content string) string {
	t.Helper()
	blob := rgit(t, dir, strings.NewReader(content), "hash-object", "-w", "--stdin")
	tree := rgit(t, dir, strings.NewReader("100644 blob "+blob+"\t"+file+"\n"), "mktree")
	args := []string{"commit-tree", tree, "-m", "c"}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	return rgit(t, dir, nil, args...)
}

// replicaPair serves a writer on dir (no render key) and makes a replica
// with an empty mirror that is refreshed by hand.
func replicaPair(t *testing.T, dir string) (w, r *Server) {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := New(ctx, Config{Dir: dir, PollInterval: time.Hour, ReplicaToken: "tok", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(w)
	r, err = New(ctx, Config{Dir: filepath.Join(t.TempDir(), "mirror.git"), Mode: ModeReplica, Writer: hs.URL,
		ReplicaToken: "tok", PollInterval: time.Hour, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close(); r.Close(); w.Close() })
	return w, r
}

// mirrored lists the refs a replica mirrors.
func mirrored(t *testing.T, dir string) string {
	return rgit(t, dir, nil, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/", schemas.ArchiveRefPrefix)
}

// sameRefs fails unless the replica's refs, and its ref table, are the
// writer's exactly.
func sameRefs(t *testing.T, what string, w, r *Server) {
	t.Helper()
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatalf("%s: refresh: %v", what, err)
	}
	want, got := mirrored(t, w.cfg.Dir), mirrored(t, r.cfg.Dir)
	if want != got {
		t.Fatalf("%s: the replica's refs differ from the writer's:\nwriter:\n%s\nreplica:\n%s", what, want, got)
	}
	loaded, err := loadRefs(context.Background(), r.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	table, _ := r.refs.snapshot()
	fresh, _ := loaded.snapshot()
	if !maps.Equal(table, fresh) {
		t.Fatalf("%s: the replica's ref table is not its mirror's refs (%d installs in the table, %d in the mirror)", what, len(table), len(fresh))
	}
	if r.refs.len() != loaded.len() {
		t.Fatalf("%s: the replica's table holds %d refs, its mirror %d", what, r.refs.len(), loaded.len())
	}
}

// TestReplicaRefreshFollowsExactly: after each kind of change on the
// writer, a refresh leaves the replica's refs and ref table exactly the
// writer's.
func TestReplicaRefreshFollowsExactly(t *testing.T) {
	dir := refreshFleet(t, 20)
	w, r := replicaPair(t, dir)
	sameRefs(t, "first refresh", w, r)
	mainTip := rgit(t, dir, nil, "rev-parse", schemas.MainRef)
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"one install's desired and status moved", func() {
			for _, ref := range []string{schemas.InstallRef("i00003"), schemas.StatusRef("i00003")} {
				old := rgit(t, dir, nil, "rev-parse", ref)
				rgit(t, dir, nil, "update-ref", ref, newCommit(t, dir, old, "f", "moved "+ref), old)
			}
		}},
		{"an install deleted", func() {
			rgit(t, dir, nil, "update-ref", "-d", schemas.InstallRef("i00007"))
			rgit(t, dir, nil, "update-ref", "-d", schemas.StatusRef("i00007"))
		}},
		{"an install added", func() {
			rgit(t, dir, nil, "update-ref", schemas.InstallRef("new"), newCommit(t, dir, mainTip, "f", "new"))
		}},
		{"main moved", func() {
			rgit(t, dir, nil, "update-ref", schemas.MainRef, newCommit(t, dir, mainTip, "README", "main 2"))
		}},
		{"side refs moved", func() {
			for _, ref := range []string{schemas.RolloutRefPrefix + "r1", schemas.BuildRefPrefix + "b1"} {
				old := rgit(t, dir, nil, "rev-parse", ref)
				rgit(t, dir, nil, "update-ref", ref, newCommit(t, dir, old, "f", "moved "+ref))
			}
			rgit(t, dir, nil, "update-ref", schemas.RolloutRefPrefix+"r2", newCommit(t, dir, "", "f", "r2"))
		}},
		{"archive ref deleted", func() {
			rgit(t, dir, nil, "update-ref", "-d", schemas.ArchiveRefPrefix+"gone")
		}},
		{"refs force-moved", func() {
			// History rewritten: the new tips share nothing with the old.
			for _, ref := range []string{schemas.InstallRef("i00011"), schemas.StatusRef("i00011"), schemas.MainRef, schemas.RolloutRefPrefix + "r1"} {
				rgit(t, dir, nil, "update-ref", ref, newCommit(t, dir, "", "g", "rewritten "+ref))
			}
		}},
		{"force-moved back to an older tip", func() {
			rgit(t, dir, nil, "update-ref", schemas.MainRef, mainTip)
		}},
	} {
		c.change()
		writerMoved(t, w)
		sameRefs(t, c.name, w, r)
	}
	// The writer restarted (another boot): every ref is compared again.
	r.seen = "another-boot 0 x 0"
	rgit(t, dir, nil, "update-ref", "-d", schemas.InstallRef("i00012"))
	writerMoved(t, w)
	sameRefs(t, "after the writer's restart", w, r)
	// Nothing moved: a refresh changes nothing and fetches nothing.
	before := objectsIn(t, r.cfg.Dir)
	sameRefs(t, "nothing moved", w, r)
	if after := objectsIn(t, r.cfg.Dir); after != before {
		t.Fatalf("a refresh with nothing moved fetched %d objects", after-before)
	}
}

// writerMoved sets in the writer's ref table the refs the test moved in
// its repository, as the writer's own writes do, and moves its version.
func writerMoved(t *testing.T, w *Server) {
	t.Helper()
	loaded, err := loadRefs(context.Background(), w.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := loaded.snapshot()
	have, _ := w.refs.snapshot()
	for id, tips := range want {
		if have[id] != tips {
			w.refs.set(schemas.InstallRef(id), tips.desired)
			w.refs.set(schemas.StatusRef(id), tips.status)
		}
	}
	for id := range have {
		if _, ok := want[id]; !ok {
			w.refs.set(schemas.InstallRef(id), plumbing.ZeroHash)
			w.refs.set(schemas.StatusRef(id), plumbing.ZeroHash)
		}
	}
	w.sideRefMoved()
}

// objectsIn is the number of objects in a repository (loose and
// packed).
func objectsIn(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(rgit(t, dir, nil, "count-objects", "-v"), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		if k == "count" || k == "in-pack" {
			c, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
	}
	return n
}

// TestReplicaRefreshTransfersChange: on a fleet of thousands, a refresh
// after one install's change fetches that change's objects, not a share
// of the fleet.
func TestReplicaRefreshTransfersChange(t *testing.T) {
	dir := refreshFleet(t, 3000)
	w, r := replicaPair(t, dir)
	sameRefs(t, "first refresh", w, r)
	for i, id := range []string{"i00042", "i02999", "i00000"} {
		before := objectsIn(t, r.cfg.Dir)
		ref := schemas.InstallRef(id)
		old := rgit(t, dir, nil, "rev-parse", ref)
		// A commit, its tree and one new blob.
		rgit(t, dir, nil, "update-ref", ref, newCommit(t, dir, old, "desired.json", fmt.Sprintf("change %d", i)))
		writerMoved(t, w)
		// The writer names what moved: no listing of the fleet's refs.
		moves, _, err := r.changedRefs(context.Background())
		if err != nil || len(moves) != 1 || moves[0].name != ref {
			t.Fatalf("the writer's changes since the replica's version: %v, %v; want %s alone", moves, err, ref)
		}
		sameRefs(t, "one install changed", w, r)
		if got := objectsIn(t, r.cfg.Dir) - before; got != 3 {
			t.Fatalf("a one-install change brought %d objects into the replica, want its 3", got)
		}
	}
}
