package agent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/schemas"
)

// TestNoVendorKeyFailsClosed: an agent without a Syncer (no vendor key)
// and without InsecureSkipArtifactVerification applies nothing that has
// artifacts: every such component fails with ErrNoArtifactKey in the
// status, and no job runs.
func TestNoVendorKeyFailsClosed(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme", func(c *agent.Config) { c.InsecureSkipArtifactVerification = false })
	rep := a.reconcile(t)
	if got := runs(t, a.records); len(got) != 0 || len(rep.Jobs) != 0 {
		t.Fatalf("jobs ran without a vendor key: %v %+v", got, rep.Jobs)
	}
	if rep.Status.Phase != schemas.InstallDegraded {
		t.Errorf("phase %s, want %s", rep.Status.Phase, schemas.InstallDegraded)
	}
	for _, name := range []string{"a", "d"} {
		cs := rep.Status.Components[name]
		if cs.Phase != schemas.PhaseFailed || !strings.Contains(cs.Error, agent.ErrNoArtifactKey.Error()) || !strings.Contains(cs.Error, "module sha256:") {
			t.Errorf("%s: %s %q, want Failed for want of a vendor key, naming the artifact", name, cs.Phase, cs.Error)
		}
	}
	st := statusJSON(t, tn)
	if st.Artifacts != schemas.ArtifactsVerified {
		t.Errorf("status artifacts %q, want %q", st.Artifacts, schemas.ArtifactsVerified)
	}
}

// TestInsecureSkipArtifactVerification: told to, the agent deploys
// unverified artifacts, and its status says so; back with verification,
// it says so again without waiting for new desired state.
func TestInsecureSkipArtifactVerification(t *testing.T) {
	tn := newTenant(t)
	dir := t.TempDir()
	a := tn.agentIn("acme", dir)
	rep := a.reconcile(t)
	if rep.Status.Phase != schemas.InstallReady || len(runs(t, a.records)) == 0 {
		t.Fatalf("phase %s, jobs %v", rep.Status.Phase, runs(t, a.records))
	}
	if st := statusJSON(t, tn); st.Artifacts != schemas.ArtifactsUnverified {
		t.Errorf("status artifacts %q, want %q", st.Artifacts, schemas.ArtifactsUnverified)
	}

	a = tn.agentIn("acme", dir, func(c *agent.Config) { c.InsecureSkipArtifactVerification = false })
	rep = a.reconcile(t)
	if rep.Idle || !rep.Pushed {
		t.Fatalf("a change of verification wrote no status: %+v", rep)
	}
	if st := statusJSON(t, tn); st.Artifacts != schemas.ArtifactsVerified {
		t.Errorf("status artifacts %q, want %q", st.Artifacts, schemas.ArtifactsVerified)
	}
}

// statusJSON reads acme's status.json from the tenant repository and
// checks it against its schema.
func statusJSON(t *testing.T, tn *tenant) schemas.Status {
	t.Helper()
	data := tn.git("show", "refs/heads/nuon/status/acme:status.json")
	if err := schemas.ValidateJSON(schemas.SchemaStatus, []byte(data)); err != nil {
		t.Errorf("status.json does not match its schema: %v", err)
	}
	var st schemas.Status
	if err := json.Unmarshal([]byte(data), &st); err != nil {
		t.Fatal(err)
	}
	return st
}
