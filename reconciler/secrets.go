package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"nuon.dev/nuon/schemas"
)

// SecretEnvPrefix starts the names of the environment variables that hold
// secrets inside a job, for every plugin.
const SecretEnvPrefix = "NUON_SECRET_"

// ErrSecretMissing reports an input that references a secret the job's
// environment does not hold. Retrying does not help: the install lacks the
// secret.
var ErrSecretMissing = errors.New("secret missing")

// secretRef matches ${secrets.NAME}, the one reference left in a job's
// inputs when the job starts. Any other ${…} is left alone: a plugin may
// give it a meaning of its own (the manifests plugin's ${inputs.NAME}).
var secretRef = regexp.MustCompile(`\$\{secrets\.([A-Za-z0-9_-]+)\}`)

// SecretEnv is the environment variable that holds secret name:
// ${secrets.db-password} comes from NUON_SECRET_DB_PASSWORD.
func SecretEnv(name string) string {
	return SecretEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ResolveSecrets returns a copy of inputs with every ${secrets.NAME} in
// its strings, at any depth, replaced by the value lookup gives for
// SecretEnv(NAME), and the non-empty values it used, sorted, for
// redaction. A reference is replaced once: a secret's value is never read
// as a reference. Each reference lookup does not find is an error wrapping
// ErrSecretMissing, joined in the order of their paths.
//
// inputs must hold what JSON decodes into (maps, slices, scalars); values
// of other types are copied as they are, unresolved.
func ResolveSecrets(inputs map[string]any, lookup func(string) (string, bool)) (map[string]any, []string, error) {
	type missing struct {
		path string
		err  error
	}
	var errs []missing
	used := map[string]bool{}
	out, err := schemas.WalkStrings(inputs, "", func(path, s string) (any, error) {
		return secretRef.ReplaceAllStringFunc(s, func(ref string) string {
			name := secretRef.FindStringSubmatch(ref)[1]
			key := SecretEnv(name)
			val, ok := lookup(key)
			if !ok {
				errs = append(errs, missing{path, fmt.Errorf("input %s: %w: %s (%s is not set)", path, ErrSecretMissing, name, key)})
				return ref
			}
			if val != "" {
				used[val] = true
			}
			return val
		}), nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b missing) int { return strings.Compare(a.path, b.path) })
		joined := make([]error, len(errs))
		for i, m := range errs {
			joined[i] = m.err
		}
		return nil, nil, errors.Join(joined...)
	}
	resolved, _ := out.(map[string]any)
	if resolved == nil {
		resolved = map[string]any{}
	}
	return resolved, slices.Sorted(maps.Keys(used)), nil
}
