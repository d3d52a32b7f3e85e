package reconciler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/schemas"
)

// ErrPlanMismatch means a plan-bound apply found no saved plan with the
// approved hash, a file whose content has another hash, or a plan made
// over a state that has moved since: nothing is applied. Only a new plan
// and its approval help. Every plugin's plan-bound apply fails with it.
var ErrPlanMismatch = errors.New("no saved plan with the approved hash")

// HashBytes is the plan hash of a saved plan's bytes: "sha256:" and their
// hex SHA-256.
func HashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Canonical is v as JSON with every object's keys sorted (a struct's too)
// and numbers kept exact: the same plan always has the same bytes.
func Canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	return json.Marshal(g)
}

// BoundDiff cuts diff at schemas.MaxPlanDiff bytes, at a line's end, and
// says whether it did.
func BoundDiff(diff string) (string, bool) {
	diff = strings.TrimSpace(diff)
	if len(diff) <= schemas.MaxPlanDiff {
		return diff, false
	}
	cut := diff[:schemas.MaxPlanDiff]
	if i := strings.LastIndexByte(cut, '\n'); i > 0 {
		cut = cut[:i]
	}
	return strings.ToValidUTF8(cut, ""), true
}

// SavedPlanFile is the file of the saved plan with hash h in stateDir
// whose name ends with ext (".json" is its record).
func SavedPlanFile(stateDir, h, ext string) string {
	return filepath.Join(stateDir, PlansDir, strings.TrimPrefix(h, "sha256:")+ext)
}

// SavePlan keeps a plugin's saved plan in stateDir: data, whose hash is
// the plan hash, as HASH+ext; the policies' input as HASH.plan.json; the
// record as HASH.json. All owner only: a saved plan holds the values it
// applies, secrets included. Every other saved plan of the component is
// removed, so an approval of an older plan has nothing left to apply.
func SavePlan(stateDir, ext string, data, policyInput []byte, rec *schemas.PlanRecord, logger *slog.Logger) error {
	h := HashBytes(data)
	if rec.Hash != h {
		return fmt.Errorf("plan record names %s, the saved plan hashes to %s", rec.Hash, h)
	}
	if err := os.MkdirAll(filepath.Join(stateDir, PlansDir), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(SavedPlanFile(stateDir, h, ext), data, 0o600); err != nil {
		return err
	}
	if err := atomicfile.Write(SavedPlanFile(stateDir, h, PlanJSONExt), policyInput, 0o600); err != nil {
		return err
	}
	if err := atomicfile.WriteJSON(SavedPlanFile(stateDir, h, ".json"), SavedPlan{Record: *rec, Content: h}); err != nil {
		return err
	}
	PrunePlans(stateDir, h, logger)
	return nil
}

// LoadPlan reads the saved plan hash (HASH+ext) from stateDir and checks
// that its bytes still have that hash. Any failure is ErrPlanMismatch.
func LoadPlan(stateDir, hash, ext string) ([]byte, error) {
	if !schemas.ValidPlanHash(hash) {
		return nil, fmt.Errorf("%w: %q is not a plan hash", ErrPlanMismatch, hash)
	}
	data, err := os.ReadFile(SavedPlanFile(stateDir, hash, ext))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is not saved in this install", ErrPlanMismatch, hash)
	}
	if err != nil {
		return nil, err
	}
	if h := HashBytes(data); h != hash {
		return nil, fmt.Errorf("%w: the saved plan %s now hashes to %s", ErrPlanMismatch, hash, h)
	}
	return data, nil
}

// PrunePlans removes every saved plan in stateDir but keep's (all of them
// when keep is "").
func PrunePlans(stateDir, keep string, logger *slog.Logger) {
	dir := filepath.Join(stateDir, PlansDir)
	entries, _ := os.ReadDir(dir)
	stem := strings.TrimPrefix(keep, "sha256:")
	for _, e := range entries {
		if s, _, _ := strings.Cut(e.Name(), "."); keep != "" && s == stem {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && logger != nil {
			logger.Warn("prune saved plan", "file", e.Name(), "error", err)
		}
	}
}

// PlanBound is a plugin that plans into a saved plan (Record) and applies
// a saved plan by its hash (ApplySaved).
type PlanBound interface {
	Record(ctx context.Context, job *schemas.Job, env Env) (*schemas.JobResult, error)
	ApplySaved(ctx context.Context, job *schemas.Job, env Env) (*schemas.JobResult, error)
}

// ApplyPlanBound routes a plan-bound job (job.Plan) of plugin name by its
// mode: record to Record, apply to ApplySaved.
func ApplyPlanBound(ctx context.Context, p PlanBound, name string, job *schemas.Job, env Env) (*schemas.JobResult, error) {
	switch job.Plan.Mode {
	case schemas.PlanRecordMode:
		return p.Record(ctx, job, env)
	case schemas.PlanApplyMode:
		return p.ApplySaved(ctx, job, env)
	default:
		return nil, fmt.Errorf("%s %s: unknown plan mode %q", name, job.Component, job.Plan.Mode)
	}
}
