package renderer

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/schemas"
)

// TestSourceTreeCap refuses a tree object over the cap from its size,
// with a problem naming the folder.
func TestSourceTreeCap(t *testing.T) {
	st := memory.NewStorage()
	put := func(typ plumbing.ObjectType, data string) plumbing.Hash {
		o := st.NewEncodedObject()
		o.SetType(typ)
		w, _ := o.Writer()
		_, _ = w.Write([]byte(data))
		_ = w.Close()
		h, err := st.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	entry := func(mode, name string, h plumbing.Hash) string { return mode + " " + name + "\x00" + string(h[:]) }
	app := put(plumbing.BlobObject, "name: shop\ncomponents: []\n")
	installs := put(plumbing.TreeObject, entry("100644", ".gitkeep", app)+entry("100644", "README.md", app)+entry("100644", "acme.yaml", app))
	root := put(plumbing.TreeObject, entry("40000", "installs", installs)+entry("100644", "nuon.yaml", app))
	o := st.NewEncodedObject()
	if err := (&object.Commit{Message: "m", TreeHash: root}).Encode(o); err != nil {
		t.Fatal(err)
	}
	commit, err := st.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := sourceFS(st, commit, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	fsys.maxTree = 100
	_, err = schemas.Load(fsys)
	want := "installs: cannot list: tree " + installs.String() + " is larger than the 100 bytes a folder of main may be"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("load: %v, want %s", err, want)
	}
}
