package terraform

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/schemas"
)

// TestDrift applies the database, checks that a drift check finds
// nothing and writes nothing, edits the file local_file manages by hand,
// checks that the drift is reported, and that an apply restores the file
// exactly.
func TestDrift(t *testing.T) {
	p := realPlugin(t, nil)
	stateDir, dataDir := t.TempDir(), t.TempDir()
	configFile := filepath.Join(dataDir, "app.json")
	job := func(op string) *schemas.Job {
		j := newJob("database", fixture("database"), map[string]any{"vpc_id": "vpc-1", "dir": dataDir})
		j.Operation = op
		return j
	}
	apply := func(t *testing.T) {
		t.Helper()
		env := newEnv(stateDir)
		defer allSteps.merge(env.steps)
		if _, err := p.Apply(t.Context(), job(schemas.OpUpdate), env.Env); err != nil {
			t.Fatalf("%v\n%s", err, env.log)
		}
	}
	drift := func(t *testing.T) []schemas.ResourceDrift {
		t.Helper()
		before, err := os.ReadFile(filepath.Join(stateDir, stateFile))
		if err != nil {
			t.Fatal(err)
		}
		env := newEnv(stateDir)
		defer allSteps.merge(env.steps)
		res, err := p.Drift(t.Context(), job(schemas.OpDrift), env.Env)
		if err != nil {
			t.Fatalf("%v\n%s", err, env.log)
		}
		after, _ := os.ReadFile(filepath.Join(stateDir, stateFile))
		if !bytes.Equal(before, after) {
			t.Error("a drift check changed the state")
		}
		for _, f := range []string{planFile, varFile} {
			if _, err := os.Stat(filepath.Join(stateDir, moduleDir, f)); err == nil {
				t.Errorf("%s left after a drift check", f)
			}
		}
		if plans := strings.Count(env.log.String(), "Terraform will perform the following actions") + strings.Count(env.log.String(), "No changes."); plans > 1 {
			t.Errorf("a drift check planned %d times", plans)
		}
		if res.Changed {
			t.Error("a drift check reports Changed")
		}
		return res.Drift
	}

	apply(t)
	want, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	if d := drift(t); len(d) != 0 {
		t.Errorf("drift right after an apply = %+v, want none", d)
	}

	if err := os.WriteFile(configFile, []byte(`{"edited":"by hand"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got := drift(t)
	wantDrift := []schemas.ResourceDrift{{Address: "local_file.config", Action: schemas.DriftMissing, Diff: "deleted or replaced outside terraform"}}
	if diff := cmp.Diff(wantDrift, got); diff != "" {
		t.Errorf("drift after a hand edit (-want +got):\n%s", diff)
	}
	if b, _ := os.ReadFile(configFile); string(b) != `{"edited":"by hand"}` {
		t.Errorf("a drift check touched the file: %s", b)
	}

	apply(t)
	if b, _ := os.ReadFile(configFile); !bytes.Equal(b, want) {
		t.Errorf("after the correcting apply the file holds %s, want %s", b, want)
	}
	if d := drift(t); len(d) != 0 {
		t.Errorf("drift after the correcting apply = %+v, want none", d)
	}

	// An input change is drift between the state and the job too: the
	// resource would be updated.
	j := job(schemas.OpDrift)
	j.Inputs["port"] = 6432
	env := newEnv(stateDir)
	res, err := p.Drift(t.Context(), j, env.Env)
	if err != nil {
		t.Fatalf("%v\n%s", err, env.log)
	}
	if len(res.Drift) != 1 || res.Drift[0].Address != "local_file.config" {
		t.Errorf("drift after an input change = %+v, want local_file.config", res.Drift)
	}
}

func TestHealth(t *testing.T) {
	tests := []struct {
		name    string
		healthy any
		want    *schemas.Health
	}{
		{"true", true, &schemas.Health{Status: schemas.HealthReady, Message: "output healthy is true"}},
		{"false", false, failedHealth("health check output healthy is false")},
		{"not a boolean", "yes", failedHealth("health check output healthy is not a boolean (a string)")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := realPlugin(t, nil)
			stateDir := t.TempDir()
			job := newJob("app", testModule("health"), map[string]any{"healthy": tt.healthy})
			job.Terraform = &schemas.TerraformSettings{Health: &schemas.TerraformHealth{Output: "healthy"}}
			env := newEnv(stateDir)
			defer allSteps.merge(env.steps)
			res, err := p.Apply(t.Context(), job, env.Env)
			if err != nil {
				t.Fatalf("%v\n%s", err, env.log)
			}
			if diff := cmp.Diff(tt.want, res.Health); diff != "" {
				t.Errorf("apply's health (-want +got):\n%s", diff)
			}
			h, err := p.Health(t.Context(), job, newEnv(stateDir).Env)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, h); diff != "" {
				t.Errorf("health job (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("missing output", func(t *testing.T) {
		got := healthOf("ok", nil)
		if diff := cmp.Diff(failedHealth(`health check output "ok" does not exist`), withAddress(got, "output.healthy")); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func failedHealth(msg string) *schemas.Health {
	return &schemas.Health{Status: schemas.HealthFailed, Message: msg,
		Resources: []schemas.ResourceHealth{{Address: "output.healthy", Status: schemas.HealthFailed, Message: msg}}}
}

func withAddress(h *schemas.Health, addr string) *schemas.Health {
	for i := range h.Resources {
		h.Resources[i].Address = addr
	}
	return h
}

// TestDebug answers state list and state show from the real state; the
// generated password, which the provider's schema marks sensitive, never
// shows.
func TestDebug(t *testing.T) {
	p := realPlugin(t, nil)
	stateDir, dataDir := t.TempDir(), t.TempDir()
	job := newJob("database", fixture("database"), map[string]any{"vpc_id": "vpc-1", "dir": dataDir})
	env := newEnv(stateDir)
	if _, err := p.Apply(t.Context(), job, env.Env); err != nil {
		t.Fatalf("%v\n%s", err, env.log)
	}
	var password string
	for _, r := range readStateResources(t, stateDir) {
		if r.Type == "random_password" {
			password, _ = r.Instances[0].Attributes["result"].(string)
		}
	}
	if len(password) < 16 {
		t.Fatalf("no password in the state: %q", password)
	}
	tests := []struct {
		words string
		want  []string
	}{
		{"state list", []string{"local_file.config\nrandom_password.admin\n"}},
		{"state show random_password.admin", []string{"# random_password.admin:", `resource "random_password" "admin" {`, `result = "(sensitive)"`, "length = 20"}},
		{"state show local_file.config", []string{"filename = " + `"` + filepath.Join(dataDir, "app.json") + `"`}},
		{"state show local_file.nothing", []string{"no resource local_file.nothing in the state"}},
	}
	for _, tt := range tests {
		t.Run(tt.words, func(t *testing.T) {
			cmd, err := debugcmd.Parse(schemas.TypeTerraform, strings.Fields(tt.words))
			if err != nil {
				t.Fatal(err)
			}
			j := *job
			j.Operation = schemas.OpDebug
			out := debugcmd.NewLimit(1 << 20)
			env := newEnv(stateDir)
			if err := p.Debug(t.Context(), &j, env.Env, cmd, out); err != nil {
				t.Fatalf("%v\n%s", err, env.log)
			}
			answer := out.Answer(cmd, nil).Output
			for _, w := range tt.want {
				if !strings.Contains(answer, w) {
					t.Errorf("answer lacks %q:\n%s", w, answer)
				}
			}
			if strings.Contains(answer, password) || strings.Contains(env.log.String(), password) {
				t.Errorf("the answer or the log holds the password:\n%s\n%s", answer, env.log)
			}
		})
	}
}

type stateResource struct {
	Type      string `json:"type"`
	Instances []struct {
		Attributes map[string]any `json:"attributes"`
	} `json:"instances"`
}

func readStateResources(t *testing.T, stateDir string) []stateResource {
	t.Helper()
	var out []stateResource
	for _, raw := range readState(t, stateDir).Resources {
		var r stateResource
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}
