package server_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// wire speaks git's smart HTTP to a server by hand, every request signed
// with one install's key: what an attacker holding that key can send.
type wire struct {
	t       testing.TB
	base    string // the repository's URL
	install string
	client  *http.Client
}

func newWire(t testing.TB, serverURL, install string, key *signature.Signer) *wire {
	return &wire{t: t, base: serverURL + "/tenant.git", install: install,
		client: &http.Client{Transport: (&request.Signer{Install: install, Key: key}).Transport(nil), Timeout: time.Minute}}
}

func (w *wire) post(service string, body []byte) []byte {
	w.t.Helper()
	req, err := http.NewRequest(http.MethodPost, w.base+"/"+service, bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-"+service+"-request")
	if service == "git-upload-pack" {
		req.Header.Set("Git-Protocol", "version=2")
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return append([]byte(fmt.Sprintf("HTTP %d\n", resp.StatusCode)), out...)
}

// fetch sends a protocol v2 fetch with the argument lines args.
func (w *wire) fetch(args ...string) []byte {
	w.t.Helper()
	var b bytes.Buffer
	for _, l := range []string{"command=fetch\n", "agent=git/2.47\n", "object-format=sha1\n"} {
		fmt.Fprintf(&b, "%04x%s", len(l)+4, l)
	}
	b.WriteString("0001")
	for _, a := range args {
		fmt.Fprintf(&b, "%04x%s\n", len(a)+5, a)
	}
	b.WriteString("0000")
	return w.post("git-upload-pack", b.Bytes())
}

// fetchAnswer is a fetch response taken apart: its pkt-lines outside the
// pack, and the ids of the objects in the pack.
type fetchAnswer struct {
	lines   []string
	objects []string
	pack    []byte
}

// parseAnswer splits a fetch response; the pack's objects are read by
// go-git's parser (deltas resolved).
func parseAnswer(t testing.TB, resp []byte) fetchAnswer {
	t.Helper()
	var a fetchAnswer
	status, rest, _ := bytes.Cut(resp, []byte("\n"))
	a.lines = append(a.lines, string(status))
	inPack := false
	for len(rest) >= 4 {
		n, err := strconv.ParseUint(string(rest[:4]), 16, 16)
		if err != nil {
			a.lines = append(a.lines, "raw: "+string(rest))
			break
		}
		if n < 4 {
			a.lines = append(a.lines, fmt.Sprintf("%04x", n))
			rest = rest[4:]
			continue
		}
		if int(n) > len(rest) {
			t.Fatalf("truncated pkt-line in %q", rest)
		}
		line := rest[4:n]
		rest = rest[n:]
		if inPack && len(line) > 0 {
			switch line[0] {
			case 1:
				a.pack = append(a.pack, line[1:]...)
			default:
				a.lines = append(a.lines, fmt.Sprintf("band %d: %s", line[0], line[1:]))
			}
			continue
		}
		a.lines = append(a.lines, strings.TrimSuffix(string(line), "\n"))
		if string(line) == "packfile\n" {
			inPack = true
		}
	}
	if len(a.pack) > 0 {
		st := memory.NewStorage()
		p, err := packfile.NewParserWithStorage(packfile.NewScanner(bytes.NewReader(a.pack)), st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(); err != nil {
			t.Fatalf("pack: %v", err)
		}
		for h := range st.Objects {
			a.objects = append(a.objects, h.String())
		}
		slices.Sort(a.objects)
	}
	return a
}

// objectsOf lists the objects reachable from revs in the repository dir.
func objectsOf(t testing.TB, dir string, revs ...string) map[string]bool {
	t.Helper()
	out := gittest.Git(t, dir, append([]string{"rev-list", "--objects"}, revs...)...)
	set := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			set[f[0]] = true
		}
	}
	return set
}

// allObjects lists every object of the repository dir.
func allObjects(t testing.TB, dir string) map[string]bool {
	t.Helper()
	out := gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
	set := map[string]bool{}
	for _, l := range strings.Fields(out) {
		set[l] = true
	}
	return set
}

// isolationEnv is a served tenant where acme has a history of its own:
// status commits pushed over the wire, each with its own tree, a day apart.
type isolationEnv struct {
	*env
	acme    *wire
	history []plumbing.Hash // acme's status commits, oldest first
	// outside are objects acme must never see or learn of: another
	// install's desired commit, tree and files, main's commit and tree.
	outside []string
}

func newIsolationEnv(t *testing.T) *isolationEnv {
	e := &isolationEnv{env: newEnv(t)}
	e.acme = newWire(t, e.http.URL, "acme", e.keys["acme"])
	parent := plumbing.ZeroHash
	for i := range 5 {
		when := time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC)
		c, pack := statusPack(t, e.keys["acme"], "acme", parent, when, map[string]string{
			"status.json": fmt.Sprintf(`{"n":%d}`, i),
			"logs/app":    strings.Repeat(fmt.Sprintf("line %d\n", i), 20),
		})
		if got := e.acme.push(parent, c, schemas.StatusRef("acme"), pack); !bytes.Contains(got, []byte("ok "+schemas.StatusRef("acme"))) {
			t.Fatalf("status push %d: %q", i, got)
		}
		e.history = append(e.history, c)
		parent = c
	}
	globex := newWire(t, e.http.URL, "globex", e.keys["globex"])
	c, pack := statusPack(t, e.keys["globex"], "globex", plumbing.ZeroHash, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC),
		map[string]string{"status.json": `{"account":"globex-secret"}`})
	if got := globex.push(plumbing.ZeroHash, c, schemas.StatusRef("globex"), pack); !bytes.Contains(got, []byte("ok ")) {
		t.Fatalf("globex status push: %q", got)
	}
	mine := objectsOf(t, e.dir, schemas.InstallRef("acme"), schemas.StatusRef("acme"))
	for o := range objectsOf(t, e.dir, "refs/heads/main", schemas.InstallRef("globex"), schemas.StatusRef("globex")) {
		if !mine[o] {
			e.outside = append(e.outside, o)
		}
	}
	slices.Sort(e.outside)
	if len(e.outside) < 10 {
		t.Fatalf("only %d objects outside acme's closure", len(e.outside))
	}
	return e
}

