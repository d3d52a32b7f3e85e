package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

func testKey(t testing.TB, name string) *signature.Signer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "keys", name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := signature.ParseSigner(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// statusPack is a pack of one status commit of install on parent, signed
// by key, with the objects of bt less those in omit.
func statusPack(t testing.TB, install string, parent plumbing.Hash, key *signature.Signer, omit ...plumbing.Hash) ([]byte, plumbing.Hash, plumbing.Hash) {
	t.Helper()
	bt := gitobj.NewBatch()
	blob := bt.Add(plumbing.BlobObject, []byte(`{"install":"`+install+`"}`+"\n"))
	tree := bt.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = []plumbing.Hash{parent}
	}
	who := object.Signature{Name: "agent", Email: install + "@nuon.invalid", When: time.Unix(1700000000, 0)}
	h, err := bt.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who,
		Message: "status\n\n" + schemas.TrailerInstall + ": " + install + "\n"}, key)
	if err != nil {
		t.Fatal(err)
	}
	out := gitobj.NewBatch()
	for _, o := range []plumbing.Hash{h, tree, blob} {
		if !slices.Contains(omit, o) {
			typ, data, _ := bt.Get(o)
			out.Add(typ, data)
		}
	}
	var pack bytes.Buffer
	if err := out.WritePack(&pack); err != nil {
		t.Fatal(err)
	}
	return pack.Bytes(), h, tree
}

// TestCheckPush checks pushes of acme's status against the quarantine:
// what the pre-receive hook checked, and that every object is there.
func TestCheckPush(t *testing.T) {
	acme, globex := testKey(t, "acme"), testKey(t, "globex")
	ref := schemas.StatusRef("acme")
	good, goodHash, _ := statusPack(t, "acme", plumbing.ZeroHash, acme)
	child, childHash, _ := statusPack(t, "acme", goodHash, acme)
	_, _, tree := statusPack(t, "acme", plumbing.ZeroHash, acme)
	noTree, noTreeHash, _ := statusPack(t, "acme", plumbing.ZeroHash, acme, tree)
	other, otherHash, _ := statusPack(t, "acme", plumbing.ZeroHash, globex)
	named, namedHash, _ := statusPack(t, "globex", plumbing.ZeroHash, acme)
	for _, tc := range []struct {
		name  string
		packs [][]byte
		cmd   pushCommand
		want  string // "" accepted, else part of the refusal
	}{
		{"first status", [][]byte{good}, pushCommand{plumbing.ZeroHash, goodHash, ref}, ""},
		{"two commits", [][]byte{good, child}, pushCommand{plumbing.ZeroHash, childHash, ref}, ""},
		{"its parent only in the pack", [][]byte{child}, pushCommand{plumbing.ZeroHash, childHash, ref}, "object not found"},
		{"not a fast-forward", [][]byte{good}, pushCommand{childHash, goodHash, ref}, "not a fast-forward"},
		{"tree missing", [][]byte{noTree}, pushCommand{plumbing.ZeroHash, noTreeHash, ref}, "missing object " + tree.String()},
		{"another key", [][]byte{other}, pushCommand{plumbing.ZeroHash, otherHash, ref}, "not trusted"},
		{"another install's trailer", [][]byte{named}, pushCommand{plumbing.ZeroHash, namedHash, ref}, "trailer"},
		{"another ref", [][]byte{good}, pushCommand{plumbing.ZeroHash, goodHash, schemas.StatusRef("globex")}, "only its own status ref"},
		{"delete", nil, pushCommand{goodHash, plumbing.ZeroHash, ref}, "deleting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuarantine(nil)
			for _, p := range tc.packs {
				if err := q.readPack(p); err != nil {
					t.Fatal(err)
				}
			}
			err := checkPush(q, acme.PublicKey(), "acme", tc.cmd)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal with %q", err, tc.want)
			}
		})
	}
}

// TestReadPackBounds refuses packs over the bounds before the parser
// inflates them.
func TestReadPackBounds(t *testing.T) {
	big := gitobj.NewBatch()
	data := make([]byte, maxPushInflated+1)
	big.Add(plumbing.BlobObject, data) // zeros: a small pack
	var pack bytes.Buffer
	if err := big.WritePack(&pack); err != nil {
		t.Fatal(err)
	}
	if pack.Len() > maxPushPack {
		t.Fatalf("pack of %d bytes, want a small one", pack.Len())
	}
	random := make([]byte, maxPushPack+1)
	rand.Read(random)
	for _, tc := range []struct {
		name string
		pack []byte
	}{
		{"inflates over the bound", pack.Bytes()},
		{"pack over the bound", random},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newQuarantine(nil).readPack(tc.pack)
			if !errors.Is(err, errTooLarge) {
				t.Fatalf("got %v, want %v", err, errTooLarge)
			}
		})
	}
}

