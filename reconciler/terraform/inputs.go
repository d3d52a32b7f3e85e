package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"nuon.dev/nuon/reconciler"
)

// resolveInputs is the inputs step: it resolves the job's secret
// references.
func (r *run) resolveInputs(context.Context) error {
	vars, _, err := resolveInputs(r.job.Inputs, r.lookup)
	if err != nil {
		return err
	}
	r.vars = vars
	return nil
}

// resolveInputs returns a copy of inputs, normalised to what JSON holds
// (numbers kept exact as json.Number), with every ${secrets.NAME} resolved
// (see reconciler.ResolveSecrets), and the secret values it used.
func resolveInputs(inputs map[string]any, lookup func(string) (string, bool)) (map[string]any, []string, error) {
	var vars map[string]any
	if err := roundTrip(inputs, &vars); err != nil {
		return nil, nil, fmt.Errorf("inputs: %w", err)
	}
	return reconciler.ResolveSecrets(vars, lookup)
}

// writeVarFile writes vars as a terraform variables file, readable by its
// owner only: it holds secrets.
func writeVarFile(path string, vars map[string]any) error {
	if vars == nil {
		vars = map[string]any{}
	}
	b, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return fmt.Errorf("variables: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// roundTrip copies in into out through JSON, keeping numbers exact.
func roundTrip(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(out)
}
