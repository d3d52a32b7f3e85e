package reconciler

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"nuon.dev/nuon/schemas"
)

// PlansDir is the folder, in a component's state directory, where a
// plugin keeps the saved plans of plan-bound jobs (schemas.JobPlan): per
// plan, HEX.tfplan (or the plugin's own form) and HEX.json, a SavedPlan.
const PlansDir = "plans"

// PlanJSONExt ends the name of a saved plan's JSON form (HEX.plan.json):
// what the agent's policies read. It holds variable values, secrets
// included, and never leaves the install.
const PlanJSONExt = ".plan.json"

// SavedPlanJSON reads the JSON form of the saved plan hash in stateDir.
func SavedPlanJSON(stateDir, hash string) (map[string]any, error) {
	if !schemas.ValidPlanHash(hash) {
		return nil, fmt.Errorf("%q is not a plan hash", hash)
	}
	b, err := os.ReadFile(filepath.Join(stateDir, PlansDir, strings.TrimPrefix(hash, "sha256:")+PlanJSONExt))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("saved plan %s: %w", hash, err)
	}
	return m, nil
}

// SavedPlan is the HEX.json a plugin writes beside a saved plan.
type SavedPlan struct {
	Record schemas.PlanRecord `json:"record"`
	// Content is the hash of the change the plan makes, without anything
	// that differs between two plans of the same change (the moment it was
	// made): a re-plan with the same Content keeps the saved plan.
	Content string `json:"content"`
}

// SavedPlanRecord reads the record of the saved plan hash in stateDir.
func SavedPlanRecord(stateDir, hash string) (*schemas.PlanRecord, error) {
	if !schemas.ValidPlanHash(hash) {
		return nil, fmt.Errorf("%q is not a plan hash", hash)
	}
	b, err := os.ReadFile(filepath.Join(stateDir, PlansDir, strings.TrimPrefix(hash, "sha256:")+".json"))
	if err != nil {
		return nil, err
	}
	var sp SavedPlan
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("saved plan %s: %w", hash, err)
	}
	if sp.Record.Hash != hash {
		return nil, fmt.Errorf("saved plan %s: its record names %s", hash, sp.Record.Hash)
	}
	return &sp.Record, nil
}

// SavedPlanRecords reads the records of every saved plan in stateDir.
func SavedPlanRecords(stateDir string) ([]schemas.PlanRecord, error) {
	files, err := filepath.Glob(filepath.Join(stateDir, PlansDir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []schemas.PlanRecord
	for _, f := range files {
		if strings.HasSuffix(f, PlanJSONExt) {
			continue
		}
		rec, err := SavedPlanRecord(stateDir, "sha256:"+strings.TrimSuffix(filepath.Base(f), ".json"))
		if err != nil {
			return nil, err
		}
		out = append(out, *rec)
	}
	return out, nil
}
