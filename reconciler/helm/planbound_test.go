package helm

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// hookTemplate is a pre-install/pre-upgrade hook: Helm creates it on
// every install and upgrade of the release.
const hookTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
data:
  STEP: "migrate"
  DOMAIN: {{ .Values.domain | quote }}
`

// hookChart is a copy of the test chart with a hook; edit changes files
// of it (path → content) before it is returned.
func hookChart(t *testing.T, edit map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "web")
	if err := os.CopyFS(dir, os.DirFS(webChart)); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"templates/migrate.yaml": hookTemplate}
	for k, v := range edit {
		files[k] = v
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// helmPlans runs plan-bound jobs of the api release in one namespace.
type helmPlans struct {
	t        *testing.T
	srv      *kubetest.Server
	ns       string
	p        *Plugin
	stateDir string
	chart    string
}

func newHelmPlans(t *testing.T) *helmPlans {
	srv := kubetest.Shared(t)
	return &helmPlans{t: t, srv: srv, ns: srv.Namespace(t), p: testPlugin(srv), stateDir: t.TempDir(), chart: hookChart(t, nil)}
}

// job is a job of the release with the hook chart and inputs for domain.
func (h *helmPlans) job(domain string, plan *schemas.JobPlan) *schemas.Job {
	j := newJob(h.ns, apiInputs(domain, 1))
	j.Artifacts[0].Local = h.chart
	j.Plan = plan
	return j
}

func (h *helmPlans) env(log *syncBuilder) reconciler.Env {
	return reconciler.Env{StateDir: h.stateDir, Artifacts: dirSource{}, Log: log}
}

// record plans job and returns its record.
func (h *helmPlans) record(job *schemas.Job) *schemas.PlanRecord {
	h.t.Helper()
	job.Plan = &schemas.JobPlan{Mode: schemas.PlanRecordMode}
	log := &syncBuilder{}
	res, err := h.p.Apply(h.t.Context(), job, h.env(log))
	if err != nil {
		h.t.Fatalf("record: %v\nlog:\n%s", err, log)
	}
	if res.Plan == nil || !schemas.ValidPlanHash(res.Plan.Hash) {
		h.t.Fatalf("record: no plan in %+v", res)
	}
	return res.Plan
}

// apply applies the saved plan hash with job.
func (h *helmPlans) apply(job *schemas.Job, hash string) (*schemas.JobResult, error) {
	job.Plan = &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: hash}
	return h.p.Apply(h.t.Context(), job, h.env(&syncBuilder{}))
}

// revisions is the release's revision count and what its ConfigMap says.
func (h *helmPlans) revisions() (int, string) {
	h.t.Helper()
	hist := history(h.t, h.srv, h.ns, "api")
	if len(hist) == 0 {
		return 0, ""
	}
	return len(hist), configData(h.t, h.srv.Clientset(h.t), h.ns, "DOMAIN")
}

// TestPlanBindingHelm is the mutation test of helm plan records: an
// approval for hash H applies nothing when the plan differs in any way,
// and an identical re-plan applies under H without a second approval.
func TestPlanBindingHelm(t *testing.T) {
	h := newHelmPlans(t)

	// The first install, planned and applied by its hash.
	first := h.record(h.job("a.example", nil))
	if n, _ := h.revisions(); n != 0 {
		t.Fatalf("recording an install wrote %d revisions", n)
	}
	if c := first.Summary.Counts; c[schemas.ChangeCreate] != 4 || c[schemas.ChangeUpdate] != 0 {
		t.Fatalf("install plan counts = %v, want 4 creates (3 objects and the hook)\n%s", c, first.Diff)
	}
	if _, err := h.apply(h.job("a.example", nil), first.Hash); err != nil {
		t.Fatal(err)
	}
	if n, domain := h.revisions(); n != 1 || domain != "a.example" {
		t.Fatalf("after the first apply: %d revisions, DOMAIN %q", n, domain)
	}

	// The change to approve: its hash H, the same on an identical re-plan.
	rec := h.record(h.job("b.example", nil))
	H := rec.Hash
	if again := h.record(h.job("b.example", nil)); again.Hash != H {
		t.Fatalf("an identical re-plan has hash %s, want %s", again.Hash, H)
	}
	if c := rec.Summary.Counts; c[schemas.ChangeUpdate] != 2 || c[schemas.ChangeCreate] != 0 || c[schemas.ChangeDelete] != 0 {
		t.Errorf("counts = %v, want 2 updates (the ConfigMap and the hook)\n%s", c, rec.Diff)
	}
	for _, want := range []string{"~ update ConfigMap/" + h.ns + "/api-config", "data.DOMAIN: \"a.example\" → \"b.example\"", "hook ConfigMap/" + h.ns + "/api-migrate"} {
		if !strings.Contains(rec.Diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, rec.Diff)
		}
	}
	if strings.Contains(rec.Diff, dbPassword) || strings.Contains(rec.Diff, "s3cr3t") {
		t.Errorf("the diff shows the secret:\n%s", rec.Diff)
	}
	saved := reconciler.SavedPlanFile(h.stateDir, H, savedExt)
	if fi, err := os.Stat(saved); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved plan: %v %v", fi, err)
	}

	otherChart := func(edit map[string]string) func(j *schemas.Job) {
		return func(j *schemas.Job) { j.Artifacts[0].Local = hookChart(t, edit) }
	}
	mutations := []struct {
		name string
		// before runs after H is saved again, before the apply.
		before func(t *testing.T)
		// job is the applying job; nil is H's own.
		job  func(j *schemas.Job)
		hash string
	}{
		{name: "re-planned with other values", before: func(t *testing.T) {
			if r := h.record(h.job("c.example", nil)); r.Hash == H {
				t.Fatal("a plan of other values has H")
			}
		}},
		{name: "re-planned from another chart digest", before: func(t *testing.T) {
			j := h.job("b.example", nil)
			j.Artifacts[0].Digest = "sha256:web-1.0.1"
			if r := h.record(j); r.Hash == H {
				t.Fatal("a plan of another chart has H")
			}
		}},
		{name: "re-planned with a template changed", before: func(t *testing.T) {
			j := h.job("b.example", nil)
			otherChart(map[string]string{"templates/configmap.yaml": strings.Replace(readFile(t, filepath.Join(webChart, "templates", "configmap.yaml")), "data:", "data:\n  EXTRA: \"1\"", 1)})(j)
			if r := h.record(j); r.Hash == H {
				t.Fatal("a plan of another manifest has H")
			}
		}},
		{name: "applying job has other values", job: func(j *schemas.Job) { j.Inputs = apiInputs("c.example", 1) }},
		{name: "applying job has one value more", job: func(j *schemas.Job) { j.Inputs["extra"] = true }},
		{name: "applying job has another chart digest", job: func(j *schemas.Job) { j.Artifacts[0].Digest = "sha256:web-1.0.1" }},
		{name: "chart renders another hook under the same digest", job: otherChart(map[string]string{"templates/migrate.yaml": strings.Replace(hookTemplate, `"migrate"`, `"drop-tables"`, 1)})},
		{name: "one byte of the saved plan changed", before: func(t *testing.T) {
			b := []byte(readFile(t, saved))
			i := strings.Index(string(b), "b.example")
			b[i] = 'x'
			if err := os.WriteFile(saved, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another plan's bytes under H's name", before: func(t *testing.T) {
			other := h.record(h.job("c.example", nil))
			b := readFile(t, reconciler.SavedPlanFile(h.stateDir, other.Hash, savedExt))
			if err := os.WriteFile(saved, []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "the saved plan removed", before: func(t *testing.T) { os.Remove(saved) }},
		{name: "a hash never saved", hash: "sha256:" + strings.Repeat("0", 64)},
		{name: "a path for a hash", hash: "../../etc/passwd"},
		{name: "empty hash", hash: "-"},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			if r := h.record(h.job("b.example", nil)); r.Hash != H {
				t.Fatalf("re-planning the approved change gave %s, want %s", r.Hash, H)
			}
			if m.before != nil {
				m.before(t)
			}
			j := h.job("b.example", nil)
			if m.job != nil {
				m.job(j)
			}
			hash := H
			switch m.hash {
			case "":
			case "-":
				hash = ""
			default:
				hash = m.hash
			}
			n0, d0 := h.revisions()
			_, err := h.apply(j, hash)
			if !errors.Is(err, ErrPlanMismatch) {
				t.Fatalf("apply of H = %v, want ErrPlanMismatch", err)
			}
			t.Logf("refused: %v", err)
			if n, d := h.revisions(); n != n0 || d != d0 {
				t.Fatalf("a refused apply changed the release: %d revisions (was %d), DOMAIN %q (was %q)", n, n0, d, d0)
			}
		})
	}

	// An identical re-plan keeps H and applies it without a new approval.
	// The applying job's chart renders another ConfigMap under the same
	// digest (its hooks are the same): what is applied is the saved
	// manifest, not the chart's.
	if r := h.record(h.job("b.example", nil)); r.Hash != H {
		t.Fatalf("identical re-plan: %s, want %s", r.Hash, H)
	}
	j := h.job("b.example", nil)
	otherChart(map[string]string{"templates/configmap.yaml": strings.Replace(readFile(t, filepath.Join(webChart, "templates", "configmap.yaml")), "data:", "data:\n  EXTRA: \"unapproved\"", 1)})(j)
	res, err := h.apply(j, H)
	if err != nil {
		t.Fatalf("apply of the identical re-plan: %v", err)
	}
	if res.Plan == nil || res.Plan.Hash != H || !res.Changed {
		t.Errorf("result = %+v", res)
	}
	if n, d := h.revisions(); n != 2 || d != "b.example" {
		t.Fatalf("after the approved apply: %d revisions, DOMAIN %q", n, d)
	}
	if extra := configData(t, h.srv.Clientset(t), h.ns, "EXTRA"); extra != "" {
		t.Errorf("the chart's unapproved EXTRA = %q was applied", extra)
	}
	// One approval, one apply.
	if _, err := h.apply(h.job("b.example", nil), H); !errors.Is(err, ErrPlanMismatch) {
		t.Errorf("second apply of H = %v, want ErrPlanMismatch", err)
	}

	// A plan over revisions that moved since is stale.
	stale := h.record(h.job("d.example", nil))
	if _, err := h.p.Apply(t.Context(), h.job("e.example", nil), h.env(&syncBuilder{})); err != nil {
		t.Fatal(err)
	}
	n0, d0 := h.revisions()
	if _, err := h.apply(h.job("d.example", nil), stale.Hash); !errors.Is(err, ErrPlanMismatch) || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("apply of a stale plan = %v, want ErrPlanMismatch (stale)", err)
	}
	if n, d := h.revisions(); n != n0 || d != d0 || d != "e.example" {
		t.Fatalf("a stale apply changed the release: %d revisions, DOMAIN %q", n, d)
	}
}

// TestPlanRecordHelmNoop checks that a re-plan of what is deployed is a
// no-op and that a removed object is a delete.
func TestPlanRecordHelmNoop(t *testing.T) {
	h := newHelmPlans(t)
	first := h.record(h.job("a.example", nil))
	if _, err := h.apply(h.job("a.example", nil), first.Hash); err != nil {
		t.Fatal(err)
	}
	if r := h.record(h.job("a.example", nil)); len(r.Summary.Counts) != 0 {
		t.Errorf("re-plan of the deployed release: counts %v, want none\n%s", r.Summary.Counts, r.Diff)
	}
	// Drift in the cluster makes the plan that sets it back an update,
	// never a no-op that would pass unseen.
	cs := h.srv.Clientset(t)
	cm, err := cs.CoreV1().ConfigMaps(h.ns).Get(t.Context(), "api-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["DOMAIN"] = "hand-edited.example"
	if _, err := cs.CoreV1().ConfigMaps(h.ns).Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	r := h.record(h.job("a.example", nil))
	if c := r.Summary.Counts; c[schemas.ChangeUpdate] != 1 || !strings.Contains(r.Diff, "data.DOMAIN: (drifted in the cluster) → \"a.example\"") {
		t.Fatalf("plan over drift: counts %v\n%s", c, r.Diff)
	}
	if _, err := h.apply(h.job("a.example", nil), r.Hash); err != nil {
		t.Fatal(err)
	}
	if got := configData(t, cs, h.ns, "DOMAIN"); got != "a.example" {
		t.Fatalf("DOMAIN after the approved correction = %q", got)
	}

	h.chart = hookChart(t, nil)
	if err := os.Remove(filepath.Join(h.chart, "templates", "secret.yaml")); err != nil {
		t.Fatal(err)
	}
	r = h.record(h.job("a.example", nil))
	if c := r.Summary.Counts; c[schemas.ChangeDelete] != 1 || len(r.Summary.Delete) != 1 || r.Summary.Delete[0] != "Secret/"+h.ns+"/api-database" {
		t.Errorf("summary = %+v, want the Secret deleted\n%s", r.Summary, r.Diff)
	}
	in, err := reconciler.SavedPlanJSON(h.stateDir, r.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if in["format"] != "nuon-helm" || !strings.Contains(toJSON(t, in), `"type":"kubernetes_secret"`) {
		t.Errorf("policy input = %v", in)
	}
	if strings.Contains(toJSON(t, in), dbPassword) {
		t.Error("the policy input holds the secret")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
