package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/schemas"
)

// sandboxSeenFile keeps, in the workdir, the SHA-256 of the sandbox's
// outputs.json the agent last judged, so each change is acted on once.
const sandboxSeenFile = "sandbox-outputs.sha256"

// sandbox re-adopts the sandbox when its outputs changed under the agent:
// nuon install create ran again (a restarted machine, a recreated local
// sandbox on new ports) and wrote SandboxDir/outputs.json anew, while the
// status still holds the outputs the agent applied with. Then the
// components applied on the old outputs run against nothing, and a status
// that says Ready is false.
//
// outputs.json is read on every pass. When it changed since the agent last
// looked, and an output the status records for the applied sandbox has
// another value there, the sandbox and every component that depends on it
// (all of them, directly or not) become Pending: this pass re-applies the
// sandbox from the state create left in SandboxDir (adopting it, as after
// create), then the others with its new outputs, and the install is
// Degraded until they are applied again. Outputs the status does not
// record (sensitive ones) are not compared.
func (p *pass) sandbox(context.Context) (outcome, error) {
	a := p.agent
	if a.cfg.SandboxDir == "" {
		return proceed, nil
	}
	file := filepath.Join(a.cfg.SandboxDir, SandboxOutputsFile)
	data, err := os.ReadFile(file)
	if err != nil {
		return proceed, nil // nothing recorded by create: nothing to compare
	}
	sum := sha256.Sum256(data)
	seen := hex.EncodeToString(sum[:])
	seenFile := filepath.Join(a.cfg.Workdir, sandboxSeenFile)
	if prev, err := os.ReadFile(seenFile); err == nil && strings.TrimSpace(string(prev)) == seen {
		return proceed, nil
	}
	var outs map[string]any
	if err := json.Unmarshal(data, &outs); err != nil {
		p.log.Warn("sandbox outputs unreadable", "file", file, "error", err)
		return proceed, nil
	}
	st := &p.rec.Status
	if cs, ok := st.Components[schemas.SandboxComponent]; ok && cs.Phase == schemas.PhaseApplied {
		if changed := changedOutputs(cs.Outputs, outs); len(changed) > 0 {
			pending := append([]string{schemas.SandboxComponent}, p.dependents(schemas.SandboxComponent)...)
			for _, name := range pending {
				c := st.Components[name]
				if c.Phase != schemas.PhaseApplied {
					continue
				}
				c.Phase, c.Error = schemas.PhasePending, "the sandbox's outputs changed ("+strings.Join(changed, ", ")+" in "+SandboxOutputsFile+"): re-applying on the sandbox as it is now"
				st.Components[name] = c
			}
			st.Phase = schemas.InstallDegraded
			p.log.Warn("the sandbox's outputs changed under the agent; re-adopting the sandbox and re-applying what depends on it", "file", file, "outputs", changed, "components", pending)
			p.note("Sandbox outputs changed (%s in %s): re-adopting the sandbox and re-applying %s.", strings.Join(changed, ", "), SandboxOutputsFile, strings.Join(pending[1:], ", "))
		}
	}
	if err := atomicfile.Write(seenFile, []byte(seen+"\n"), 0o600); err != nil {
		p.log.Warn("record the sandbox outputs seen", "error", err)
	}
	return proceed, nil
}

// changedOutputs lists, sorted, the outputs recorded in applied whose
// value in now differs (an output absent from now counts as changed).
func changedOutputs(applied, now map[string]any) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(applied)) {
		if v, ok := now[k]; !ok || !equalJSON(normalJSON(applied[k]), normalJSON(v)) {
			out = append(out, k)
		}
	}
	return out
}

// normalJSON is v as json.Unmarshal into any gives it back, so a value
// recorded in the status and one read from a file compare alike.
func normalJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// dependents lists, sorted, the components whose applied specs depend on
// name, directly or through others.
func (p *pass) dependents(name string) []string {
	deps := map[string]bool{}
	for grew := true; grew; {
		grew = false
		for c, spec := range p.rec.Applied {
			if spec == nil || deps[c] || c == name {
				continue
			}
			for _, d := range spec.DependsOn {
				if d == name || deps[d] {
					deps[c], grew = true, true
					break
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(deps))
}
