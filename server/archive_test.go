package server_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// archiveRef is where nuon install delete's archive phase keeps an
// install's ref of kind ("installs" or "status").
func archiveRef(id, kind string) string { return "refs/nuon/archive/" + id + "/" + kind }

// archiveRepo does to the tenant repository at dir what the archive phase
// of nuon install delete does (package lifecycle, on a local path or in
// one atomic push): a commit on main without installs/<id>.yaml, then one
// transaction that copies the install's live refs under
// refs/nuon/archive/<id>/ and deletes them. It returns the tips archived.
func archiveRepo(t *testing.T, dir, id string) (desired, status string) {
	t.Helper()
	return archiveRepoAs(t, dir, id, func(kind string) string { return archiveRef(id, kind) })
}

// archiveRepoAs is archiveRepo with the archive's names: at(kind) is
// where the ref of kind goes (a later generation's).
func archiveRepoAs(t *testing.T, dir, id string, at func(kind string) string) (desired, status string) {
	t.Helper()
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, err := gittest.Run(dir, []byte(stdin), args...)
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	var installs []string
	for _, l := range strings.Split(run("", "ls-tree", "main:installs"), "\n") {
		if !strings.HasSuffix(l, "\t"+id+".yaml") {
			installs = append(installs, l)
		}
	}
	sub := run(strings.Join(installs, "\n")+"\n", "mktree")
	var root []string
	for _, l := range strings.Split(run("", "ls-tree", "main"), "\n") {
		if strings.HasSuffix(l, "\tinstalls") {
			l = "040000 tree " + sub + "\tinstalls"
		}
		root = append(root, l)
	}
	tree := run(strings.Join(root, "\n")+"\n", "mktree")
	main := run("", "rev-parse", "main")
	c := run("", "-c", "user.name=nuon install", "-c", "user.email=install@nuon.invalid",
		"commit-tree", tree, "-p", main, "-m", id+": remove the deleted install")
	run("", "update-ref", "refs/heads/main", c, main)

	desired, _ = gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", schemas.InstallRef(id))
	status, _ = gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", schemas.StatusRef(id))
	tx := "start\n"
	for _, m := range []struct{ live, tip, kind string }{{schemas.InstallRef(id), desired, "installs"}, {schemas.StatusRef(id), status, "status"}} {
		if m.tip != "" {
			tx += "update " + at(m.kind) + " " + m.tip + "\ndelete " + m.live + " " + m.tip + "\n"
		}
	}
	run(tx+"commit\n", "update-ref", "--stdin")
	return desired, status
}

// refAt is a ref's tip in the repository at dir, "" when it does not
// exist.
func refAt(dir, name string) string {
	out, _ := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", name)
	return out
}

// archivedRefusal checks that install id, whose agent a is, is refused by
// the server at base as archived, when it polls, fetches its last status
// and pushes its next one.
func archivedRefusal(t *testing.T, base, id string, a *statusAgent) {
	t.Helper()
	ctx := context.Background()
	r := agent.NewRemote(base+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: id, Key: a.key}))
	heads, err := r.Heads(ctx, plumbing.ReferenceName(schemas.InstallRef(id)), plumbing.ReferenceName(schemas.StatusRef(id)))
	if err == nil || !strings.Contains(err.Error(), "install archived") {
		t.Errorf("poll of archived %s at %s: %v, %v; want a refusal that says it is archived", id, base, heads, err)
	}
	if err := r.Fetch(ctx, memory.NewStorage(), a.head); err == nil || !strings.Contains(err.Error(), "install archived") {
		t.Errorf("fetch of archived %s's status %s at %s: %v; want a refusal that says it is archived", id, a.head, base, err)
	}
	next := newStatusAgent(id, base+"/tenant.git", a.key, a.head)
	next.st, next.n = a.st, a.n
	if err := next.push(ctx); err == nil || !strings.Contains(err.Error(), "install archived") {
		t.Errorf("status push of archived %s to %s: %v; want a refusal that says it is archived", id, base, err)
	}
}

// waitMirrored waits until upstream's rendered ref is the server's: the
// mirror pushed what the last render moved.
func waitMirrored(t *testing.T, e *env) {
	t.Helper()
	waitUntil(t, "the rendered ref mirrored upstream", func() bool {
		r := refAt(e.upstream, schemas.RenderedRef)
		return r != "" && r == e.serverRef(schemas.RenderedRef)
	})
}

