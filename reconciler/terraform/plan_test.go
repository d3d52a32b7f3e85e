package terraform

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// planFixture is a database component in its own state directory whose
// configuration file is written to dataDir: what "applied" means here.
type planFixture struct {
	p        *Plugin
	stateDir string
	dataDir  string
	env      testEnv
}

const testLicense = "lic-4f9a2c7e1b83d605"

func newPlanFixture(t *testing.T) *planFixture {
	t.Helper()
	f := &planFixture{
		p:        realPlugin(t, map[string]string{reconciler.SecretEnv("license-key"): testLicense}),
		stateDir: t.TempDir(),
		dataDir:  t.TempDir(),
	}
	f.env = newEnv(f.stateDir)
	return f
}

func (f *planFixture) job(port int, plan *schemas.JobPlan) *schemas.Job {
	j := newJob("database", fixture("database"), map[string]any{
		"vpc_id": "vpc-1", "dir": f.dataDir, "port": port, "license_key": "${secrets.license-key}",
	})
	j.Plan = plan
	return j
}

func (f *planFixture) record(t *testing.T, port int, keep string) *schemas.PlanRecord {
	t.Helper()
	res, err := f.p.Apply(context.Background(), f.job(port, &schemas.JobPlan{Mode: schemas.PlanRecordMode, Keep: keep}), f.env.Env)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, f.env.log)
	}
	if res.Plan == nil || !schemas.ValidPlanHash(res.Plan.Hash) {
		t.Fatalf("record: no plan record: %+v", res.Plan)
	}
	return res.Plan
}

func (f *planFixture) apply(port int, hash string) (*schemas.JobResult, error) {
	return f.p.Apply(context.Background(), f.job(port, &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: hash}), f.env.Env)
}

// applied is the configuration file's content, "" when none was written,
// and the state file's bytes: any apply changes one of them.
func (f *planFixture) applied(t *testing.T) string {
	t.Helper()
	cfg, _ := os.ReadFile(filepath.Join(f.dataDir, "app.json"))
	st, _ := os.ReadFile(filepath.Join(f.stateDir, stateFile))
	return string(cfg) + "\x00" + string(st)
}

// TestPlanRecord checks the record of a first plan: nothing is applied,
// the summary names every resource, the hash is the saved file's, and the
// secret input is redacted from the diff.
func TestPlanRecord(t *testing.T) {
	f := newPlanFixture(t)
	rec := f.record(t, 5432, "")
	if got := f.applied(t); got != "\x00" {
		t.Fatalf("recording a plan applied something: %q", got)
	}
	if rec.Component != "database" || rec.Size == 0 {
		t.Errorf("record: %+v", rec)
	}
	want := []string{"local_file.config", "random_password.admin"}
	if strings.Join(rec.Summary.Create, ",") != strings.Join(want, ",") || rec.Summary.Counts[schemas.ChangeCreate] != 2 || len(rec.Summary.Kinds()) != 1 {
		t.Errorf("summary: %+v, want create %v", rec.Summary, want)
	}
	h, _, err := HashFile(filepath.Join(f.stateDir, plansDir, strings.TrimPrefix(rec.Hash, "sha256:")+".tfplan"))
	if err != nil || h != rec.Hash {
		t.Errorf("saved plan hashes to %s (%v), record says %s", h, err, rec.Hash)
	}
	if !strings.Contains(rec.Diff, "local_file.config") || !strings.Contains(rec.Diff, "will be created") {
		t.Errorf("diff does not read as a plan:\n%s", rec.Diff)
	}
	// The job's log is redacted by the job process (package jobrun); the
	// record is redacted by the plugin too, since it outlives the job.
	if strings.Contains(rec.Diff, testLicense) || !strings.Contains(rec.Diff, "[redacted]") {
		t.Errorf("the secret input is not redacted from the record:\n%s", rec.Diff)
	}
	if needs, _ := (*schemas.ApprovalSettings)(nil).Needs(rec.Summary); needs {
		t.Errorf("a create needs approval by default")
	}
}