// push sends a receive-pack request: one command and a pack.
func (w *wire) push(old, new plumbing.Hash, ref string, pack []byte) []byte {
	w.t.Helper()
	var b bytes.Buffer
	line := old.String() + " " + new.String() + " " + ref + "\x00report-status\n"
	fmt.Fprintf(&b, "%04x%s0000", len(line)+4, line)
	b.Write(pack)
	return w.post("git-receive-pack", b.Bytes())
}

// statusPack makes a signed status commit of install with files (plus
// entries naming objects the pack does not hold, extra) on parent, and a
// pack of everything new.
func statusPack(t testing.TB, key *signature.Signer, install string, parent plumbing.Hash, when time.Time, files map[string]string, extra ...gitobj.Entry) (plumbing.Hash, []byte) {
	t.Helper()
	b := gitobj.NewBatch()
	dirs := map[string][]gitobj.Entry{}
	for name, content := range files {
		dir, base := "", name
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			dir, base = name[:i], name[i+1:]
		}
		dirs[dir] = append(dirs[dir], gitobj.Entry{Name: base, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, []byte(content))})
	}
	root := extra
	for dir, entries := range dirs {
		if dir == "" {
			root = append(root, entries...)
			continue
		}
		root = append(root, gitobj.Entry{Name: dir, Mode: filemode.Dir, Hash: b.Tree(entries)})
	}
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = []plumbing.Hash{parent}
	}
	c, err := b.Commit(gitobj.Commit{Tree: b.Tree(root), Parents: parents,
		Author:  object.Signature{Name: "agent", Email: install + "@nuon.invalid", When: when},
		Message: "status\n\n" + schemas.TrailerInstall + ": " + install + "\n"}, key)
	if err != nil {
		t.Fatal(err)
	}
	var pack bytes.Buffer
	if err := b.WritePack(&pack); err != nil {
		t.Fatal(err)
	}
	return c, pack.Bytes()
}