// checkArchived checks that repository dir holds acme only under the
// archive, at desired and status, and globex as before.
func checkArchived(t *testing.T, where, dir, desired, status string, globex map[string]string) {
	t.Helper()
	for _, ref := range []string{schemas.InstallRef("acme"), schemas.StatusRef("acme")} {
		if got := refAt(dir, ref); got != "" {
			t.Errorf("%s: %s is still %s after the archive", where, ref, got)
		}
	}
	if got := refAt(dir, archiveRef("acme", "installs")); got != desired {
		t.Errorf("%s: %s = %q, want the last desired state %s", where, archiveRef("acme", "installs"), got, desired)
	}
	if got := refAt(dir, archiveRef("acme", "status")); got != status {
		t.Errorf("%s: %s = %q, want the last status the server accepted %s", where, archiveRef("acme", "status"), got, status)
	}
	for ref, want := range globex {
		if got := refAt(dir, ref); got != want {
			t.Errorf("%s: %s = %q, want %q: another install moved", where, ref, got, want)
		}
	}
}

// mirroredStatus has acme's agent push a status through the server and
// waits until the mirror took it upstream.
func mirroredStatus(t *testing.T, e *env) *statusAgent {
	t.Helper()
	waitMirrored(t, e)
	a := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	if err := a.push(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "acme's status mirrored upstream", func() bool { return refAt(e.upstream, schemas.StatusRef("acme")) == a.head.String() })
	return a
}

// unmirroredStatus is a status of acme the server accepted just before it
// went down, after one it mirrored: in its repository, not upstream. The
// env's server stops following.
func unmirroredStatus(t *testing.T, e *env) string {
	t.Helper()
	a := mirroredStatus(t, e)
	local := localRepo(t)
	e.mustGit(local, "fetch", "--quiet", e.dir, schemas.StatusRef("acme"))
	next := e.statusCommit(local, "acme", a.head.String(), e.keyFiles["acme"], "last words")
	e.mustGit(local, "push", "--quiet", e.dir, next+":"+schemas.StatusRef("acme"))
	e.cancel()
	return next
}

// restart starts another server on the env's repository, following its
// upstream, and waits for its first mirror push (the whole namespace);
// it returns the server and its log.
func restart(t *testing.T, e *env) (*server.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{Dir: e.dir, RenderKey: e.keys["render"], Upstream: e.upstream,
		PollInterval: time.Hour, MirrorDelay: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		if t.Failed() {
			t.Logf("restarted server's log:\n%s", logs.String())
		}
	})
	waitUntil(t, "the restarted server's first mirror push", func() bool { return strings.Contains(logs.String(), "mirrored upstream") })
	return srv, logs
}

// TestArchiveUpstream: nuon install delete archives acme on the git host
// the server follows, while the server holds a status acme pushed before
// the archive that the mirror took upstream after it (the archive read
// the status before). Once the server has seen the new main, acme's refs
// are gone from the server and upstream, the archive holds every status
// acme pushed, acme is refused as archived, and other installs are
// untouched.
func TestArchiveUpstream(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g := newStatusAgent("globex", e.http.URL+"/tenant.git", e.keys["globex"], plumbing.ZeroHash)
	if err := g.push(ctx); err != nil {
		t.Fatal(err)
	}
	a := mirroredStatus(t, e)

	desired, status := archiveRepo(t, e.upstream, "acme")
	if status != a.head.String() || desired != e.serverRef(schemas.InstallRef("acme")) {
		t.Fatalf("archived %s and %s, the server has %s and %s", desired, status, e.serverRef(schemas.InstallRef("acme")), a.head)
	}
	// Accepted before the server saw the archive, mirrored after it.
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	last := a.head.String()
	waitUntil(t, "acme's last status mirrored upstream", func() bool { return refAt(e.upstream, schemas.StatusRef("acme")) == last })
	globex := map[string]string{}
	for _, ref := range []string{schemas.InstallRef("globex"), schemas.StatusRef("globex")} {
		globex[ref] = e.serverRef(ref)
	}

	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, e)
	checkArchived(t, "server", e.dir, desired, last, globex)
	checkArchived(t, "upstream", e.upstream, desired, last, globex)
	archivedRefusal(t, e.http.URL, "acme", a)
	if got := e.serverRef(schemas.StatusRef("acme")); got != "" {
		t.Errorf("after the archive and a refused push, %s is %s", schemas.StatusRef("acme"), got)
	}
	if !strings.Contains(e.log.String(), "install archived") {
		t.Errorf("the archive is not logged:\n%s", e.log.String())
	}

	// A second look changes nothing.
	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	checkArchived(t, "upstream after a second sync", e.upstream, desired, last, globex)
	m := scrape(t, e.http.URL+"/metrics")
	for series, want := range map[string]float64{
		`nuon_server_archived_installs_retired_total{result="ok"}`: 1,
		`nuon_server_refusals_total{reason="archived"}`:            3, // poll, fetch, push
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}

	// acme created again under the same id (its file back on main) is
	// not archived: it renders, and its agent reads its new state.
	main := refAt(e.upstream, "main")
	again := e.mustGit(e.upstream, "-c", "user.name=t", "-c", "user.email=t@nuon.invalid", "commit-tree", main+"~1^{tree}", "-p", main, "-m", "acme again")
	e.mustGit(e.upstream, "update-ref", "refs/heads/main", again, main)
	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	heads, err := agent.NewRemote(e.http.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: e.keys["acme"]})).
		Heads(ctx, plumbing.ReferenceName(schemas.InstallRef("acme")))
	if d := heads[plumbing.ReferenceName(schemas.InstallRef("acme"))]; err != nil || d.IsZero() || d.String() == desired {
		t.Errorf("acme created again: poll %v, %v; want a new desired state", heads, err)
	}
	waitMirrored(t, e)
	if got := refAt(e.upstream, archiveRef("acme", "status")); got != last {
		t.Errorf("acme created again: its old archive moved to %s", got)
	}
}

