package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/kube"
	"nuon.dev/nuon/schemas"
)

// FuzzPlanDiffSecret checks that a Secret's values never reach the
// readable diff, whether the Secret is created, replaced or updated, in
// data or stringData, whatever the key.
func FuzzPlanDiffSecret(f *testing.F) {
	f.Add("password", "hunter2-hunter2")
	f.Add("a.b", "c2VjcmV0LXZhbHVl")
	f.Add("[0]", "\"quoted\" value")
	f.Fuzz(func(t *testing.T, key, value string) {
		if len(value) < 8 || strings.Contains(scaffold, value) || strings.Contains(key, value) {
			return
		}
		obj := func(v string) map[string]any {
			return map[string]any{
				"apiVersion": "v1", "kind": "Secret",
				"metadata":   map[string]any{"name": "creds", "namespace": "shop"},
				"data":       map[string]any{key: v},
				"stringData": map[string]any{key: v},
			}
		}
		diff := func(v string) string {
			before, after := obj("old-value-1234"), obj(v)
			return kube.ReadableDiff([]kube.Change{
				{ID: "Secret/shop/creds", Kind: schemas.ChangeCreate, Obj: after},
				{ID: "Secret/shop/creds", Kind: schemas.ChangeReplace, Obj: after, Why: "immutable"},
				{ID: "Secret/shop/creds", Kind: schemas.ChangeUpdate, Obj: after, Before: before, After: after, Fields: diffPaths(before, after)},
			})
		}
		// The key is shown, quoted and escaped as YAML writes it: a value
		// that its escaped form happens to hold (a NUL written \0 followed
		// by zeros) is in the diff whatever the value is. Only text that
		// comes and goes with the value is a leak.
		if strings.Contains(diff("\x01-placeholder-\x01"), value) {
			return
		}
		if d := diff(value); strings.Contains(d, value) {
			t.Fatalf("the diff shows the Secret's value %q:\n%s", value, d)
		}
	})
}

// scaffold is text every diff of the fuzzed Secret holds.
const scaffold = "+ create - replace ~ update -/+ Secret/shop/creds apiVersion: v1 kind: Secret metadata: name: creds namespace: shop data: stringData: (secret value) immutable old-value-1234"

// FuzzLoadSaved feeds arbitrary bytes as a saved plan: loadSaved takes
// them only under their own hash and as a saved set of this component
// over this inventory; anything else is ErrPlanMismatch, never a panic.
func FuzzLoadSaved(f *testing.F) {
	f.Add([]byte(`{"component":"api","objects":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"x"}}],"prune":[],"base":[]}`), false)
	f.Add([]byte(`{"component":"other","objects":[],"prune":[],"base":[]}`), false)
	f.Add([]byte(`{"component":"api","objects":[null,{}],"prune":[],"base":[]}`), false)
	f.Add([]byte(`{"component":"api","objects":[{"a":1e400}]}`), true)
	f.Fuzz(func(t *testing.T, data []byte, misname bool) {
		dir := t.TempDir()
		h := hashBytes(data)
		name := h
		if misname {
			name = hashBytes(append(data, '\n'))
		}
		if err := os.MkdirAll(filepath.Join(dir, reconciler.PlansDir), 0o700); err != nil {
			t.Fatal(err)
		}
		r := &run{dir: dir, inv: &Inventory{}, job: &schemas.Job{Component: "api", Plan: &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: h}}}
		if err := os.WriteFile(reconciler.SavedPlanFile(dir, name, savedExt), data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := r.loadSaved()
		if misname && err == nil {
			t.Fatal("a saved plan under another hash's name was loaded")
		}
		if err == nil {
			for _, d := range r.desired {
				if d.digest == "" || d.id.Name == "" || d.id.GroupKind.Kind == "" {
					t.Fatalf("an object without a digest, kind or name: %v", d.obj)
				}
			}
		}
	})
}
