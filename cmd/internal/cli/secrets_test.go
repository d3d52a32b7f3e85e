package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSecrets(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       map[string]string
		err        string
	}{
		{name: "names as in ${secrets.NAME}", file: "license_key=demo-license-4242\ndb-password=demo-db-password\n",
			want: map[string]string{"NUON_SECRET_LICENSE_KEY": "demo-license-4242", "NUON_SECRET_DB_PASSWORD": "demo-db-password"}},
		{name: "comments, blank lines, CRLF and = in a value", file: "# the demo's\r\n\r\n  \napi-token=a=b=c\r\n",
			want: map[string]string{"NUON_SECRET_API_TOKEN": "a=b=c"}},
		{name: "an empty value", file: "unused=\n", want: map[string]string{"NUON_SECRET_UNUSED": ""}},
		{name: "no =", file: "# ok\nlicense_key demo-license-4242\n", err: "--secrets-file s.env:2: want NAME=VALUE"},
		{name: "a bad name", file: "license key=demo-license-4242\n", err: "--secrets-file s.env:1: want NAME=VALUE"},
		{name: "twice", file: "db_password=one-password\ndb-password=two-password\n", err: "--secrets-file s.env:2: secret db-password given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSecrets("s.env", []byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "demo-license-4242") || strings.Contains(err.Error(), "password") && !strings.Contains(tc.err, "password") {
					t.Errorf("error %q holds a value", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("secrets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadSecrets(t *testing.T) {
	file := filepath.Join(t.TempDir(), "acme.secrets")
	if err := os.WriteFile(file, []byte("license_key=demo-license-4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NUON_SECRET_LICENSE_KEY", "from-the-environment")
	if err := loadSecrets(file); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("NUON_SECRET_LICENSE_KEY"); got != "demo-license-4242" {
		t.Errorf("NUON_SECRET_LICENSE_KEY = %q, want the file's value", got)
	}
	err := loadSecrets(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "--secrets-file (or $NUON_SECRETS_FILE)") {
		t.Errorf("missing file: %v, want an error naming --secrets-file and $NUON_SECRETS_FILE", err)
	}
}
