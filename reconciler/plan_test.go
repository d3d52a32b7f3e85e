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

func TestResolveSandbox(t *testing.T) {
	outs := Outputs{schemas.SandboxComponent: {
		"registry": map[string]any{"url": "127.0.0.1:5000", "repository_prefix": "nuon/acme"},
		"dns":      map[string]any{"domain": "acme.example.com"},
	}}
	cs := comp("api", schemas.SandboxComponent)
	cs.Inputs = map[string]any{
		"image": "${install.sandbox.outputs.registry.url}/${install.sandbox.outputs.registry.repository_prefix}/api",
		"dns":   "${install.sandbox.outputs.dns}",
	}
	cs.Artifacts = []schemas.Artifact{{Name: "chart", Local: "${install.sandbox.outputs.registry.url}/${install.sandbox.outputs.registry.repository_prefix}/shop/api@sha256:00", Digest: "sha256:00"}}
	got, err := Resolve(cs, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"image": "127.0.0.1:5000/nuon/acme/api", "dns": map[string]any{"domain": "acme.example.com"}}
	if d := cmp.Diff(want, got.Inputs); d != "" {
		t.Errorf("inputs (-want +got):\n%s", d)
	}
	if got.Artifacts[0].Local != "127.0.0.1:5000/nuon/acme/shop/api@sha256:00" || cs.Artifacts[0].Local == got.Artifacts[0].Local {
		t.Errorf("artifact %s (the desired spec's: %s)", got.Artifacts[0].Local, cs.Artifacts[0].Local)
	}

	for _, tc := range []struct {
		name  string
		outs  Outputs
		input string
		want  string
	}{
		{"no sandbox outputs yet", Outputs{}, "${install.sandbox.outputs.registry.url}", "input x: ${install.sandbox.outputs.registry.url} has no value: the sandbox has recorded no outputs yet"},
		{"a key the sandbox did not output", outs, "${install.sandbox.outputs.registry.region}", "input x: ${install.sandbox.outputs.registry.region} has no value: the sandbox did not output it"},
		{"an output that is not an object", Outputs{schemas.SandboxComponent: {"registry": "x"}}, "${install.sandbox.outputs.registry.url}", "input x: ${install.sandbox.outputs.registry.url} has no value: the sandbox did not output it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := comp("api")
			cs.Inputs = map[string]any{"x": tc.input}
			if _, err := Resolve(cs, tc.outs, nil); err == nil || err.Error() != tc.want {
				t.Errorf("Resolve: %v, want %s", err, tc.want)
			}
		})
	}
	cs = comp("api")
	cs.Artifacts = []schemas.Artifact{{Name: "chart", Local: "${install.sandbox.outputs.registry}/x@sha256:00"}}
	if _, err := Resolve(cs, outs, nil); err == nil || !strings.Contains(err.Error(), "artifact chart") {
		t.Errorf("an artifact reference resolving to an object: %v", err)
	}
}
