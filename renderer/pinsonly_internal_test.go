package renderer

import (
	"bytes"
	"maps"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
	"gopkg.in/yaml.v3"
)

// FuzzPinChange: two channel files are a pin change only when, decoded,
// they are the same but for their components, and the components it
// names are exactly those whose value differs; a file compared with
// itself changes no pin.
func FuzzPinChange(f *testing.F) {
	f.Add([]byte("components:\n  db: 1.0.0\n"), []byte("components:\n  db: 1.1.0\n"))
	f.Add([]byte("components: {db: 1.0.0}\nrollout:\n  waves: []\n"), []byte("# c\ncomponents:\n  db: 1.0.0\nrollout: {waves: []}\n"))
	f.Add([]byte("components: {db: 1.0.0}\nrollout: {bake: 1h}\n"), []byte("components: {db: 1.1.0}\nrollout: {bake: 2h}\n"))
	f.Add([]byte("components: &c {db: 1.0.0}\nx: *c\n"), []byte("components: {db: 1.0.0}\nx: {db: 1.1.0}\n"))
	f.Add([]byte("components: {db: 1.0.0}\n---\ncomponents: {db: 2}\n"), []byte("components: {db: 1.0.0}\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		st := memory.NewStorage()
		put := func(data []byte) plumbing.Hash {
			o := st.NewEncodedObject()
			o.SetType(plumbing.BlobObject)
			w, _ := o.Writer()
			_, _ = w.Write(data)
			_ = w.Close()
			h, err := st.SetEncodedObject(o)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		r := &renderRun{st: st}
		ha, hb := put(a), put(b)
		changed, ok := r.pinChange(ha, hb)
		if self, selfOK := r.pinChange(ha, ha); selfOK && len(self) != 0 {
			t.Fatalf("a file compared with itself changes %v", self)
		}
		if !ok {
			return
		}
		var da, db map[string]any
		if yaml.Unmarshal(a, &da) != nil || yaml.Unmarshal(b, &db) != nil {
			t.Fatal("a pin change of files that do not decode")
		}
		ca, _ := da["components"].(map[string]any)
		cb, _ := db["components"].(map[string]any)
		for k := range maps.Keys(ca) {
			if _, has := cb[k]; !has && !changed[k] {
				t.Fatalf("component %s removed, not named", k)
			}
		}
		for k, v := range cb {
			w, has := ca[k]
			same := has && yamlEqual(t, v, w)
			if same == changed[k] {
				t.Fatalf("component %s: %v and %v, named changed %v", k, w, v, changed[k])
			}
		}
		delete(da, "components")
		delete(db, "components")
		if !yamlEqual(t, da, db) {
			t.Fatalf("%v and %v differ beyond their components", da, db)
		}
	})
}

func yamlEqual(t *testing.T, a, b any) bool {
	x, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}