// TestArchiveDiverged: the archive holds a status that is not in the
// history of the one the server holds (someone rewrote it by hand). The
// server keeps its status live, here and upstream, and says so; it
// neither overwrites the archive nor drops the status. The desired ref,
// which the archive holds, is retired.
func TestArchiveDiverged(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := mirroredStatus(t, e)
	desired, _ := archiveRepo(t, e.upstream, "acme")
	other := e.statusCommit(e.upstream, "acme", "", e.keyFiles["acme"], "another history")
	e.mustGit(e.upstream, "update-ref", archiveRef("acme", "status"), other)

	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "acme's status pushed back upstream", func() bool { return refAt(e.upstream, schemas.StatusRef("acme")) == a.head.String() })
	for _, dir := range []string{e.dir, e.upstream} {
		if got := refAt(dir, schemas.StatusRef("acme")); got != a.head.String() {
			t.Errorf("%s: acme's status %q, want it kept at %s", dir, got, a.head)
		}
		if got := refAt(dir, archiveRef("acme", "status")); got != other {
			t.Errorf("%s: the archived status %q, want it left at %s", dir, got, other)
		}
		if got := refAt(dir, schemas.InstallRef("acme")); got != "" {
			t.Errorf("%s: acme's desired ref is still %s", dir, got)
		}
		if got := refAt(dir, archiveRef("acme", "installs")); got != desired {
			t.Errorf("%s: the archived desired state %q, want %s", dir, got, desired)
		}
	}
	if !strings.Contains(e.log.String(), "diverged") {
		t.Errorf("the divergence is not logged:\n%s", e.log.String())
	}
}

// TestArchiveUpstreamWhileDown: acme is archived on the git host while the
// server is down, after the server accepted a status it had not mirrored
// yet. The server that starts next on the same repository neither pushes
// acme's refs back upstream nor loses that status: it ends up under the
// archive.
func TestArchiveUpstreamWhileDown(t *testing.T) {
	e := newEnv(t)
	next := unmirroredStatus(t, e)
	desired, _ := archiveRepo(t, e.upstream, "acme")
	globex := map[string]string{schemas.InstallRef("globex"): refAt(e.upstream, schemas.InstallRef("globex"))}

	restart(t, e)
	checkArchived(t, "upstream", e.upstream, desired, next, globex)
	checkArchived(t, "server", e.dir, desired, next, nil)
}

