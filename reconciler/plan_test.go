package reconciler

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

func comp(name string, deps ...string) *schemas.ComponentState {
	return &schemas.ComponentState{Name: name, Type: schemas.TypeTerraform, Version: "1.0.0", DependsOn: deps}
}

func TestNewPlan(t *testing.T) {
	applied := func(deps ...string) *Applied {
		return &Applied{Spec: comp("x", deps...), Status: schemas.ComponentStatus{Phase: schemas.PhaseApplied}}
	}
	tests := []struct {
		name    string
		desired []*schemas.ComponentState
		applied map[string]*Applied
		want    []string // component/action<after,...>
	}{
		{
			name:    "fresh install",
			desired: []*schemas.ComponentState{comp("a"), comp("b", "a"), comp("c", "b")},
			want:    []string{"a/apply<>", "b/apply<a>", "c/apply<b>"},
		},
		{
			name:    "removed components are deleted after the applies, dependents first",
			desired: []*schemas.ComponentState{comp("a")},
			applied: map[string]*Applied{"a": applied(), "db": applied(), "api": applied("db"), "gone": {Status: schemas.ComponentStatus{Phase: schemas.PhaseDeleted}}},
			want:    []string{"a/apply<>", "api/delete<a>", "db/delete<api,a>"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired := map[string]*schemas.ComponentState{}
			var order []string
			for _, c := range tt.desired {
				desired[c.Name] = c
				order = append(order, c.Name)
			}
			var got []string
			for _, s := range NewPlan(desired, order, tt.applied).Steps {
				got = append(got, s.Component+"/"+s.Action+"<"+strings.Join(s.After, ",")+">")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	cs := comp("api", "db")
	cs.Inputs = map[string]any{
		"endpoint": "${components.db.outputs.endpoint}",
		"url":      "https://${components.db.outputs.endpoint}/x",
		"port":     "${components.db.outputs.port}",
		"password": "${secrets.db_password}",
		"nested":   map[string]any{"list": []any{"${components.db.outputs.endpoint}", 3}},
	}
	outs := Outputs{"db": {"endpoint": "db.internal", "port": 5432}}
	got, err := Resolve(cs, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"endpoint": "db.internal",
		"url":      "https://db.internal/x",
		"port":     5432,
		"password": "${secrets.db_password}",
		"nested":   map[string]any{"list": []any{"db.internal", 3}},
	}
	if diff := cmp.Diff(want, got.Inputs); diff != "" {
		t.Errorf("inputs (-want +got):\n%s", diff)
	}
	if cs.Inputs["endpoint"] != "${components.db.outputs.endpoint}" {
		t.Error("Resolve changed its argument")
	}

	for _, tc := range []struct {
		name      string
		outs      Outputs
		sensitive map[string][]string
		want      string
	}{
		{"missing output", Outputs{"db": {"port": 1}}, nil, `component db did not output "endpoint"`},
		{"sensitive output", Outputs{"db": {"port": 1}}, map[string][]string{"db": {"endpoint"}}, "is a sensitive output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(cs, tc.outs, tc.sensitive)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	spec := comp("a")
	spec.Inputs = map[string]any{"x": "1"}
	other := comp("a")
	other.Inputs = map[string]any{"x": "2"}
	tests := []struct {
		name    string
		applied *Applied
		want    string
	}{
		{"never applied", nil, schemas.OpCreate},
		{"deleted", &Applied{Spec: spec, Status: schemas.ComponentStatus{Phase: schemas.PhaseDeleted}}, schemas.OpCreate},
		{"same spec", &Applied{Spec: spec, Status: schemas.ComponentStatus{Phase: schemas.PhaseApplied, Spec: SpecHash(spec)}}, ""},
		{"changed spec", &Applied{Spec: other, Status: schemas.ComponentStatus{Phase: schemas.PhaseApplied, Spec: SpecHash(other)}}, schemas.OpUpdate},
		{"failed last time", &Applied{Spec: spec, Status: schemas.ComponentStatus{Phase: schemas.PhaseFailed, Spec: SpecHash(spec)}}, schemas.OpUpdate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(spec, tt.applied); got != tt.want {
				t.Errorf("Decide = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSpecHashIsStable(t *testing.T) {
	a := comp("a")
	a.Inputs = map[string]any{"z": 1, "a": map[string]any{"y": "2", "b": true}}
	b := comp("a")
	b.Inputs = map[string]any{"a": map[string]any{"b": true, "y": "2"}, "z": 1}
	if SpecHash(a) != SpecHash(b) {
		t.Error("the same spec hashed differently")
	}
	b.Version = "1.0.1"
	if SpecHash(a) == SpecHash(b) {
		t.Error("different specs hashed the same")
	}
}
