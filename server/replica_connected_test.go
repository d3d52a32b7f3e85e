package server

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// replicaRepo is a bare repository for the connectivity check's tests,
// with helpers that write objects as an attacker may: trees naming
// objects that are not there, or naming them as the wrong type.
type replicaRepo struct {
	t   *testing.T
	dir string
	n   int // commits written: each a second newer
}

func newReplicaRepo(t *testing.T) *replicaRepo {
	dir := filepath.Join(t.TempDir(), "mirror.git")
	rgit(t, "", nil, "init", "--quiet", "--bare", dir)
	return &replicaRepo{t: t, dir: dir}
}

// blob writes a blob.
func (r *replicaRepo) blob(content string) string {
	return rgit(r.t, r.dir, strings.NewReader(content), "hash-object", "-w", "--stdin")
}

// absent is the id of a blob that is not written.
func (r *replicaRepo) absent(content string) string {
	return rgit(r.t, r.dir, strings.NewReader(content), "hash-object", "--stdin")
}

// tree writes a tree of "MODE TYPE ID\tNAME" lines, in git's order,
// as given: whether the objects are there or not, and whatever their
// types (git mktree would check those).
func (r *replicaRepo) tree(lines ...string) string {
	var raw bytes.Buffer
	for _, line := range lines {
		meta, name, _ := strings.Cut(line, "\t")
		f := strings.Fields(meta)
		id, err := hex.DecodeString(f[2])
		if err != nil || len(f) != 3 {
			r.t.Fatalf("tree line %q", line)
		}
		mode := strings.TrimPrefix(f[0], "0")
		raw.WriteString(mode + " " + name + "\x00")
		raw.Write(id)
	}
	return rgit(r.t, r.dir, &raw, "hash-object", "-t", "tree", "-w", "--literally", "--stdin")
}

// commit writes a commit of tree with parents, which need not be there.
func (r *replicaRepo) commit(tree string, parents ...string) string {
	text := "tree " + tree + "\n"
	for _, p := range parents {
		text += "parent " + p + "\n"
	}
	r.n++
	text += fmt.Sprintf("author t <t@nuon.invalid> 1700000000 +0000\ncommitter t <t@nuon.invalid> %d +0000\n\nc\n", 1700000000+r.n)
	return rgit(r.t, r.dir, strings.NewReader(text), "hash-object", "-t", "commit", "-w", "--literally", "--stdin")
}

func hashOf(s string) plumbing.Hash { return plumbing.NewHash(s) }