// TestArchiveLocal: with no upstream, the operator runs nuon install
// delete against the server's own repository. A status the server
// accepted after the archive moved acme's refs (before it saw the new
// main) is not lost: it goes under the archive. The writer and its read
// replica stop serving acme and refuse it as archived.
func TestArchiveLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	commitTenant(t, dir)
	acmeKey, _ := loadKey(t, "acme")
	renderKey, _ := loadKey(t, "render")
	var logs syncBuffer
	ctx := context.Background()
	w, err := server.New(ctx, server.Config{Dir: dir, RenderKey: renderKey, PollInterval: time.Hour,
		ReplicaToken: replicaToken, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ws := httptest.NewServer(w)
	t.Cleanup(ws.Close)
	_, rs := replica(t, &env{t: t, log: &logs}, ws.URL, 50*time.Millisecond)
	waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, rs.URL+"/readyz"); return c == 200 })

	a := newStatusAgent("acme", ws.URL+"/tenant.git", acmeKey, plumbing.ZeroHash)
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	viaReplica := agent.NewRemote(rs.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: acmeKey}))
	waitUntil(t, "acme's status on the replica", func() bool {
		h, err := viaReplica.Heads(ctx, plumbing.ReferenceName(schemas.StatusRef("acme")))
		return err == nil && h[plumbing.ReferenceName(schemas.StatusRef("acme"))] == a.head
	})

	desired, status := archiveRepo(t, dir, "acme")
	if status != a.head.String() {
		t.Fatalf("archived status %s, want %s", status, a.head)
	}
	// The server has not looked at main yet: it takes one more status.
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	last := a.head.String()
	globex := map[string]string{schemas.InstallRef("globex"): refAt(dir, schemas.InstallRef("globex"))}

	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	checkArchived(t, "server", dir, desired, last, globex)
	if !strings.Contains(logs.String(), "install archived") {
		t.Errorf("the archive is not logged:\n%s", logs.String())
	}
	archivedRefusal(t, ws.URL, "acme", a)
	waitUntil(t, "the replica to drop acme's refs", func() bool {
		h, err := viaReplica.Heads(ctx, plumbing.ReferenceName(schemas.InstallRef("acme")))
		return err != nil || len(h) == 0
	})
	archivedRefusal(t, rs.URL, "acme", a)
	if got := refAt(dir, schemas.StatusRef("acme")); got != "" {
		t.Errorf("after the archive and a push through the replica, %s is %s", schemas.StatusRef("acme"), got)
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs.String())
	}
}

// TestArchiveRetireFails: the upstream refuses the archive step's push
// (a hook that keeps refs/nuon/archive/ read-only). The server keeps
// acme's refs and the status the archive lacks, says so, and a server
// started again on its repository still does not push acme's refs back
// upstream with the rest of the namespace. Once the upstream takes the
// push, the status goes under the archive.
func TestArchiveRetireFails(t *testing.T) {
	e := newEnv(t)
	next := unmirroredStatus(t, e)
	desired, _ := archiveRepo(t, e.upstream, "acme")
	hook := filepath.Join(e.upstream, "hooks", "update")
	script := "#!/bin/sh\ncase \"$1\" in refs/nuon/archive/*) echo \"the archive is read-only here\" >&2; exit 1;; esac\n"
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	srv, logs := restart(t, e)
	for _, ref := range []string{schemas.InstallRef("acme"), schemas.StatusRef("acme")} {
		if got := refAt(e.upstream, ref); got != "" {
			t.Errorf("upstream: %s pushed back at %s", ref, got)
		}
	}
	if got := refAt(e.dir, schemas.StatusRef("acme")); got != next {
		t.Errorf("server: acme's status %q, want %s kept until the archive has it", got, next)
	}
	if !strings.Contains(logs.String(), "read-only here") {
		t.Errorf("the refused archive push is not logged:\n%s", logs.String())
	}

	if err := os.Remove(hook); err != nil {
		t.Fatal(err)
	}
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkArchived(t, "upstream", e.upstream, desired, next, nil)
	checkArchived(t, "server", e.dir, desired, next, nil)
}

// removeFromMain commits, on main of the repository at dir, main's tree
// without installs/<id>.yaml: what nuon install delete's archive phase
// does before it moves the refs.
func removeFromMain(t *testing.T, e *env, dir, id string) {
	t.Helper()
	var installs []string
	for _, l := range strings.Split(e.mustGit(dir, "ls-tree", "main:installs"), "\n") {
		if !strings.HasSuffix(l, "\t"+id+".yaml") {
			installs = append(installs, l)
		}
	}
	sub, err := gittest.Run(dir, []byte(strings.Join(installs, "\n")+"\n"), "mktree")
	if err != nil {
		t.Fatal(err)
	}
	var root []string
	for _, l := range strings.Split(e.mustGit(dir, "ls-tree", "main"), "\n") {
		if strings.HasSuffix(l, "\tinstalls") {
			l = "040000 tree " + sub + "\tinstalls"
		}
		root = append(root, l)
	}
	tree, err := gittest.Run(dir, []byte(strings.Join(root, "\n")+"\n"), "mktree")
	if err != nil {
		t.Fatal(err)
	}
	main := refAt(dir, "main")
	c := e.mustGit(dir, "-c", "user.name=nuon install", "-c", "user.email=install@nuon.invalid", "commit-tree", tree, "-p", main, "-m", id+": remove the deleted install")
	e.mustGit(dir, "update-ref", "refs/heads/main", c, main)
}

