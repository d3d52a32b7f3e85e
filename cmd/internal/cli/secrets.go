package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"

	"nuon.dev/nuon/reconciler"
)

// EnvSecretsFile is the default of --secrets-file.
const EnvSecretsFile = "NUON_SECRETS_FILE"

// SecretsFileHelp describes --secrets-file for the commands that take it.
const SecretsFileHelp = "file of the install's secrets, NAME=VALUE a line (# comments, blank lines), NAME as in ${secrets.NAME}: each becomes NUON_SECRET_NAME for the jobs and the redactor; never in git or argv (default $" + EnvSecretsFile + ")"

// secretLine is NAME=VALUE, NAME as ${secrets.NAME} writes it.
var secretLine = regexp.MustCompile(`^([A-Za-z0-9_-]+)=(.*)$`)

// parseSecrets reads a secrets file: NAME=VALUE lines, with # comments and
// blank lines, into the environment variables the jobs resolve
// ${secrets.NAME} from. Errors name the file and the line, never a value.
func parseSecrets(file string, b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		m := secretLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("--secrets-file %s:%d: want NAME=VALUE, NAME of letters, digits, - and _", file, n)
		}
		env := reconciler.SecretEnv(m[1])
		if _, dup := out[env]; dup {
			return nil, fmt.Errorf("--secrets-file %s:%d: secret %s given twice", file, n, m[1])
		}
		out[env] = m[2]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--secrets-file %s: %w", file, err)
	}
	return out, nil
}

// loadSecrets puts the secrets of file, if any, into this process's
// environment, which the redactor reads and every job inherits. A value
// in the file wins over one in the environment.
func loadSecrets(file string) error {
	if file == "" {
		return nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--secrets-file (or $%s): %w", EnvSecretsFile, err)
	}
	secrets, err := parseSecrets(file, b)
	if err != nil {
		return err
	}
	for k, v := range secrets {
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("--secrets-file %s: %w", file, err)
		}
	}
	return nil
}
