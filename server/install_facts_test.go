package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
)

// factsRepo is a tenant repository whose main is committed from a copy
// of fixtures/tenant that the test edits.
type factsRepo struct {
	t        *testing.T
	dir, src string
	repo     *gitrepo.Repo
	store    string
}

func newFactsRepo(t *testing.T) *factsRepo {
	root := t.TempDir()
	f := &factsRepo{t: t, dir: filepath.Join(root, "tenant.git"), src: filepath.Join(root, "src"), store: filepath.Join(root, installFactsFile)}
	gittest.InitBare(t, f.dir)
	if err := os.CopyFS(f.src, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	repo, err := gitrepo.Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.repo = repo
	return f
}

func (f *factsRepo) write(file, data string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.src, file), []byte(data), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *factsRepo) read(file string) string {
	f.t.Helper()
	return string(mustRead(os.ReadFile(filepath.Join(f.src, file))))
}

func (f *factsRepo) commit(msg string) plumbing.Hash {
	f.t.Helper()
	return plumbing.NewHash(gittest.CommitDir(f.t, f.dir, "main", f.src, msg))
}

// start reads main as a server just started does: a new controller
// with the store beside the repository. It returns what it holds and the
// number of files it parsed.
func (f *factsRepo) start(main plumbing.Hash) (map[string]installSeen, int, error) {
	f.t.Helper()
	ri := &rolloutInstalls{store: f.store}
	st := f.repo.Storer()
	fsys, err := renderer.SourceFS(st, main)
	if err != nil {
		f.t.Fatal(err)
	}
	_, files, n, err := ri.read(context.Background(), st, main, fsys)
	if err == nil && ri.saveErr != nil {
		f.t.Fatal(ri.saveErr)
	}
	if err == nil && n != ri.parsed {
		f.t.Fatalf("read says %d files, parsed %d", n, ri.parsed)
	}
	return files, n, err
}

// sameInstalls fails unless got holds what want does.
func sameInstalls(t *testing.T, msg string, got, want map[string]installSeen) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d installs, want %d", msg, len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || g.blob != w.blob || g.deleted != w.deleted || g.named != w.named || g.install.ID != w.install.ID ||
			g.install.Channel != w.install.Channel || !reflect.DeepEqual(g.install.Labels, w.install.Labels) {
			t.Fatalf("%s: %s is %+v, want %+v", msg, name, g, w)
		}
	}
}

// TestRolloutInstallsStore: a restart parses no install file whose blob
// the server accepted before; a changed file is parsed again and, when it
// fails, refuses main as before; two installs of one blob are one entry
// of the store; a file that sets its id is taken from the store only
// under that id.
func TestRolloutInstallsStore(t *testing.T) {
	f := newFactsRepo(t)
	acme := f.read("installs/acme.yaml") + "labels: {ring: canary}\n"
	f.write("installs/acme.yaml", acme)
	f.write("installs/acme2.yaml", acme) // the same blob as acme.yaml
	main := f.commit("acme and acme2, canaries")

	cold, n, err := f.start(main)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("a cold start parsed %d files, want 4", n)
	}
	facts := loadInstallFacts(f.store)
	if facts == nil {
		t.Fatal("no store written after a cold start")
	}
	if len(facts.entries) != 3 {
		t.Fatalf("the store has %d entries for 3 blobs", len(facts.entries))
	}
	if cold["acme.yaml"].blob != cold["acme2.yaml"].blob {
		t.Fatal("acme and acme2 have different blobs")
	}

	warm, n, err := f.start(main)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a restart parsed %d files whose blobs it had seen", n)
	}
	sameInstalls(t, "restart", warm, cold)
	for msg, m := range map[string]map[string]installSeen{"cold": cold, "restart": warm} {
		a, b := m["acme.yaml"].install, m["acme2.yaml"].install
		if reflect.ValueOf(a.Labels).Pointer() != reflect.ValueOf(b.Labels).Pointer() {
			t.Errorf("%s: equal labels of acme and acme2 are two maps", msg)
		}
		if unsafe.StringData(a.Channel) != unsafe.StringData(m["initech.yaml"].install.Channel) {
			t.Errorf("%s: the channel stable is held twice", msg)
		}
	}

	// A changed file is parsed again after a restart.
	f.write("installs/initech.yaml", strings.Replace(f.read("installs/initech.yaml"), "channel: stable", "channel: beta", 1))
	main = f.commit("initech on beta")
	got, n, err := f.start(main)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || got["initech.yaml"].install.Channel != "beta" {
		t.Fatalf("after initech moved: parsed %d, initech %+v", n, got["initech.yaml"])
	}
	if _, n, _ = f.start(main); n != 0 {
		t.Fatalf("a second restart parsed %d files", n)
	}

	// A main whose changed file fails is refused, and the store keeps
	// nothing of it.
	before := mustRead(os.ReadFile(f.store))
	f.write("installs/globex.yaml", strings.Replace(f.read("installs/globex.yaml"), "channel: ", "channel: nope-", 1))
	bad := f.commit("globex on a channel that does not exist")
	if _, _, err := f.start(bad); err == nil || !strings.Contains(err.Error(), `does not exist`) {
		t.Fatalf("a main with a bad install file: %v", err)
	}
	if after := mustRead(os.ReadFile(f.store)); !bytes.Equal(before, after) {
		t.Fatal("a refused main changed the store")
	}
	f.write("installs/globex.yaml", strings.Replace(f.read("installs/globex.yaml"), "channel: nope-", "channel: ", 1))

	// A file that sets its id: accepted under it, refused under another
	// name although its blob is in the store.
	named := "id: acme\n" + acme
	f.write("installs/acme.yaml", named)
	if got, n, err := f.start(f.commit("acme names itself")); err != nil || n != 1 || !got["acme.yaml"].named {
		t.Fatalf("acme names itself: parsed %d, %+v, %v", n, got["acme.yaml"], err)
	}
	f.write("installs/acme2.yaml", named)
	if _, _, err := f.start(f.commit("acme2 says it is acme")); err == nil || !strings.Contains(err.Error(), `but the file name makes this install "acme2"`) {
		t.Fatalf("a file naming another install, its blob in the store: %v", err)
	}
}