// TestReplicaConnected: the check by difference finds every object a new
// tip reaches that the mirror lacks or holds as another type, in the tip,
// in commits between it and the old tip, in a merge's other side and in
// a history with no old tip; it reads nothing it need not.
func TestReplicaConnected(t *testing.T) {
	r := newReplicaRepo(t)
	a, b := r.blob("a"), r.blob("b")
	sub := r.tree("100644 blob " + b + "\tb.txt")
	base := r.commit(r.tree("100644 blob "+a+"\ta.txt", "040000 tree "+sub+"\tsub"))
	gone := r.absent("not here")
	goneTree := r.tree("100644 blob " + gone + "\tx") // written, names a blob that is not
	c1 := r.blob("c1")
	good := r.commit(r.tree("100644 blob "+a+"\ta.txt", "040000 tree "+r.tree("100644 blob "+c1+"\tb.txt")+"\tsub"), base)
	withGone := func(parents ...string) string {
		return r.commit(r.tree("100644 blob "+a+"\ta.txt", "040000 tree "+r.tree("100644 blob "+gone+"\tb.txt")+"\tsub"), parents...)
	}
	badInMiddle := withGone(base)
	goodOnTop := r.commit(r.tree("100644 blob "+a+"\ta.txt", "040000 tree "+sub+"\tsub"), badInMiddle)
	otherSide := withGone()
	merge := r.commit(r.tree("100644 blob "+a+"\ta.txt"), base, otherSide)
	for _, c := range []struct {
		name     string
		tip, old string
		complete []string
		want     string // in the error; "" for none
	}{
		{name: "a change of one file", tip: good, old: base},
		{name: "a change of one file, no old tip, main complete", tip: good, complete: []string{base}},
		{name: "the tip a complete commit already", tip: base, old: good, complete: []string{good}},
		{name: "moved back to an ancestor of main", tip: base, complete: []string{goodOnTop}, old: good},
		{name: "a blob missing in the tip", tip: withGone(base), old: base, want: gone},
		{name: "a blob missing in a commit between the tip and the old tip", tip: goodOnTop, old: base, want: gone},
		{name: "a blob missing on a merge's other side", tip: merge, old: base, want: gone},
		{name: "a blob missing in a history with no old tip", tip: withGone(), want: gone},
		{name: "a subtree missing", tip: r.commit(r.tree("040000 tree "+r.absent("tree")+"\tsub"), base), old: base, want: "not found"},
		{name: "a parent missing", tip: r.commit(r.tree("100644 blob "+a+"\ta.txt"), r.absent("parent")), old: base, want: "not found"},
		{name: "the tip missing", tip: r.absent("tip"), old: base, want: "not found"},
		{name: "a blob named as a tree", tip: r.commit(r.tree("040000 tree "+a+"\tsub"), base), old: base, want: "not a tree"},
		{name: "a tree named as a blob", tip: r.commit(r.tree("100644 blob "+sub+"\tsub"), base), old: base, want: "not a blob"},
		{name: "a tree as the tip", tip: sub, old: base, want: "not a commit"},
		{name: "a tree whose blob is missing, under a new name", tip: r.commit(r.tree("040000 tree "+goneTree+"\tnew"), base), old: base, want: gone},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := newObjectPool(r.dir, 1)
			defer src.close()
			tip := replicaTip{tip: hashOf(c.tip)}
			if c.old != "" {
				tip.old = hashOf(c.old)
			}
			var complete []plumbing.Hash
			for _, h := range c.complete {
				complete = append(complete, hashOf(h))
			}
			err := replicaConnected(src, []replicaTip{tip}, complete)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("want an error naming %q, got none", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("want an error naming %q, got %v", c.want, err)
			}
		})
	}
}

// TestReplicaConnectedByDifference: what the new tip shares with the old
// tip's tree is taken as held (the old tip is a ref of the mirror), so a
// change reads only the path that changed; past the limit the check
// says so (errReplicaWalk), and the caller asks git.
func TestReplicaConnectedByDifference(t *testing.T) {
	r := newReplicaRepo(t)
	var lines []string
	for i := range 500 {
		lines = append(lines, "100644 blob "+r.blob(fmt.Sprint("file ", i))+"\t"+fmt.Sprintf("f%03d", i))
	}
	old := r.commit(r.tree(lines...))
	lines[7] = "100644 blob " + r.blob("changed") + "\tf007"
	tip := r.commit(r.tree(lines...), old)
	src := &countingSource{objectSource: newObjectPool(r.dir, 1)}
	defer src.objectSource.(*objectPool).close()
	if err := replicaConnected(src, []replicaTip{{tip: hashOf(tip), old: hashOf(old)}}, nil); err != nil {
		t.Fatal(err)
	}
	// Two commits, two trees, one blob.
	if src.reads+src.infos > 5 {
		t.Errorf("a one-file change read %d objects and looked up %d: want the changed path alone", src.reads, src.infos)
	}
	// Without the old tip every blob is looked up: past a limit of 100,
	// errReplicaWalk.
	err := replicaConnectedWithin(src, []replicaTip{{tip: hashOf(tip)}}, []plumbing.Hash{hashOf(r.commit(r.tree()))}, 100)
	if !errors.Is(err, errReplicaWalk) {
		t.Fatalf("a check past its limit: %v, want errReplicaWalk", err)
	}
	if err := replicaConnectedWithin(src, []replicaTip{{tip: hashOf(tip)}}, nil, 1000); err != nil {
		t.Fatalf("a whole check within its limit: %v", err)
	}
}

// countingSource counts reads and lookups.
type countingSource struct {
	objectSource
	reads, infos int
}

func (c *countingSource) info(h plumbing.Hash) (plumbing.ObjectType, int64, error) {
	c.infos++
	return c.objectSource.info(h)
}

func (c *countingSource) read(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	c.reads++
	return c.objectSource.read(h, limit)
}
