package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
	return replicaPairVia(t, dir, nil)
}

// replicaPairVia is replicaPair with the replica talking to the writer
// through the handler via makes of the writer's URL, when via is set.
func replicaPairVia(t *testing.T, dir string, via func(writer *url.URL) http.Handler) (w, r *Server) {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := New(ctx, Config{Dir: dir, PollInterval: time.Hour, ReplicaToken: "tok", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(w)
	writerURL := hs.URL
	if via != nil {
		u, _ := url.Parse(hs.URL)
		mid := httptest.NewServer(via(u))
		t.Cleanup(mid.Close)
		writerURL = mid.URL
	}
	r, err = New(ctx, Config{Dir: filepath.Join(t.TempDir(), "mirror.git"), Mode: ModeReplica, Writer: writerURL,
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

// replicaMiddle stands between a replica and its writer, as whoever
// answers for the writer may: it passes every request on, and answers a
// fetch as mode says: "drop-blobs", a pack of what the fetch wants
// without its blobs; "cut", the writer's answer cut off inside the
// pack's last bytes; "" the writer's answer.
type replicaMiddle struct {
	t      *testing.T
	writer *url.URL
	dir    string // the writer's repository
	mode   atomic.Value
}

func (m *replicaMiddle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode, _ := m.mode.Load().(string)
	if !strings.HasSuffix(r.URL.Path, "/git-upload-pack") || mode == "" {
		httputil.NewSingleHostReverseProxy(m.writer).ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	switch mode {
	case "drop-blobs":
		var wants, haves []string
		for _, line := range strings.Split(string(body), "\n") {
			if i := strings.Index(line, "want "); i >= 0 {
				wants = append(wants, line[i+5:])
			}
			if i := strings.Index(line, "have "); i >= 0 {
				haves = append(haves, "^"+line[i+5:])
			}
		}
		listed := rgit(m.t, m.dir, nil, append(append([]string{"rev-list", "--objects"}, wants...), haves...)...)
		var keep strings.Builder
		for _, line := range strings.Split(listed, "\n") {
			h, _, _ := strings.Cut(line, " ")
			if rgit(m.t, m.dir, nil, "cat-file", "-t", h) != "blob" {
				keep.WriteString(h + "\n")
			}
		}
		cmd := exec.Command("git", "pack-objects", "--stdout")
		cmd.Dir, cmd.Stdin = m.dir, strings.NewReader(keep.String())
		pack, err := cmd.Output()
		if err != nil {
			m.t.Errorf("pack-objects: %v", err)
			panic(http.ErrAbortHandler)
		}
		out := pkt(nil, "packfile\n")
		out = sideband(out, 1, pack)
		w.Write(append(out, pktFlush...))
	case "cut":
		req, _ := http.NewRequest(r.Method, m.writer.String()+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		whole, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The pack again in packets of 64 bytes, and half of them sent:
		// the pack breaks off between two whole packets.
		var pack []byte
		rest := whole
		for {
			line, next, err := nextPkt(rest)
			if err != nil {
				break
			}
			if len(line) > 0 && line[0] == 1 {
				pack = append(pack, line[1:]...)
			}
			rest = next
		}
		out := pkt(nil, "packfile\n")
		for i := 0; i < len(pack)/2; i += 64 {
			out = sideband(out, 1, pack[i:min(i+64, len(pack)/2)])
		}
		w.Write(out)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// TestReplicaRefreshRefusesIncomplete: a fetch answered with a pack that
// lacks the blobs the new tips need, or cut off inside the pack, moves no ref of
// the replica and nothing in its table, and a later honest answer brings
// the replica to the writer exactly (the objects the bad answers left
// behind do not stand in for the missing ones).
func TestReplicaRefreshRefusesIncomplete(t *testing.T) {
	dir := refreshFleet(t, 20)
	m := &replicaMiddle{t: t, dir: dir}
	w, r := replicaPairVia(t, dir, func(writer *url.URL) http.Handler { m.writer = writer; return m })
	sameRefs(t, "first refresh", w, r)
	for i, mode := range []string{"drop-blobs", "cut"} {
		moved := []string{schemas.InstallRef("i00003"), schemas.StatusRef("i00004"), schemas.MainRef}
		before := map[string]string{}
		for _, ref := range moved {
			before[ref] = rgit(t, dir, nil, "rev-parse", ref)
			rgit(t, dir, nil, "update-ref", ref, newCommit(t, dir, before[ref], "f", fmt.Sprintf("%s %d %s", mode, i, ref)))
		}
		writerMoved(t, w)
		m.mode.Store(mode)
		err := r.Refresh(context.Background())
		if err == nil {
			t.Fatalf("%s: the refresh took an incomplete answer", mode)
		}
		t.Logf("%s: %v", mode, err)
		for _, ref := range moved {
			if got := rgit(t, r.cfg.Dir, nil, "rev-parse", ref); got != before[ref] {
				t.Errorf("%s: %s moved to %s on an incomplete answer", mode, ref, got)
			}
		}
		if h, _ := r.refs.get(schemas.InstallRef("i00003")); h.String() != before[schemas.InstallRef("i00003")] {
			t.Errorf("%s: the replica's table serves %s", mode, h)
		}
		m.mode.Store("")
		sameRefs(t, mode+", then an honest answer", w, r)
		rgit(t, r.cfg.Dir, nil, "fsck", "--connectivity-only", "--no-dangling")
	}
}

// TestReplicaRefreshLargeChange: a change past what the check by
// difference reads is checked by git against every ref, as git fetch
// checks: an honest one is taken, one without its blobs is not.
func TestReplicaRefreshLargeChange(t *testing.T) {
	defer func(n int) { replicaMaxWalk = n }(replicaMaxWalk)
	replicaMaxWalk = 2
	dir := refreshFleet(t, 20)
	m := &replicaMiddle{t: t, dir: dir}
	w, r := replicaPairVia(t, dir, func(writer *url.URL) http.Handler { m.writer = writer; return m })
	sameRefs(t, "first refresh", w, r)
	for _, mode := range []string{"drop-blobs", ""} {
		ref := schemas.InstallRef("i00005")
		before := rgit(t, r.cfg.Dir, nil, "rev-parse", ref)
		old := rgit(t, dir, nil, "rev-parse", ref)
		rgit(t, dir, nil, "update-ref", ref, newCommit(t, dir, old, "f", "large "+mode))
		writerMoved(t, w)
		m.mode.Store(mode)
		err := r.Refresh(context.Background())
		if mode == "" {
			if err != nil {
				t.Fatalf("an honest change past the limit: %v", err)
			}
			sameRefs(t, "an honest change past the limit", w, r)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "rev-list") {
			t.Fatalf("%s past the limit: %v, want git rev-list's refusal", mode, err)
		}
		if got := rgit(t, r.cfg.Dir, nil, "rev-parse", ref); got != before {
			t.Fatalf("%s past the limit: %s moved to %s", mode, ref, got)
		}
	}
}
