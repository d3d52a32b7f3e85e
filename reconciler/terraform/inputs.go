package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// SecretEnvPrefix starts the names of the environment variables that hold
// secrets inside a job.
const SecretEnvPrefix = "NUON_SECRET_"

// ErrSecretMissing reports an input that references a secret the job's
// environment does not hold. Retrying does not help: the install lacks the
// secret.
var ErrSecretMissing = errors.New("secret missing")

// secretRef matches ${secrets.NAME}, the one reference left in a job's
// inputs when the job starts.
var secretRef = regexp.MustCompile(`\$\{secrets\.([A-Za-z0-9_-]+)\}`)

// SecretEnv is the environment variable that holds secret name:
// ${secrets.db-password} comes from NUON_SECRET_DB_PASSWORD.
func SecretEnv(name string) string {
	return SecretEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// resolveInputs is the inputs step: it resolves the job's secret
// references and tells the redactor their values.
func (r *run) resolveInputs(context.Context) error {
	vars, secrets, err := resolveInputs(r.job.Inputs, r.lookup)
	if err != nil {
		return err
	}
	r.vars = vars
	r.out.secrets(secrets)
	return nil
}

// resolveInputs returns a copy of inputs, normalised to what JSON holds,
// with every ${secrets.NAME} in a string replaced by the secret's value, and
// the values it used. A reference is replaced once: a secret's value is
// never read as a reference.
func resolveInputs(inputs map[string]any, lookup func(string) (string, bool)) (map[string]any, []string, error) {
	var vars map[string]any
	if err := roundTrip(inputs, &vars); err != nil {
		return nil, nil, fmt.Errorf("inputs: %w", err)
	}
	if vars == nil {
		vars = map[string]any{}
	}
	res := resolver{lookup: lookup, used: map[string]bool{}}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		vars[k] = res.value(k, vars[k])
	}
	if err := errors.Join(res.errs...); err != nil {
		return nil, nil, err
	}
	return vars, slices.Sorted(maps.Keys(res.used)), nil
}

type resolver struct {
	lookup func(string) (string, bool)
	used   map[string]bool // secret values
	errs   []error
}

// value resolves the references in v, found at path in the inputs.
func (res *resolver) value(path string, v any) any {
	switch v := v.(type) {
	case string:
		return res.string(path, v)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			v[k] = res.value(path+"."+k, v[k])
		}
		return v
	case []any:
		for i := range v {
			v[i] = res.value(fmt.Sprintf("%s[%d]", path, i), v[i])
		}
		return v
	default:
		return v
	}
}

func (res *resolver) string(path, s string) string {
	return secretRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := secretRef.FindStringSubmatch(ref)[1]
		key := SecretEnv(name)
		val, ok := res.lookup(key)
		if !ok {
			res.errs = append(res.errs, fmt.Errorf("input %s: %w: %s (%s is not set)", path, ErrSecretMissing, name, key))
			return ref
		}
		if val != "" {
			res.used[val] = true
		}
		return val
	})
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
