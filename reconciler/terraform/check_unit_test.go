package terraform

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	tfjson "github.com/hashicorp/terraform-json"
)

func TestChangedFields(t *testing.T) {
	tests := []struct {
		name   string
		change tfjson.Change
		want   []string
	}{
		{"same", tfjson.Change{Before: map[string]any{"a": "1"}, After: map[string]any{"a": "1"}}, nil},
		{"changed and added", tfjson.Change{Before: map[string]any{"a": "1", "b": 2.0}, After: map[string]any{"a": "2", "b": 2.0, "c": true}}, []string{"a", "c"}},
		{"known after apply", tfjson.Change{Before: map[string]any{"id": "x", "new": nil}, After: map[string]any{}, AfterUnknown: map[string]any{"id": true, "new": true}}, []string{"id"}},
		{"created", tfjson.Change{After: map[string]any{"a": "1"}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, changedFields(&tt.change)); diff != "" {
				t.Errorf("changedFields (-want +got):\n%s", diff)
			}
		})
	}
	many := map[string]any{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		many[k] = k
	}
	got := changedFields(&tfjson.Change{After: many})
	if len(got) != maxDriftFields+1 || got[maxDriftFields] != "(2 more)" {
		t.Errorf("changedFields of 12 = %v, want %d and (2 more)", got, maxDriftFields)
	}
}

func TestMask(t *testing.T) {
	values := map[string]any{
		"id":     "x",
		"result": "hunter2",
		"nested": map[string]any{"token": "t0k", "name": "n"},
		"list":   []any{"a", "secret-b"},
		"whole":  map[string]any{"k": "v"},
	}
	sensitive := map[string]any{
		"result": true,
		"nested": map[string]any{"token": true},
		"list":   []any{false, true},
		"whole":  true,
	}
	want := map[string]any{
		"id":     "x",
		"result": Sensitive,
		"nested": map[string]any{"token": Sensitive, "name": "n"},
		"list":   []any{"a", Sensitive},
		"whole":  Sensitive,
	}
	if diff := cmp.Diff(want, mask(values, sensitive)); diff != "" {
		t.Errorf("mask (-want +got):\n%s", diff)
	}
}
