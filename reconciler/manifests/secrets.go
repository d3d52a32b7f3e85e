package manifests

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// SecretEnvPrefix starts the names of the environment variables that hold
// secrets inside a job, as for the other plugins.
const SecretEnvPrefix = "NUON_SECRET_"

// ErrSecretMissing reports an input that references a secret the job's
// environment does not hold.
var ErrSecretMissing = errors.New("secret missing")

// secretRef matches ${secrets.NAME}.
var secretRef = regexp.MustCompile(`\$\{secrets\.([A-Za-z0-9_-]+)\}`)

// SecretEnv is the environment variable that holds secret name:
// ${secrets.db-password} comes from NUON_SECRET_DB_PASSWORD.
func SecretEnv(name string) string {
	return SecretEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// resolveSecrets replaces every ${secrets.NAME} in the strings of inputs,
// in place, with the secret's value from lookup. A secret's value is never
// read as a reference.
func resolveSecrets(inputs map[string]any, lookup func(string) (string, bool)) error {
	var errs []error
	var walk func(path string, v any) any
	walk = func(path string, v any) any {
		switch v := v.(type) {
		case string:
			return secretRef.ReplaceAllStringFunc(v, func(ref string) string {
				name := secretRef.FindStringSubmatch(ref)[1]
				val, ok := lookup(SecretEnv(name))
				if !ok {
					errs = append(errs, fmt.Errorf("input %s: %w: %s (%s is not set)", path, ErrSecretMissing, name, SecretEnv(name)))
					return ref
				}
				return val
			})
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				v[k] = walk(path+"."+k, v[k])
			}
		case []any:
			for i := range v {
				v[i] = walk(fmt.Sprintf("%s[%d]", path, i), v[i])
			}
		}
		return v
	}
	for _, k := range slices.Sorted(maps.Keys(inputs)) {
		inputs[k] = walk(k, inputs[k])
	}
	return errors.Join(errs...)
}
