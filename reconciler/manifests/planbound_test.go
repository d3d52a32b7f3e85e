package manifests

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/policy/plans"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

const pvcData = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`

const secretCreds = `apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  password: ${inputs.password}
`

// planFiles is a version of the test component's manifests.
func planFiles(theme string, extra ...string) map[string]string {
	files := map[string]string{
		"settings.yaml": strings.Replace(settingsV1, "theme: dark", "theme: "+theme, 1),
		"pvc.yaml":      pvcData,
		"secret.yaml":   secretCreds,
	}
	for i, e := range extra {
		files["extra"+string(rune('a'+i))+".yaml"] = e
	}
	return files
}

const planPassword = "pw-0f9a8e7d6c5b4a39"

// planHarness runs plan-bound jobs of one component against the shared
// API server and counts the writes each sends.
type planHarness struct {
	t        *testing.T
	p        *Plugin
	counts   *requests
	stateDir string
	ns       string
	inputs   map[string]any
	recreate bool
}

func (h *planHarness) job(ns string, files map[string]string, plan *schemas.JobPlan) *schemas.Job {
	job := newJob("store", ns, writeFiles(h.t, files), maps.Clone(h.inputs))
	job.Plan = plan
	job.Manifests.Recreate = h.recreate
	return job
}

func (h *planHarness) record(ns string, files map[string]string) *schemas.PlanRecord {
	h.t.Helper()
	env, log := testEnv(h.t, h.stateDir)
	res, err := h.p.Apply(h.t.Context(), h.job(ns, files, &schemas.JobPlan{Mode: schemas.PlanRecordMode}), env)
	if err != nil {
		h.t.Fatalf("record: %v\n%s", err, log)
	}
	if res.Plan == nil {
		h.t.Fatal("record: no plan in the result")
	}
	return res.Plan
}

// apply runs a plan-bound apply of hash with the manifests files (which
// it must not read) and returns its error and the writes it sent.
func (h *planHarness) apply(hash string, files map[string]string) (*schemas.JobResult, error, int) {
	h.t.Helper()
	h.counts.reset()
	env, _ := testEnv(h.t, h.stateDir)
	res, err := h.p.Apply(h.t.Context(), h.job(h.ns, files, &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: hash}), env)
	return res, err, writes(h.counts.reset())
}

// writes counts the requests that change something: every method but GET
// and dry-runs.
func writes(sent map[string]int) int {
	n := 0
	for k, v := range sent {
		if k != http.MethodGet && !strings.HasSuffix(k, "dry-run") {
			n += v
		}
	}
	return n
}

// TestPlanBinding is the mutation test of issue 21 for manifests: an
// approval for hash H applies exactly the saved object set H names; a plan
// that differs in any way (one field of one object, an extra object, an
// object removed, another namespace, another input), a saved set changed
// on disk, another plan's bytes under H's name, or a plan made over an
// inventory that moved since, applies nothing. An identical re-plan has
// the same hash and applies without a second approval, once.
func TestPlanBinding(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	otherNS := srv.Namespace(t)
	p, counts := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	h := &planHarness{t: t, p: p, counts: counts, stateDir: t.TempDir(), ns: ns,
		inputs: map[string]any{"domain": "acme.example", "password": planPassword}}
	theme := func() string {
		cm := get(t, dc, configMaps, ns, "settings")
		if cm == nil {
			return "(none)"
		}
		v, _, _ := unstructured.NestedString(cm.Object, "data", "theme")
		return v
	}

	// A first plan creates everything; it records nothing applied.
	counts.reset()
	h0 := h.record(ns, planFiles("dark"))
	if n := writes(counts.reset()); n != 0 {
		t.Fatalf("recording a plan sent %d writes", n)
	}
	if got := theme(); got != "(none)" {
		t.Fatalf("recording a plan created the objects")
	}
	if c := h0.Summary.Counts[schemas.ChangeCreate]; c != 4 {
		t.Fatalf("first plan: %d creates, want 4: %+v", c, h0.Summary)
	}
	if _, err, n := h.apply(h0.Hash, planFiles("dark")); err != nil || n == 0 {
		t.Fatalf("apply the first plan: %v (%d writes)", err, n)
	}
	if got := theme(); got != "dark" {
		t.Fatalf("theme = %q after the first plan, want dark", got)
	}

	// The change to approve: one field of one object.
	want := planFiles("light")
	approved := h.record(ns, want)
	if approved.Hash == h0.Hash {
		t.Fatal("a changed plan kept the old hash")
	}
	if diff := approved.Summary.Update; !slices.Equal(diff, []string{"ConfigMap/" + ns + "/settings"}) {
		t.Errorf("updates = %v, want the settings ConfigMap only", diff)
	}
	if !strings.Contains(approved.Diff, `data.theme: "dark" → "light"`) {
		t.Errorf("the diff lacks the changed field:\n%s", approved.Diff)
	}
	if again := h.record(ns, want); again.Hash != approved.Hash {
		t.Fatalf("an identical re-plan has hash %s, want %s", again.Hash, approved.Hash)
	}

	extraCM := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: more\ndata: {a: b}\n"
	noExtra := planFiles("light")
	noExtra["settings.yaml"] = strings.SplitN(noExtra["settings.yaml"], "---", 2)[0]
	noPVC := planFiles("light")
	delete(noPVC, "pvc.yaml")
	mutations := []struct {
		name   string
		mutate func(t *testing.T) // makes another plan, or spoils the saved one
	}{
		{"one field of one object", func(t *testing.T) { h.record(ns, planFiles("blue")) }},
		{"an extra object", func(t *testing.T) { h.record(ns, planFiles("light", extraCM)) }},
		{"an object removed", func(t *testing.T) { h.record(ns, noExtra) }},
		{"a PVC removed", func(t *testing.T) { h.record(ns, noPVC) }},
		{"another namespace", func(t *testing.T) { h.record(otherNS, want) }},
		{"another input", func(t *testing.T) {
			h.inputs["domain"] = "evil.example"
			defer func() { h.inputs["domain"] = "acme.example" }()
			h.record(ns, want)
		}},
		{"one byte of the saved set", func(t *testing.T) {
			if again := h.record(ns, want); again.Hash != approved.Hash {
				t.Fatalf("re-plan: %s, want %s", again.Hash, approved.Hash)
			}
			f := filepath.Join(h.stateDir, reconciler.PlansDir, strings.TrimPrefix(approved.Hash, "sha256:")+savedExt)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Replace(string(b), `"theme":"light"`, `"theme":"LIGHT"`, 1))
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"another plan's bytes under its name", func(t *testing.T) {
			other := h.record(ns, planFiles("blue"))
			dir := filepath.Join(h.stateDir, reconciler.PlansDir)
			b, err := os.ReadFile(filepath.Join(dir, strings.TrimPrefix(other.Hash, "sha256:")+savedExt))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, strings.TrimPrefix(approved.Hash, "sha256:")+savedExt), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"the inventory moved since the plan", func(t *testing.T) {
			h.record(ns, want)
			env, log := testEnv(t, h.stateDir)
			if _, err := p.Apply(t.Context(), h.job(ns, planFiles("dark", extraCM), nil), env); err != nil {
				t.Fatalf("%v\n%s", err, log)
			}
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			before := theme()
			m.mutate(t)
			_, err, n := h.apply(approved.Hash, want)
			if !errors.Is(err, ErrPlanMismatch) {
				t.Errorf("apply of the approved hash after %s = %v, want ErrPlanMismatch", m.name, err)
			}
			if n != 0 {
				t.Errorf("%d writes sent after %s, want 0", n, m.name)
			}
			if got := theme(); got != before {
				t.Errorf("theme moved from %q to %q", before, got)
			}
			if get(t, dc, configMaps, otherNS, "settings") != nil {
				t.Errorf("an object was created in the other namespace")
			}
		})
	}
	for _, bad := range []string{"", "sha256:" + strings.Repeat("0", 64), "../inventory", "sha256:../../x"} {
		if _, err, n := h.apply(bad, want); !errors.Is(err, ErrPlanMismatch) || n != 0 {
			t.Errorf("apply of %q = %v with %d writes, want ErrPlanMismatch and none", bad, err, n)
		}
	}

	// Back to the state the approved plan was made over (the inventory is
	// the first plan's again), then an identical re-plan: the approval of
	// H applies it, without a second one, and only once.
	env, log := testEnv(t, h.stateDir)
	if _, err := p.Apply(t.Context(), h.job(ns, planFiles("dark"), nil), env); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if again := h.record(ns, want); again.Hash != approved.Hash {
		t.Fatalf("an identical re-plan has hash %s, want %s", again.Hash, approved.Hash)
	}
	// The job's manifests are not read again: whatever it carries, the
	// saved set is what is applied.
	res, err, n := h.apply(approved.Hash, planFiles("ignored", extraCM))
	if err != nil || n == 0 {
		t.Fatalf("apply of the identical re-plan: %v (%d writes)", err, n)
	}
	if res.Plan == nil || res.Plan.Hash != approved.Hash {
		t.Errorf("result plan = %+v, want the applied record", res.Plan)
	}
	if got := theme(); got != "light" {
		t.Errorf("theme = %q, want light", got)
	}
	if get(t, dc, configMaps, ns, "more") != nil {
		t.Errorf("the apply read the job's manifests instead of the saved set")
	}
	if _, err, n := h.apply(approved.Hash, want); !errors.Is(err, ErrPlanMismatch) || n != 0 {
		t.Errorf("second apply of one plan = %v with %d writes, want ErrPlanMismatch and none", err, n)
	}
}

// TestPlanRecordManifests checks a record's summary, diff, redaction and
// the policy input: the fixture tenant's no-data-loss.rego denies a
// manifests plan that deletes a PersistentVolumeClaim, and a replace is
// recorded as one.
func TestPlanRecordManifests(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, _ := testPlugin(t, srv)
	h := &planHarness{t: t, p: p, counts: &requests{counts: map[string]int{}}, stateDir: t.TempDir(), ns: ns,
		inputs: map[string]any{"domain": "acme.example", "password": planPassword, "replicas": 1}}
	first := h.record(ns, planFiles("dark"))
	if _, err, _ := h.apply(first.Hash, nil); err != nil {
		t.Fatal(err)
	}
	env, log := testEnv(t, h.stateDir)
	if _, err := p.Apply(t.Context(), h.job(ns, planFiles("dark", web), nil), env); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}

	files := planFiles("dark", strings.ReplaceAll(web, "app: web", "app: web2"))
	delete(files, "pvc.yaml")
	h.inputs["password"] = planPassword + "-rotated"
	rec := h.record(ns, files)
	wantSum := schemas.PlanSummary{
		Update:  []string{"Secret/" + ns + "/creds"},
		Delete:  []string{"PersistentVolumeClaim/" + ns + "/data"},
		Replace: []string{"Deployment/" + ns + "/web"},
		Counts:  map[string]int{schemas.ChangeUpdate: 1, schemas.ChangeDelete: 1, schemas.ChangeReplace: 1},
	}
	got, _ := json.Marshal(rec.Summary)
	wantJSON, _ := json.Marshal(wantSum)
	if string(got) != string(wantJSON) {
		t.Errorf("summary = %s\nwant      %s\ndiff:\n%s", got, wantJSON, rec.Diff)
	}
	recJSON, _ := json.Marshal(rec)
	planJSON, err := os.ReadFile(filepath.Join(h.stateDir, reconciler.PlansDir, strings.TrimPrefix(rec.Hash, "sha256:")+reconciler.PlanJSONExt))
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{planPassword, base64.StdEncoding.EncodeToString([]byte(planPassword)), base64.StdEncoding.EncodeToString([]byte(planPassword + "-rotated"))} {
		if strings.Contains(string(recJSON), leak) || strings.Contains(string(planJSON), leak) {
			t.Errorf("the plan record or policy input holds the Secret's value %q:\n%s", leak, rec.Diff)
		}
	}
	if !strings.Contains(rec.Diff, "data.password: (secret value)") {
		t.Errorf("the diff does not show the Secret's changed key:\n%s", rec.Diff)
	}
	if !strings.Contains(rec.Diff, "-/+ replace Deployment/"+ns+"/web") || !strings.Contains(rec.Diff, "immutable") {
		t.Errorf("the diff does not explain the replace:\n%s", rec.Diff)
	}

	// The fixture policy, on the plan as the agent reads it.
	policies := map[string]string{}
	for _, name := range []string{"no-data-loss.rego", "no-public-bucket.rego"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "tenant", "policies", name))
		if err != nil {
			t.Fatal(err)
		}
		policies["policies/"+name] = string(b)
	}
	set, err := plans.Compile(policies)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := reconciler.SavedPlanJSON(h.stateDir, rec.Hash)
	if err != nil {
		t.Fatal(err)
	}
	j, err := set.Evaluate(t.Context(), map[string]any{"install": "acme", "component": "store", "type": schemas.TypeManifests, "plan": plan})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Deny) != 1 || !strings.Contains(j.Deny[0], "PersistentVolumeClaim/"+ns+"/data") {
		t.Errorf("deny = %q, want the PVC delete", j.Deny)
	}

	// Without the delete, nothing is denied.
	files["pvc.yaml"] = pvcData
	rec = h.record(ns, files)
	defer func() {
		// manifests.recreate is part of the approved plan: the same
		// objects with it have another hash, and its apply replaces the
		// Deployment whatever the applying job says.
		h.recreate = true
		withRecreate := h.record(ns, files)
		if withRecreate.Hash == rec.Hash {
			t.Fatal("manifests.recreate does not change the plan hash")
		}
		h.recreate = false
		uid := get(t, dyn(t, srv.Config()), deployments, ns, "web").GetUID()
		if _, err, _ := h.apply(withRecreate.Hash, nil); err != nil {
			t.Fatalf("apply the replace: %v", err)
		}
		if get(t, dyn(t, srv.Config()), deployments, ns, "web").GetUID() == uid {
			t.Error("the approved replace did not replace the Deployment")
		}
	}()
	if plan, err = reconciler.SavedPlanJSON(h.stateDir, rec.Hash); err != nil {
		t.Fatal(err)
	}
	if j, err = set.Evaluate(t.Context(), map[string]any{"install": "acme", "component": "store", "type": schemas.TypeManifests, "plan": plan}); err != nil || len(j.Deny) != 0 {
		t.Errorf("deny = %q, %v; want none", j.Deny, err)
	}
}