// TestPlanBinding is the mutation test: an approval for hash H applies
// only the saved plan H, unchanged. Every other plan — one made for other
// inputs, a byte changed in the saved file, another plan's bytes under
// H's name, a plan whose state moved on, a hash that was never saved —
// leads to no apply at all; an identical re-plan keeps H and applies.
func TestPlanBinding(t *testing.T) {
	mutations := []struct {
		name string
		// mutate changes the world after H was recorded and returns the
		// hash the apply names.
		mutate func(t *testing.T, f *planFixture, h string) string
		// stale: terraform itself refuses (state moved), not the plugin.
		stale bool
	}{
		{"re-planned for other inputs", func(t *testing.T, f *planFixture, h string) string {
			if rec := f.record(t, 6543, ""); rec.Hash == h {
				t.Fatal("a plan for another port has the same hash")
			}
			return h
		}, false},
		{"a byte of the saved plan flipped", func(t *testing.T, f *planFixture, h string) string {
			path := filepath.Join(f.stateDir, plansDir, strings.TrimPrefix(h, "sha256:")+".tfplan")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x01
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return h
		}, false},
		{"another plan's bytes under the approved name", func(t *testing.T, f *planFixture, h string) string {
			other := newPlanFixture(t)
			other.dataDir = f.dataDir
			rec := other.record(t, 7777, "")
			b, err := os.ReadFile(filepath.Join(other.stateDir, plansDir, strings.TrimPrefix(rec.Hash, "sha256:")+".tfplan"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(f.stateDir, plansDir, strings.TrimPrefix(h, "sha256:")+".tfplan"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			return h
		}, false},
		{"a hash never saved", func(t *testing.T, f *planFixture, h string) string {
			return "sha256:" + strings.Repeat("0", 64)
		}, false},
		{"not a hash", func(t *testing.T, f *planFixture, h string) string {
			return "../../" + strings.TrimPrefix(h, "sha256:")
		}, false},
		{"the saved plan removed", func(t *testing.T, f *planFixture, h string) string {
			if err := os.RemoveAll(filepath.Join(f.stateDir, plansDir)); err != nil {
				t.Fatal(err)
			}
			return h
		}, false},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			f := newPlanFixture(t)
			h := f.record(t, 5432, "").Hash
			name := m.mutate(t, f, h)
			before := f.applied(t)
			_, err := f.apply(5432, name)
			if err == nil {
				t.Fatalf("applied after %s", m.name)
			}
			if !m.stale && !errors.Is(err, ErrPlanMismatch) {
				t.Errorf("error %v, want ErrPlanMismatch", err)
			}
			if after := f.applied(t); after != before {
				t.Errorf("refused apply changed the install: %q → %q", before, after)
			}
		})
	}
	t.Run("state moved since the plan", func(t *testing.T) {
		f := newPlanFixture(t)
		// Two plans from the same empty state: apply the second, then the
		// first, which terraform must find stale.
		h1 := f.record(t, 5432, "").Hash
		b1, err := os.ReadFile(filepath.Join(f.stateDir, plansDir, strings.TrimPrefix(h1, "sha256:")+".tfplan"))
		if err != nil {
			t.Fatal(err)
		}
		h2 := f.record(t, 6543, "").Hash
		if _, err := f.apply(6543, h2); err != nil {
			t.Fatalf("apply the second plan: %v", err)
		}
		if err := os.MkdirAll(filepath.Join(f.stateDir, plansDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.stateDir, plansDir, strings.TrimPrefix(h1, "sha256:")+".tfplan"), b1, 0o600); err != nil {
			t.Fatal(err)
		}
		before := f.applied(t)
		_, err = f.apply(5432, h1)
		if err == nil || errors.Is(err, ErrPlanMismatch) || !strings.Contains(err.Error(), "stale") {
			t.Fatalf("a stale plan: error %v, want terraform's stale-plan refusal", err)
		}
		if after := f.applied(t); after != before {
			t.Errorf("stale plan changed the install")
		}
	})
	t.Run("identical re-plan keeps its approval", func(t *testing.T) {
		f := newPlanFixture(t)
		first := f.record(t, 5432, "").Hash
		// The plan file holds the moment it was made: without Keep, the
		// same change saves under a new hash.
		h := f.record(t, 5432, "").Hash
		if h == first {
			t.Fatalf("two plans of the same change share a file hash: the keep below proves nothing")
		}
		again := f.record(t, 5432, h)
		if again.Hash != h {
			t.Fatalf("identical re-plan has hash %s, want the kept %s", again.Hash, h)
		}
		res, err := f.apply(5432, h)
		if err != nil {
			t.Fatalf("apply of the kept plan: %v", err)
		}
		if !res.Changed || res.Plan == nil || res.Plan.Hash != h || res.Outputs["endpoint"] != "app.vpc-1.internal:5432" {
			t.Errorf("result: changed %v plan %+v outputs %v", res.Changed, res.Plan, res.Outputs)
		}
		if !strings.Contains(f.applied(t), testLicense) {
			t.Errorf("the applied configuration lacks the license key")
		}
		// Applied: the saved plan is gone, so the approval cannot apply twice.
		if _, err := f.apply(5432, h); !errors.Is(err, ErrPlanMismatch) {
			t.Errorf("second apply of the same approval: %v, want ErrPlanMismatch", err)
		}
	})
	t.Run("different re-plan drops the kept plan", func(t *testing.T) {
		f := newPlanFixture(t)
		h := f.record(t, 5432, "").Hash
		if rec := f.record(t, 6543, h); rec.Hash == h {
			t.Fatal("a different re-plan kept the old hash")
		}
		if _, err := f.apply(5432, h); !errors.Is(err, ErrPlanMismatch) {
			t.Errorf("apply of the replaced plan: %v, want ErrPlanMismatch", err)
		}
	})
	t.Run("no-op and delete", func(t *testing.T) {
		f := newPlanFixture(t)
		h := f.record(t, 5432, "").Hash
		if _, err := f.apply(5432, h); err != nil {
			t.Fatal(err)
		}
		if rec := f.record(t, 5432, ""); len(rec.Summary.Kinds()) != 0 {
			t.Errorf("re-plan of the applied state is not a no-op: %+v", rec.Summary)
		}
		rec := f.record(t, 6543, "")
		if strings.Join(rec.Summary.Replace, ",") != "local_file.config" {
			t.Errorf("changing the port: summary %+v, want local_file.config replaced", rec.Summary)
		}
		if needs, why := (*schemas.ApprovalSettings)(nil).Needs(rec.Summary); !needs || !strings.Contains(why, "replace") {
			t.Errorf("a replace does not need approval by default (%q)", why)
		}
	})
}
