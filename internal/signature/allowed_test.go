package signature_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
)

func TestParseAllowedSigners(t *testing.T) {
	key := signer(t, "render").AuthorizedKey()
	acme := signer(t, "acme").AuthorizedKey()
	fp := func(k string) string {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return ssh.FingerprintSHA256(pk)
	}
	// signer is an AllowedSigner without its key, and the key's fingerprint.
	type signer struct {
		Principals, Namespaces []string
		Key                    string
		Line                   int
	}
	for _, tc := range []struct {
		name string
		file string
		want []signer
		err  string
	}{
		{name: "empty"},
		{name: "comments and blank lines", file: "# a comment\n\n \t\n  # another\n"},
		{name: "one key", file: "nuon-render " + key + "\n",
			want: []signer{{Principals: []string{"nuon-render"}, Key: fp(key), Line: 1}}},
		{name: "no final newline, CRLF and a comment after the key", file: "# keys\r\nnuon-render " + key + " the renderer\r\nacme " + acme,
			want: []signer{{Principals: []string{"nuon-render"}, Key: fp(key), Line: 2}, {Principals: []string{"acme"}, Key: fp(acme), Line: 3}}},
		{name: "principals", file: "a@example.com,*@ci.example.com " + key + "\n",
			want: []signer{{Principals: []string{"a@example.com", "*@ci.example.com"}, Key: fp(key), Line: 1}}},
		{name: "quoted principals with spaces", file: `"nuon render","ci bot" ` + key + "\n",
			want: []signer{{Principals: []string{"nuon render", "ci bot"}, Key: fp(key), Line: 1}}},
		{name: "namespaces", file: `nuon-render namespaces="git,file" ` + key + "\n",
			want: []signer{{Principals: []string{"nuon-render"}, Namespaces: []string{"git", "file"}, Key: fp(key), Line: 1}}},
		{name: "option names ignore case", file: `nuon-render NAMESPACES="git" ` + key + "\n",
			want: []signer{{Principals: []string{"nuon-render"}, Namespaces: []string{"git"}, Key: fp(key), Line: 1}}},
		{name: "indented", file: "\n   nuon-render\t" + key + "\n",
			want: []signer{{Principals: []string{"nuon-render"}, Key: fp(key), Line: 2}}},
		{name: "no key", file: "# x\nnuon-render\n", err: ":2: "},
		{name: "no principals", file: key + "\n", err: ":1: "},
		{name: "empty quoted principal", file: `"" ` + key + "\n", err: ":1: missing principals"},
		{name: "bad key data", file: "\n\nnuon-render ssh-ed25519 AAAAnotbase64!!\n", err: ":3: public key"},
		{name: "unknown option", file: "nuon-render frobnicate " + key + "\n", err: `:1: unknown option "frobnicate"`},
		{name: "certificate authority", file: "nuon-render cert-authority " + key + "\n", err: `:1: option "cert-authority" is not supported`},
		{name: "validity window", file: `nuon-render valid-before="20300101" ` + key + "\n", err: `:1: option "valid-before" is not supported`},
		{name: "the bad line is named", file: "a " + key + "\nb " + key + "\nc nope\n", err: ":3: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as, err := signature.ParseAllowedSigners([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("error %v, want one starting %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []signer
			for _, s := range as.Signers {
				got = append(got, signer{Principals: s.Principals, Namespaces: s.Namespaces, Key: ssh.FingerprintSHA256(s.Key), Line: s.Line})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("signers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadAllowedSigners(t *testing.T) {
	p := filepath.Join(t.TempDir(), "trust")
	if err := os.WriteFile(p, []byte("# ok\nbroken line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := signature.LoadAllowedSigners(p)
	if err == nil || !strings.Contains(err.Error(), p+":2: ") {
		t.Errorf("error %v, want it to name %s:2", err, p)
	}
	if _, err := signature.LoadAllowedSigners(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file loads")
	}
}