// rawPack writes a pack by hand: whole objects, and ref-deltas against
// bases named by id (which the pack need not hold: a thin pack).
type rawEntry struct {
	typ     plumbing.ObjectType // a base type, or REFDeltaObject
	base    plumbing.Hash
	content []byte // the object, or the delta
}

func rawPack(entries ...rawEntry) []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(entries)))
	for _, e := range entries {
		size := len(e.content)
		c := byte(e.typ)<<4 | byte(size&0x0f)
		size >>= 4
		for size > 0 {
			b.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		b.WriteByte(c)
		if e.typ == plumbing.REFDeltaObject {
			b.Write(e.base[:])
		}
		zw := zlib.NewWriter(&b)
		zw.Write(e.content)
		zw.Close()
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// copyDelta is a delta that makes its base again, whole: with it, a thin
// pack would copy an object the pusher never held.
func copyDelta(baseSize int) []byte {
	varint := func(b []byte, n int) []byte {
		for n >= 0x80 {
			b = append(b, byte(n)|0x80)
			n >>= 7
		}
		return append(b, byte(n))
	}
	d := varint(varint(nil, baseSize), baseSize)
	// copy: offset 0, size baseSize (up to 3 bytes of size)
	return append(d, 0x80|0x10|0x20|0x40, byte(baseSize), byte(baseSize>>8), byte(baseSize>>16))
}

// TestFetchUnshallowOfOthers is the first attack: acme's desired
// commit names main's commit; a fetch that says the client is shallow at
// main's commit and deepens without end made git upload-pack send main's
// tree with every install's file.
func TestFetchUnshallowOfOthers(t *testing.T) {
	e := newIsolationEnv(t)
	tip := e.serverRef(schemas.InstallRef("acme"))
	msg := gittest.Git(t, e.dir, "log", "-1", "--format=%B", tip)
	source, ok := schemas.Trailer(msg, schemas.TrailerSource)
	if !ok || len(source) != 40 {
		t.Fatalf("desired commit names no source:\n%s", msg)
	}
	mainParent := gittest.Git(t, e.dir, "rev-parse", "refs/heads/main")
	mine := objectsOf(t, e.dir, schemas.InstallRef("acme"), schemas.StatusRef("acme"))
	for _, shallow := range []string{source, mainParent, e.serverRef(schemas.InstallRef("globex"))} {
		resp := e.acme.fetch("want "+tip, "shallow "+shallow, "deepen 2147483647", "done")
		a := parseAnswer(t, resp)
		if bytes.Contains(resp, []byte("unshallow")) {
			t.Errorf("shallow %s: answered unshallow:\n%s", shallow, strings.Join(a.lines, "\n"))
		}
		for _, o := range a.objects {
			if !mine[o] {
				t.Errorf("shallow %s: the pack holds %s, outside acme's closure", shallow, o)
			}
		}
		if len(a.objects) == 0 {
			t.Errorf("shallow %s: no pack: %s", shallow, strings.Join(a.lines, "\n"))
		}
	}
}

// TestFetchOracles is the second attack: have lines are
// acknowledged only for acme's own commits, and deepen-not names only its
// refs, so nothing tells an object or ref that exists from one that does
// not.
func TestFetchOracles(t *testing.T) {
	e := newIsolationEnv(t)
	tip := e.serverRef(schemas.InstallRef("acme"))
	missing := strings.Repeat("ab", 20)
	for _, o := range e.outside {
		a, b := e.acme.fetch("want "+tip, "have "+o), e.acme.fetch("want "+tip, "have "+missing)
		if !bytes.Equal(a, b) {
			t.Errorf("have %s (exists) answered %q, a missing id %q", o, a, b)
		}
		if bytes.Contains(a, []byte("ACK")) {
			t.Errorf("have %s acknowledged: %q", o, a)
		}
	}
	if got := e.acme.fetch("want "+tip, "have "+e.history[1].String()); !bytes.Contains(got, []byte("ACK "+e.history[1].String())) {
		t.Errorf("acme's own status commit not acknowledged: %q", got)
	}
	ours := e.acme.fetch("want "+tip, "deepen-not "+schemas.InstallRef("globex"), "done")
	none := e.acme.fetch("want "+tip, "deepen-not "+schemas.InstallRef("nosuch"), "done")
	if !bytes.Equal(ours, bytes.ReplaceAll(none, []byte("nosuch"), []byte("globex"))) {
		t.Errorf("deepen-not of an existing ref %q, of a missing one %q", ours, none)
	}
	for _, w := range append([]string{missing}, e.outside...) {
		got := e.acme.fetch("want "+w, "done")
		if want := "not our ref " + w; !bytes.Contains(got, []byte(want)) {
			t.Errorf("want %s: %q, want %q", w, got, want)
		}
	}
}

// TestPushNamesOnlyItsOwn is the third attack: a status commit
// whose tree names objects acme cannot read (another install's file,
// main's installs/ tree), or a thin pack whose delta is based on one, is
// refused alike whether the object exists or not, and nothing moves.
func TestPushNamesOnlyItsOwn(t *testing.T) {
	e := newIsolationEnv(t)
	status := schemas.StatusRef("acme")
	tip := e.history[len(e.history)-1]
	mainTree := gittest.Git(t, e.dir, "rev-parse", "refs/heads/main:installs")
	globexFile := gittest.Git(t, e.dir, "rev-parse", "refs/heads/main:installs/globex.yaml")
	missing := plumbing.NewHash(strings.Repeat("cd", 20))
	when := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	answers := map[string][]byte{}
	for name, extra := range map[string]gitobj.Entry{
		"another install's file": {Name: "x", Mode: filemode.Regular, Hash: plumbing.NewHash(globexFile)},
		"main's installs tree":   {Name: "x", Mode: filemode.Dir, Hash: plumbing.NewHash(mainTree)},
		"a missing blob":         {Name: "x", Mode: filemode.Regular, Hash: missing},
		"a missing tree":         {Name: "x", Mode: filemode.Dir, Hash: missing},
	} {
		c, pack := statusPack(t, e.keys["acme"], "acme", tip, when, map[string]string{"status.json": "{}"}, extra)
		got := e.acme.push(tip, c, status, pack)
		if bytes.Contains(got, []byte("ok "+status)) {
			t.Fatalf("%s: push accepted: %q", name, got)
		}
		answers[name] = bytes.ReplaceAll(got, []byte(extra.Hash.String()), []byte("ID"))
		answers[name] = bytes.ReplaceAll(answers[name], []byte(c.String()), []byte("COMMIT"))
	}
	if a, b := answers["another install's file"], answers["a missing blob"]; !bytes.Equal(a, b) {
		t.Errorf("naming another install's file: %q; a missing one: %q", a, b)
	}
	if a, b := answers["main's installs tree"], answers["a missing tree"]; !bytes.Equal(a, b) {
		t.Errorf("naming main's installs tree: %q; a missing one: %q", a, b)
	}
	// A thin pack whose blob is a copy of globex's file, by delta.
	size, _ := strconv.Atoi(gittest.Git(t, e.dir, "cat-file", "-s", globexFile))
	for _, base := range []plumbing.Hash{plumbing.NewHash(globexFile), missing} {
		pack := rawPack(rawEntry{typ: plumbing.REFDeltaObject, base: base, content: copyDelta(size)})
		got := e.acme.push(tip, tip, status, pack) // the command is refused or not; the pack must be
		if bytes.Contains(got, []byte("unpack ok")) {
			t.Errorf("a delta based on %s was unpacked: %q", base, got)
		}
	}
	if got := e.serverRef(status); got != tip.String() {
		t.Fatalf("status ref moved to %s", got)
	}
}

// TestStockGitWithinClosure: stock git through a signing proxy, with every
// shallow and partial form it has, gets acme's objects and nothing else;
// what it asks outside acme's closure fails as a missing object does.
func TestStockGitWithinClosure(t *testing.T) {
	e := newIsolationEnv(t)
	url := e.proxy("acme", e.keys["acme"])
	status := schemas.StatusRef("acme")
	mine := objectsOf(t, e.dir, schemas.InstallRef("acme"), status)
	check := func(t *testing.T, dir string) {
		t.Helper()
		for o := range allObjects(t, dir) {
			if !mine[o] {
				t.Errorf("%s holds %s, outside acme's closure", dir, o)
			}
		}
	}
	clone := func(t *testing.T, args ...string) string {
		dir := filepath.Join(t.TempDir(), "c.git")
		e.mustGit("", append(append([]string{"clone", "--bare", "--no-tags", "--single-branch", "--branch", strings.TrimPrefix(status, "refs/heads/")}, args...), url, dir)...)
		return dir
	}
	count := func(dir string) int {
		return len(strings.Fields(e.mustGit(dir, "rev-list", "HEAD")))
	}
	t.Run("depth", func(t *testing.T) {
		dir := clone(t, "--depth", "2")
		if n := count(dir); n != 2 {
			t.Errorf("--depth 2 cloned %d commits", n)
		}
		e.mustGit(dir, "fetch", "--deepen", "1", "origin", status)
		if n := count(dir); n != 3 {
			t.Errorf("--deepen 1 made %d commits", n)
		}
		e.mustGit(dir, "fetch", "--unshallow", "origin", status)
		if n := count(dir); n != len(e.history) {
			t.Errorf("--unshallow made %d commits, want %d", n, len(e.history))
		}
		check(t, dir)
	})
	t.Run("shallow-since", func(t *testing.T) {
		dir := clone(t, "--shallow-since", "2026-01-03T12:00:00Z")
		if n := count(dir); n != 2 {
			t.Errorf("--shallow-since cloned %d commits, want 2", n)
		}
		check(t, dir)
	})
	t.Run("shallow-exclude", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "c.git")
		gittest.InitBare(t, dir)
		e.mustGit(dir, "fetch", "--shallow-exclude", schemas.InstallRef("acme"), url, status+":"+status)
		check(t, dir)
		out, err := git(dir, "fetch", "--shallow-exclude", schemas.InstallRef("globex"), url, status+":refs/x")
		if err == nil || strings.Contains(out, e.serverRef(schemas.InstallRef("globex"))) {
			t.Errorf("--shallow-exclude of another install's ref: %v\n%s", err, out)
		}
	})
	t.Run("filter", func(t *testing.T) {
		dir := clone(t, "--filter=blob:none")
		check(t, dir)
		// Reading a file fetches its blob by id (a lazy fetch).
		got := e.mustGit(dir, "cat-file", "-p", "HEAD:status.json")
		if got != `{"n":4}` {
			t.Errorf("status.json %q", got)
		}
		check(t, dir)
	})
	t.Run("fetch by id", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "c.git")
		gittest.InitBare(t, dir)
		old := e.history[1].String()
		e.mustGit(dir, "fetch", url, old+":refs/old")
		if got := e.mustGit(dir, "rev-parse", "refs/old"); got != old {
			t.Errorf("fetched %s, want %s", got, old)
		}
		check(t, dir)
		for _, o := range e.outside[:3] {
			out, err := git(dir, "fetch", url, o+":refs/x")
			if err == nil || !strings.Contains(out, "not our ref") {
				t.Errorf("fetch %s: %v\n%s", o, err, out)
			}
		}
		check(t, dir)
	})
}

