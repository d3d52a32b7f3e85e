package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/schemas"
)

// ErrSecretMissing reports an input that references a secret the job's
// environment does not hold. Retrying does not help: the install lacks the
// secret.
var ErrSecretMissing = errors.New("secret missing")

// ErrSecretUnusable reports a secret whose value cannot be redacted
// safely, so it is never handed to a plugin: it is shorter than
// redact.MinLen bytes besides whitespace, or not UTF-8 text. Retrying
// does not help: the secret must change.
var ErrSecretUnusable = errors.New("secret unusable")

// secretRef matches ${secrets.NAME}, the one reference left in a job's
// inputs when the job starts. Any other ${…} is left alone: a plugin may
// give it a meaning of its own (the manifests plugin's ${inputs.NAME}).
var secretRef = regexp.MustCompile(`\$\{secrets\.([A-Za-z0-9_-]+)\}`)

// SecretEnv is the environment variable that holds secret name:
// ${secrets.db-password} comes from NUON_SECRET_DB_PASSWORD (see
// redact.EnvPrefix).
func SecretEnv(name string) string {
	return redact.EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ResolveSecrets returns a copy of inputs with every ${secrets.NAME} in
// its strings, at any depth, replaced by the value lookup gives for
// SecretEnv(NAME), and the non-empty values it used, sorted. A reference
// is replaced once: a secret's value is never read as a reference. Each
// reference lookup does not find is an error wrapping ErrSecretMissing;
// each value too short to redact safely (fewer than redact.MinLen bytes
// besides whitespace; empty is allowed) or not UTF-8 text is an error
// wrapping ErrSecretUnusable that names the secret and the minimum, never
// the value. The errors are joined in the order of their paths.
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
			if err := redact.Check(name+" ("+key+")", val); err != nil {
				errs = append(errs, missing{path, fmt.Errorf("input %s: %w: %w", path, ErrSecretUnusable, err)})
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

// PlanRedactor redacts from a plan record the values of the secrets
// inputs (already normalized to JSON types) resolve to: what every
// plugin's record of a saved plan passes through before it leaves the
// job (the job process redacts its result again).
func PlanRedactor(inputs map[string]any, lookup func(string) (string, bool)) (*redact.Redactor, error) {
	_, used, err := ResolveSecrets(inputs, lookup)
	if err != nil {
		return nil, err
	}
	red, err := redact.FromValues(used)
	if err != nil {
		return nil, fmt.Errorf("redact the plan: %w", err)
	}
	return red, nil
}
