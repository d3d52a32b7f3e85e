package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/cmd/internal/cli"
)

// craftEntry commits on main of the bare repository dir a tree whose
// installs/ also holds an entry named name (a folder holding x.yaml), as
// only a crafted tree object can.
func craftEntry(t *testing.T, dir, name string) {
	t.Helper()
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	put := func(typ plumbing.ObjectType, data []byte) plumbing.Hash {
		o := r.Storer.NewEncodedObject()
		o.SetType(typ)
		w, _ := o.Writer()
		_, _ = w.Write(data)
		_ = w.Close()
		h, err := r.Storer.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tree := func(es []object.TreeEntry) plumbing.Hash {
		var b bytes.Buffer
		for _, e := range es {
			fmt.Fprintf(&b, "%o %s\x00", uint32(e.Mode), e.Name)
			b.Write(e.Hash[:])
		}
		return put(plumbing.TreeObject, b.Bytes())
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := r.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	root, err := parent.Tree()
	if err != nil {
		t.Fatal(err)
	}
	sub := tree([]object.TreeEntry{{Name: "x.yaml", Mode: filemode.Regular, Hash: put(plumbing.BlobObject, []byte("channel: stable\n"))}})
	var es []object.TreeEntry
	for _, e := range root.Entries {
		if e.Name == "installs" {
			installs, err := r.TreeObject(e.Hash)
			if err != nil {
				t.Fatal(err)
			}
			e.Hash = tree(append(installs.Entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: sub}))
		}
		es = append(es, e)
	}
	c := &object.Commit{Author: parent.Author, Committer: parent.Committer, Message: "crafted\n", TreeHash: tree(es), ParentHashes: []plumbing.Hash{parent.Hash}}
	o := r.Storer.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Storer.SetReference(plumbing.NewHashReference(ref.Name(), h)); err != nil {
		t.Fatal(err)
	}
}

// TestRenderBadInput commits bad input on main after a render: render
// and render --dry-run exit 1 with the problem naming the file, and write
// nothing (no ref moves, no object is added).
func TestRenderBadInput(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(t *testing.T, rt *renderTenant)
		want  string
	}{
		{"upper-case extension", func(t *testing.T, rt *renderTenant) {
			rt.write(t, "installs/hooli.YAML", "channel: stable\n")
		}, "installs/hooli.YAML: only lower-case .yaml files are read; rename it to hooli.yaml"},
		{"app file as yml", func(t *testing.T, rt *renderTenant) {
			rt.write(t, "nuon.yml", "name: shop\n")
		}, "nuon.yml: is not read; the app is declared in nuon.yaml (lower case, .yaml)"},
		{"file over the cap", func(t *testing.T, rt *renderTenant) {
			rt.write(t, "releases/network.yaml", "# "+strings.Repeat("x", 2<<20)+"\n"+rt.read(t, "releases/network.yaml"))
		}, "releases/network.yaml: is 2.0 MiB"},
		{"crafted dot-dot", func(t *testing.T, rt *renderTenant) {
			craftEntry(t, rt.dir, "..")
		}, `installs/..: an entry named ".."; a git tree made by git has none`},
		{"crafted escape", func(t *testing.T, rt *renderTenant) {
			craftEntry(t, rt.dir, "\x1b]0;owned\x07")
		}, `installs/"\x1b]0;owned\a": a name with a control or invisible character in it`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := localRenderTenant(t)
			rt.mustRun(t, nil)
			tc.spoil(t, rt)
			refs, objects := gitRefs(t, rt.dir), objectCount(t, rt.dir)
			for _, dryRun := range []bool{false, true} {
				r := rt.run(t, func(o *renderOptions) { o.dryRun = dryRun })
				var ee cli.ExitError
				if !errors.As(r.err, &ee) || ee.Code != 1 {
					t.Fatalf("nuon render (dry run %t): %v, want exit code 1", dryRun, r.err)
				}
				if !strings.HasPrefix(r.stderr, tc.want) || !strings.Contains(r.stderr, "no ref moved") {
					t.Errorf("nuon render (dry run %t) stderr:\n%s\nwant it to start with %s", dryRun, r.stderr, tc.want)
				}
				if diff := cmp.Diff(refs, gitRefs(t, rt.dir)); diff != "" {
					t.Errorf("refs moved (-before +after):\n%s", diff)
				}
				if got := objectCount(t, rt.dir); got != objects {
					t.Errorf("objects written: %s, were %s", got, objects)
				}
			}
		})
	}
}

// TestRenderMaxFileSize raises the cap for a release record that
// outgrew it.
func TestRenderMaxFileSize(t *testing.T) {
	rt := localRenderTenant(t)
	rt.write(t, "releases/network.yaml", "# "+strings.Repeat("x", 2<<20)+"\n"+rt.read(t, "releases/network.yaml"))
	if r := rt.run(t, nil); r.err == nil {
		t.Fatal("a 2 MiB release record rendered under the default cap")
	}
	rt.mustRun(t, func(o *renderOptions) { o.maxFileSize = 4 << 20 })
}

// write replaces a source file and commits.
func (rt *renderTenant) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(rt.src, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	rt.commit(t, "write "+name)
}

func (rt *renderTenant) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rt.src, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
