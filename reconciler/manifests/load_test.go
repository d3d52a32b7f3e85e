package manifests

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSubstitute(t *testing.T) {
	inputs, err := normalizeInputs(map[string]any{
		"domain":   "acme.example",
		"replicas": 3,
		"ratio":    0.5,
		"on":       true,
		"database": map[string]any{"endpoint": "db:5432"},
		"zones":    []string{"a", "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{
		"whole":            "${inputs.replicas}",
		"inside":           "https://${inputs.domain}/x?r=${inputs.replicas}&f=${inputs.ratio}&on=${inputs.on}",
		"nested":           "${inputs.database.endpoint}",
		"map":              "${inputs.database}",
		"list":             []any{"${inputs.zones}", "z=${inputs.zones}"},
		"escaped":          "$${inputs.domain} and $${inputs.nope}",
		"untouched":        "${HOME} ${secrets.x}",
		"${inputs.domain}": "keys stay",
	}
	if err := substitute(obj, inputs); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"whole":            int64(3),
		"inside":           "https://acme.example/x?r=3&f=0.5&on=true",
		"nested":           "db:5432",
		"map":              map[string]any{"endpoint": "db:5432"},
		"list":             []any{[]any{"a", "b"}, `z=["a","b"]`},
		"escaped":          "${inputs.domain} and ${inputs.nope}",
		"untouched":        "${HOME} ${secrets.x}",
		"${inputs.domain}": "keys stay",
	}
	if diff := cmp.Diff(want, obj); diff != "" {
		t.Errorf("substitute (-want +got):\n%s", diff)
	}

	err = substitute(map[string]any{"a": "${inputs.nope}", "b": "${inputs.domain.x}"}, inputs)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("substitute = %v, want ErrInvalid", err)
	}
	for _, w := range []string{"a: invalid manifests: unknown input nope", "b: invalid manifests: input domain.x: domain is not a map"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

func TestDecode(t *testing.T) {
	const in = `# a comment only
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data: {n: "1"}
---
---
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
  - {apiVersion: v1, kind: Secret, metadata: {name: c}}
`
	objs, err := decode("x.yaml", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if diff := cmp.Diff([]string{"ConfigMap/a", "ConfigMap/b", "Secret/c"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := decode("bad.yaml", strings.NewReader("a: [")); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "invalid manifests: bad.yaml: document 1: ") {
		t.Errorf("decode(bad) = %v", err)
	}
}

func TestDiffPaths(t *testing.T) {
	live := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"a": "1"}, "resourceVersion": "5"},
		"data":     map[string]any{"x": "1", "y": "2"},
		"spec":     map[string]any{"list": []any{"a", "b"}},
		"status":   map[string]any{"r": int64(1)},
	}
	merged := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"a": "2"}, "resourceVersion": "6"},
		"data":     map[string]any{"x": "1", "y": "3", "z": "4"},
		"spec":     map[string]any{"list": []any{"a", "c"}},
		"status":   map[string]any{"r": int64(2)},
	}
	want := []string{"data.y", "data.z", "metadata.labels.a", "spec.list[1]"}
	if diff := cmp.Diff(want, diffPaths(live, merged)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}]}`))
	f.Add([]byte("a: [\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		objs, err := decode("f.yaml", strings.NewReader(string(b)))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, o := range objs {
			if o.GetName() == "" {
				t.Fatalf("object without a name: %v", o.Object)
			}
			if _, err := digest(o); err != nil {
				t.Fatal(err)
			}
		}
	})
}