// servedWithout is a repository with acme's refs and nothing else of the
// tenant: main holds only acme's install file. Served, it must answer
// acme exactly as the whole tenant's repository does.
func servedWithout(t *testing.T, e *isolationEnv) string {
	dir := filepath.Join(t.TempDir(), "alone.git")
	gittest.InitBare(t, dir)
	refs := []string{schemas.InstallRef("acme"), schemas.StatusRef("acme")}
	for _, r := range refs {
		gittest.Git(t, dir, "fetch", "--quiet", "--no-tags", e.dir, r+":"+r)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	acme := gittest.Git(t, e.dir, "cat-file", "-p", "refs/heads/main:installs/acme.yaml")
	if err := os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), []byte(acme+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, "", "init", "--quiet", src)
	gittest.CommitDir(t, dir, "main", src, "acme alone")
	srv, err := server.New(context.Background(), server.Config{Dir: dir, PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return hs.URL
}

// TestIsolationProperty drives the server with random fetch and push
// requests signed by acme (shallow, deepen, deepen-since, deepen-not,
// filters, want-ref, haves, thin packs and deltas on bases acme does not
// hold, foreign refs, many commands, long names) and checks two things
// of every answer: no object outside acme's closure is in it, and it is
// the same as the answer of a repository that holds acme's refs and
// nothing else of the tenant. NUON_ISOLATION_SEED picks another run;
// NUON_ISOLATION_N its length.
func TestIsolationProperty(t *testing.T) {
	e := newIsolationEnv(t)
	isolationRun(t, e, e.acme, newWire(t, servedWithout(t, e), "acme", e.keys["acme"]), true)
}

// TestReplicaIsolation runs the property's fetches against a read replica:
// it answers from its mirror, which holds the whole tenant, exactly as a
// repository holding acme alone does. (Pushes go through to the writer,
// which the property checks above.)
func TestReplicaIsolation(t *testing.T) {
	e := newIsolationEnv(t)
	w := writer(t, e.env)
	_, r := replica(t, e.env, w.URL, time.Hour)
	waitUntil(t, "the replica's first refresh", func() bool {
		resp, err := http.Get(r.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	isolationRun(t, e, newWire(t, r.URL, "acme", e.keys["acme"]), newWire(t, servedWithout(t, e), "acme", e.keys["acme"]), false)
}

// isolationRun sends the same random requests to whole and alone and
// compares their answers (see TestIsolationProperty); pushes only when
// pushes is set.
func isolationRun(t *testing.T, e *isolationEnv, whole, alone *wire, pushes bool) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("NUON_ISOLATION_SEED"), 10, 64); err == nil {
		seed = v
	}
	n := 120
	if v, err := strconv.Atoi(os.Getenv("NUON_ISOLATION_N")); err == nil {
		n = v
	}
	t.Logf("NUON_ISOLATION_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	status := schemas.StatusRef("acme")
	mine := objectsOf(t, e.dir, schemas.InstallRef("acme"), status)
	var own []string
	for o := range mine {
		own = append(own, o)
	}
	slices.Sort(own)
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	missing := func() string {
		var b [20]byte
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return plumbing.Hash(b).String()
	}
	// id is any object id: acme's, another's, or none at all.
	id := func() string {
		switch rng.IntN(4) {
		case 0:
			return pick(e.outside)
		case 1:
			return missing()
		case 2:
			return e.history[rng.IntN(len(e.history))].String()
		}
		return pick(own)
	}
	refs := []string{schemas.InstallRef("acme"), status, schemas.InstallRef("globex"), schemas.StatusRef("globex"), "refs/heads/main", "main", "nuon/installs/acme", "refs/heads/nuon/installs/nosuch"}
	tips := func() []string {
		return []string{e.serverRef(schemas.InstallRef("acme")), e.serverRef(status)}
	}
	tip := e.history[len(e.history)-1]
	for i := range n {
		var resA, resB []byte
		var what string
		if !pushes || rng.IntN(5) > 0 {
			var args []string
			for range 1 + rng.IntN(3) {
				if rng.IntN(3) == 0 {
					args = append(args, "want "+id())
				} else {
					args = append(args, "want "+pick(tips()))
				}
			}
			if rng.IntN(4) == 0 {
				args = append(args, "want-ref "+pick(refs))
			}
			for range rng.IntN(4) {
				args = append(args, "have "+id())
			}
			for range rng.IntN(3) {
				args = append(args, "shallow "+id())
			}
			switch rng.IntN(6) {
			case 0:
				args = append(args, "deepen "+strconv.Itoa(1+rng.IntN(4)))
			case 1:
				args = append(args, "deepen 2147483647")
			case 2:
				args = append(args, "deepen "+strconv.Itoa(1+rng.IntN(3)), "deepen-relative")
			case 3:
				args = append(args, "deepen-since "+strconv.FormatInt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()+int64(rng.IntN(6*86400)), 10))
			case 4:
				args = append(args, "deepen-not "+pick(refs))
			}
			switch rng.IntN(5) {
			case 0:
				args = append(args, "filter blob:none")
			case 1:
				args = append(args, "filter blob:limit="+strconv.Itoa(rng.IntN(200)))
			case 2:
				args = append(args, "filter tree:0")
			}
			for _, f := range []string{"thin-pack", "ofs-delta", "no-progress", "include-tag"} {
				if rng.IntN(2) == 0 {
					args = append(args, f)
				}
			}
			if rng.IntN(3) > 0 {
				args = append(args, "done")
			}
			rng.Shuffle(len(args), func(i, j int) { args[i], args[j] = args[j], args[i] })
			what = "fetch " + strings.Join(args, ", ")
			resA, resB = whole.fetch(args...), alone.fetch(args...)
		} else {
			ref, old := status, tip
			switch rng.IntN(6) {
			case 0:
				ref = pick(refs)
			case 1:
				ref = status + "/" + strings.Repeat("x", 200+rng.IntN(4000))
			}
			when := time.Date(2026, 3, 1+i%28, 0, 0, 0, 0, time.UTC)
			var extra []gitobj.Entry
			if rng.IntN(2) == 0 {
				extra = append(extra, gitobj.Entry{Name: "named", Mode: filemode.Regular, Hash: plumbing.NewHash(id())})
			}
			c, pack := statusPack(t, e.keys["acme"], "acme", old, when, map[string]string{"status.json": strconv.Itoa(i)}, extra...)
			if rng.IntN(4) == 0 {
				base := plumbing.NewHash(id())
				pack = rawPack(rawEntry{typ: plumbing.REFDeltaObject, base: base, content: copyDelta(1 + rng.IntN(300))})
			}
			what = fmt.Sprintf("push %s to %.60s, extra %v", c, ref, extra)
			resA, resB = whole.push(old, c, ref, pack), alone.push(old, c, ref, pack)
			if bytes.Contains(resA, []byte("ok "+status+"\n")) {
				tip = c
			}
		}
		a, b := parseAnswer(t, resA), parseAnswer(t, resB)
		for _, o := range a.objects {
			if !mine[o] {
				t.Fatalf("request %d, %s:\nthe answer holds %s, outside acme's closure", i, what, o)
			}
		}
		if !slices.Equal(a.lines, b.lines) || !slices.Equal(a.objects, b.objects) {
			t.Fatalf("request %d, %s:\nthe whole tenant answered\n%s\n%v\nacme's refs alone\n%s\n%v", i, what,
				strings.Join(a.lines, "\n"), a.objects, strings.Join(b.lines, "\n"), b.objects)
		}
		mine = objectsOf(t, e.dir, schemas.InstallRef("acme"), status)
	}
}