// TestRolloutInstallsStoreBroken: a store that is truncated, corrupted,
// of another version or not one at all is ignored: every file is parsed,
// and the store is written again.
func TestRolloutInstallsStoreBroken(t *testing.T) {
	f := newFactsRepo(t)
	main := f.commit("tenant")
	want, n, err := f.start(main)
	if err != nil || n != 3 {
		t.Fatalf("cold start: parsed %d, %v", n, err)
	}
	good := mustRead(os.ReadFile(f.store))
	body := good[len(installFactsMagic)+1 : len(good)-sha256.Size]
	resum := func(b []byte) []byte { s := sha256.Sum256(b); return append(b, s[:]...) }
	other := resum(append(binary.AppendUvarint([]byte(installFactsMagic), installFactsVersion+1), body...))
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)/2]},
		{"truncated by one", good[:len(good)-1]},
		{"a byte flipped", flipped},
		{"another version", other},
		{"garbage", []byte("not a store at all, but long enough to pass for one if lengths were all that was checked")},
		{"entries cut, sum right", resum(bytes.Clone(good[:len(good)-sha256.Size-3]))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(f.store, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, n, err := f.start(main)
			if err != nil {
				t.Fatal(err)
			}
			if n != 3 {
				t.Fatalf("parsed %d files over a broken store, want 3", n)
			}
			sameInstalls(t, tc.name, got, want)
			if loadInstallFacts(f.store) == nil {
				t.Fatal("the store was not written again")
			}
			if _, n, _ := f.start(main); n != 0 {
				t.Fatalf("after it was written again a restart parsed %d", n)
			}
		})
	}
}

// FuzzInstallFacts: the store's decoder takes any bytes without failing
// harder than an error, and what it decodes holds only indices in range
// and blobs in order, and encodes back to itself.
func FuzzInstallFacts(f *testing.F) {
	files := map[string]installSeen{
		"a.yaml": {blob: plumbing.NewHash("01"), install: installFleet("a", "stable", map[string]string{"ring": "canary"})},
		"b.yaml": {blob: plumbing.NewHash("02"), named: true, install: installFleet("b", "beta", nil)},
		"c.yaml": {blob: plumbing.NewHash("01"), install: installFleet("c", "stable", map[string]string{"ring": "canary"})},
		"d.yaml": {blob: plumbing.NewHash("03"), deleted: true, install: installFleet("d", "stable", map[string]string{"ring": "late", "region": "eu"})},
	}
	good := encodeInstallFacts(files)
	f.Add(good)
	f.Add(good[:len(good)-sha256.Size])
	f.Add(encodeInstallFacts(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range [][]byte{data, append(bytes.Clone(data), func() []byte { s := sha256.Sum256(data); return s[:] }()...)} {
			facts, err := decodeInstallFacts(b)
			if err != nil {
				continue
			}
			back := map[string]installSeen{}
			for k, e := range facts.entries {
				if k > 0 && bytes.Compare(facts.entries[k-1].blob[:], e.blob[:]) >= 0 {
					t.Fatal("blobs out of order")
				}
				if got, ok := facts.lookup(e.blob); !ok || got != e {
					t.Fatal("lookup misses an entry")
				}
				name := "x" + e.blob.String() + ".yaml"
				if e.id != 0 {
					name = facts.strs[e.id-1] + ".yaml"
				}
				seen, ok := facts.seen(name, e)
				if !ok {
					t.Fatal("an entry refused under its own id")
				}
				back[name+e.blob.String()] = seen
			}
			again, err := decodeInstallFacts(encodeInstallFacts(back))
			if err != nil {
				t.Fatalf("encoded back, does not decode: %v", err)
			}
			if len(again.entries) != len(facts.entries) {
				t.Fatalf("encoded back, %d entries of %d", len(again.entries), len(facts.entries))
			}
		}
	})
}