// TestReadThinPack reads a thin pack made by git pack-objects: the changed
// blob is a delta of the one the repository holds, which the quarantine
// reads through git cat-file.
func TestReadThinPack(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src")
	gittest.Git(t, "", "init", "--quiet", src)
	var text strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&text, "line %d of a status long enough to be worth a delta\n", i)
	}
	commit := func(content, branch string) string {
		if err := os.WriteFile(filepath.Join(src, "status.json"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		gittest.Git(t, src, "add", ".")
		gittest.Git(t, src, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "--quiet", "-m", branch)
		gittest.Git(t, src, "branch", branch)
		return gittest.Git(t, src, "rev-parse", "HEAD")
	}
	a := commit(text.String(), "a")
	b := commit(strings.Replace(text.String(), "line 1000 ", "line one thousand ", 1), "b")
	dst := filepath.Join(root, "dst.git")
	gittest.InitBare(t, dst)
	gittest.Git(t, dst, "fetch", "--quiet", src, "a:refs/heads/a")
	cmd := exec.Command("git", "pack-objects", "--revs", "--thin", "--stdout", "-q")
	cmd.Dir, cmd.Stdin = src, strings.NewReader(b+"\n^"+a+"\n")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := newQuarantine(nil).readPack(raw); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Fatalf("without the repository: %v, want a missing delta base (is the pack thin?)", err)
	}
	db := newObjectDB(dst)
	defer db.close()
	q := newQuarantine(db)
	if err := q.readPack(raw); err != nil {
		t.Fatal(err)
	}
	c, err := q.commit(plumbing.NewHash(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.connected([]*object.Commit{c}); err != nil {
		t.Fatal(err)
	}
	blob := gittest.Git(t, src, "rev-parse", b+":status.json")
	_, got, err := q.content(plumbing.NewHash(blob))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile(filepath.Join(src, "status.json")); !bytes.Equal(got, want) {
		t.Fatal("the resolved blob differs from the file")
	}
	// What the repository lacks is missing, and the reader goes on.
	if _, _, err := db.info(plumbing.NewHash(strings.Repeat("3", 40))); !errors.Is(err, errNoObject) {
		t.Fatalf("info of a missing object: %v", err)
	}
	if typ, _, err := db.info(plumbing.NewHash(a)); err != nil || typ != plumbing.CommitObject {
		t.Fatalf("info of %s: %v %v", a, typ, err)
	}
}

// TestWriteObjectsAndRef writes a push's objects and ref and reads them
// back with git; a ref that moved under the update is refused as stale.
func TestWriteObjectsAndRef(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r.git")
	gittest.InitBare(t, dir)
	acme := testKey(t, "acme")
	pack, h, _ := statusPack(t, "acme", plumbing.ZeroHash, acme)
	q := newQuarantine(nil)
	if err := q.readPack(pack); err != nil {
		t.Fatal(err)
	}
	for _, o := range q.order {
		typ, data, err := q.content(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeLoose(dir, o, typ, data, true); err != nil {
			t.Fatal(err)
		}
	}
	ref := schemas.StatusRef("acme")
	if err := writeRef(dir, ref, plumbing.ZeroHash, h, true); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, dir, "fsck", "--strict", "--no-dangling")
	if got := gittest.Git(t, dir, "rev-parse", ref); got != h.String() {
		t.Fatalf("%s is %s, want %s", ref, got, h)
	}
	other := plumbing.NewHash(strings.Repeat("1", 40))
	if err := writeRef(dir, ref, plumbing.ZeroHash, other, false); !errors.Is(err, errStaleRef) {
		t.Fatalf("moved from a stale old: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ref+".lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeRef(dir, ref, h, other, false); !errors.Is(err, errRefLocked) {
		t.Fatalf("moved a locked ref: %v", err)
	}
	if got := gittest.Git(t, dir, "rev-parse", ref); got != h.String() {
		t.Fatalf("%s is %s, want %s", ref, got, h)
	}
}

func TestReadFsyncPolicy(t *testing.T) {
	for _, tc := range []struct {
		config [][2]string
		want   fsyncPolicy
	}{
		{nil, fsyncPolicy{}},
		{[][2]string{{"core.fsync", "committed"}}, fsyncPolicy{objects: true, refs: true}},
		{[][2]string{{"core.fsync", "reference"}}, fsyncPolicy{refs: true}},
		{[][2]string{{"core.fsync", "all,-reference"}}, fsyncPolicy{objects: true}},
		{[][2]string{{"core.fsyncObjectFiles", "true"}}, fsyncPolicy{objects: true}},
	} {
		t.Run(fmt.Sprint(tc.config), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "r.git")
			gittest.InitBare(t, dir)
			for _, kv := range tc.config {
				gittest.Git(t, dir, "config", kv[0], kv[1])
			}
			if diff := cmp.Diff(tc.want, readFsyncPolicy(context.Background(), dir), cmp.AllowUnexported(fsyncPolicy{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestPushStoreBatch writes one batch of three pushes, syncing as
// core.fsync=committed asks: two land, the one whose ref moved under it
// fails alone and moves nothing.
func TestPushStoreBatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r.git")
	gittest.InitBare(t, dir)
	s := &pushStore{dir: dir, fsync: fsyncPolicy{objects: true, refs: true}}
	var batch []*storeJob
	for _, id := range []string{"acme", "globex", "initech"} {
		pack, h, _ := statusPack(t, id, plumbing.ZeroHash, testKey(t, id))
		q := newQuarantine(nil)
		if err := q.readPack(pack); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, &storeJob{q: q, c: pushCommand{plumbing.ZeroHash, h, schemas.StatusRef(id)}})
	}
	moved := plumbing.NewHash(strings.Repeat("2", 40))
	if err := writeRef(dir, schemas.StatusRef("globex"), plumbing.ZeroHash, moved, false); err != nil {
		t.Fatal(err)
	}
	s.write(batch)
	for _, j := range batch {
		got := gittest.Git(t, dir, "rev-parse", j.c.ref)
		if j.c.ref == schemas.StatusRef("globex") {
			if !errors.Is(j.err, errStaleRef) || got != moved.String() {
				t.Errorf("globex: %v, ref %s", j.err, got)
			}
			continue
		}
		if j.err != nil || got != j.c.new.String() {
			t.Errorf("%s: %v, ref %s", j.c.ref, j.err, got)
		}
		gittest.Git(t, dir, "cat-file", "-e", j.c.new.String()+"^{tree}")
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "objects", "*", "tmp_obj_*")); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}