// TestArchiveAgain: acme is archived, created again under the same id,
// and deleted again. While the second deletion has removed acme from main
// but not yet moved its refs, the first generation of its archive is all
// there is: the server neither takes the new install for archived (its
// agent is not refused as archived) nor retires its refs into that
// generation. Once the refs are archived as generation 2, with a status
// the server accepted after the archive read them, the server retires
// them into generation 2 and moves it forward, and leaves generation 1 as
// it was, here and upstream.
func TestArchiveAgain(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := mirroredStatus(t, e)
	desired1, status1 := archiveRepo(t, e.upstream, "acme")
	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	checkArchived(t, "server after the first delete", e.dir, desired1, status1, nil)
	archivedRefusal(t, e.http.URL, "acme", first)

	// Created again: its file back on main, a new render, a new agent.
	main := refAt(e.upstream, "main")
	again := e.mustGit(e.upstream, "-c", "user.name=t", "-c", "user.email=t@nuon.invalid", "commit-tree", main+"~1^{tree}", "-p", main, "-m", "acme again")
	e.mustGit(e.upstream, "update-ref", "refs/heads/main", again, main)
	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	desired2 := e.serverRef(schemas.InstallRef("acme"))
	if desired2 == "" || desired2 == desired1 {
		t.Fatalf("acme created again: desired state %q, want a new one", desired2)
	}
	a := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	a.n = 100 // its first status is not the first install's
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the new acme's status mirrored upstream", func() bool { return refAt(e.upstream, schemas.StatusRef("acme")) == a.head.String() })
	waitUntil(t, "the new acme's desired state mirrored upstream", func() bool { return refAt(e.upstream, schemas.InstallRef("acme")) == desired2 })

	// Deleted again, stopped between removing it from main and moving
	// its refs: generation 1 is the newest.
	removeFromMain(t, e, e.upstream, "acme")
	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{e.dir, e.upstream} {
		for ref, want := range map[string]string{
			schemas.InstallRef("acme"):     desired2,
			schemas.StatusRef("acme"):      a.head.String(),
			archiveRef("acme", "installs"): desired1,
			archiveRef("acme", "status"):   status1,
		} {
			if got := refAt(dir, ref); got != want {
				t.Errorf("%s, acme off main but its refs not archived: %s = %q, want %q", dir, ref, got, want)
			}
		}
	}
	_, err := agent.NewRemote(e.http.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: e.keys["acme"]})).
		Heads(ctx, plumbing.ReferenceName(schemas.InstallRef("acme")))
	if err != nil && strings.Contains(err.Error(), "install archived") {
		t.Errorf("the new acme is refused as archived before its refs are: %v", err)
	}

	// The archive phase goes on: generation 2. The server holds a status
	// it accepted after the archive read the refs (just before it saw
	// main without acme; written into its repository here, as the push
	// would have).
	gen2 := func(kind string) string { return "refs/nuon/archive/acme/2/" + kind }
	desired, status := archiveRepoAs(t, e.upstream, "acme", gen2)
	if desired != desired2 || status != a.head.String() {
		t.Fatalf("archived %s and %s, want %s and %s", desired, status, desired2, a.head)
	}
	local := localRepo(t)
	e.mustGit(local, "fetch", "--quiet", e.dir, schemas.StatusRef("acme"))
	last := e.statusCommit(local, "acme", a.head.String(), e.keyFiles["acme"], "last words")
	e.mustGit(local, "push", "--quiet", e.dir, last+":"+schemas.StatusRef("acme"))
	if err := e.srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, e)
	for _, dir := range []string{e.dir, e.upstream} {
		for ref, want := range map[string]string{
			schemas.InstallRef("acme"):     "",
			schemas.StatusRef("acme"):      "",
			archiveRef("acme", "installs"): desired1,
			archiveRef("acme", "status"):   status1,
			gen2("installs"):               desired2,
			gen2("status"):                 last,
		} {
			if got := refAt(dir, ref); got != want {
				t.Errorf("%s, after the second archive: %s = %q, want %q", dir, ref, got, want)
			}
		}
	}
	archivedRefusal(t, e.http.URL, "acme", a)
	if t.Failed() {
		t.Logf("log:\n%s", e.log.String())
	}
}
