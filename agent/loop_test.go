package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// stopAfter lets component's job finish, then stops the agent as SIGTERM
// would, so the job stays journalled with its result on disk.
type stopAfter struct {
	jobs.Runner
	component string
	stop      context.CancelFunc
}

func (s stopAfter) Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error) {
	res, err := s.Runner.Run(ctx, job, dir)
	if job.Component == s.component {
		s.stop()
		return nil, context.Canceled
	}
	return res, err
}

// noFetch is a remote whose fetches fail.
type noFetch struct{ agent.Remote }

func (noFetch) Fetch(context.Context, storage, hash) error {
	return errors.New("fetch: connection reset")
}

// TestFailedFetchKeepsRecoveredOutcome: a step that fails does not throw
// away what earlier steps of the pass learned. A restarted agent recovers
// a finished job, then its fetch fails: the recovered outcome and manifest
// are still committed locally (and pushed by a later pass).
func TestFailedFetchKeepsRecoveredOutcome(t *testing.T) {
	tn := newTenant(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := tn.agentIn("acme", dir, func(c *agent.Config) {
		c.Runner = stopAfter{Runner: c.Runner, component: "d", stop: cancel}
	})
	_, _ = first.Reconcile(ctx)
	// d finished; whatever else ran in parallel was cancelled with it.
	pending, _ := filepath.Glob(filepath.Join(dir, "work", "pending", "d-g1-create-*.json"))
	if len(pending) != 1 {
		t.Fatalf("journal after the stop: %v, want d's job", pending)
	}
	job := strings.TrimSuffix(filepath.Base(pending[0]), ".json")

	second := tn.agentIn("acme", dir, func(c *agent.Config) { c.Remote = noFetch{c.Remote} })
	rep, err := second.Reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "connection reset") || rep.Outcome != agent.OutcomeFailed {
		t.Fatalf("reconcile with a failing fetch: outcome %s, %v", rep.Outcome, err)
	}
	if cs := rep.Status.Components["d"]; cs.Phase != schemas.PhaseApplied || cs.Job != job {
		t.Errorf("d after recovery: %+v, want applied by %s", cs, job)
	}
	local := filepath.Join(dir, "work", "repo.git")
	if _, err := gittest.Run(local, nil, "cat-file", "-e", "refs/heads/nuon/status/acme:jobs/"+job+".json"); err != nil {
		t.Errorf("the local status commit does not hold the recovered job's manifest: %v", err)
	}
	var st schemas.Status
	if err := json.Unmarshal([]byte(gittest.Git(t, local, "show", "refs/heads/nuon/status/acme:status.json")), &st); err != nil {
		t.Fatal(err)
	}
	if cs := st.Components["d"]; cs.Phase != schemas.PhaseApplied || cs.Job != job {
		t.Errorf("the local status commit has d %+v, want applied by %s", cs, job)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "work", "pending", "*.json")); len(left) != 0 {
		t.Errorf("journal entries left after the recovered outcome was committed: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "work", "jobs", job)); err != nil {
		t.Errorf("job directory: %v", err)
	}
}
