package trust

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGolden pins the file format and its canonical form: a signed
// version 1 as Sign writes it, and the bytes its signatures cover.
func TestGolden(t *testing.T) {
	tr := content(t, 1, 2, "root-alice", "root-bob", "root-carol")
	tr.Revocations = []schemas.TrustRevocation{{
		Fingerprint: fp(testKey(t, "render-2025")), RevokedAt: t0.AddDate(0, 0, -7).Format(time.RFC3339), Reason: "retired",
	}}
	r := signedRoot(t, tr, "root-alice", "root-bob")
	file, err := r.Encoded()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"root-1.json": file, "root-1.canonical.json": r.Signed()} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if err := SelfSigned(mustParse(t, file)); err != nil {
		t.Error(err)
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: `{"b": 1, "a": [true, null, "x"]}`, want: `{"a":[true,null,"x"],"b":1}`},
		{in: `{"\u00e9": 1, "z": 2, "\ud83d\ude00": 3, "\uff5e": 4}`, want: "{\"z\":2,\"é\":1,\"😀\":3,\"～\":4}"},
		{in: `"a\u0001\n\"\\/<>"`, want: `"a\u0001\n\"\\/<>"`},
		{in: `-0`, want: `0`},
		{in: `{"a": 1, "a": 2}`, err: "named twice"},
		{in: `1.5`, err: "not an integer"},
		{in: `9007199254740992`, err: "not an integer"},
		{in: `1e3`, err: "not an integer"},
		{in: `{} {}`, err: "text after"},
		{in: "\"\xff\"", err: "not UTF-8"},
		{in: strings.Repeat("[", 40) + strings.Repeat("]", 40), err: "too deep"},
	} {
		got, err := Canonical([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Canonical(%s) = %s, %v; want error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestParseProblems: each bad root is refused with a message that names
// the place, the key and the rule.
func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*schemas.TrustRoot)
		edit   func(string) string
		want   string
	}{
		{name: "threshold above keys", change: func(r *schemas.TrustRoot) { r.Root.Threshold = 4 },
			want: "signed.root.threshold: root threshold 4 is more than its 3 keys"},
		{name: "role threshold above keys", change: func(r *schemas.TrustRoot) { r.Roles.Render.Threshold = 2 },
			want: "render threshold 2 is more than its 1 keys"},
		{name: "duplicate key name", change: func(r *schemas.TrustRoot) {
			r.Roles.Render.Keys = append(r.Roles.Render.Keys, schemas.TrustKey{Name: "render-2026", Key: authorized(testKey(t, "other"))})
		}, want: `render key "render-2026" is listed twice`},
		{name: "same key twice", change: func(r *schemas.TrustRoot) {
			r.Root.Keys = append(r.Root.Keys, schemas.TrustRootKey{Name: "alice-again", Key: r.Root.Keys[0].Key})
		}, want: `root key "alice-again"`},
		{name: "window ends before it starts", change: func(r *schemas.TrustRoot) {
			r.Roles.Render.Keys[0].NotAfter = t0.AddDate(0, -2, 0).Format(time.RFC3339)
		}, want: "window ends"},
		{name: "bad time", change: func(r *schemas.TrustRoot) { r.Expires = "next year" },
			want: `signed.expires: "next year" is not an RFC 3339 time`},
		{name: "root key not ed25519", change: func(r *schemas.TrustRoot) {
			r.Root.Keys[0].Key = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmxkZMy7opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg="
		}, want: "root keys must be one of"},
		{name: "not a key", change: func(r *schemas.TrustRoot) { r.Roles.Render.Keys[0].Key = "ssh-ed25519 nope" },
			want: "not an OpenSSH public key"},
		{name: "revoked twice", change: func(r *schemas.TrustRoot) {
			rv := schemas.TrustRevocation{Fingerprint: fp(testKey(t, "x")), RevokedAt: t0.Format(time.RFC3339), Reason: "leaked"}
			r.Revocations = append(r.Revocations, rv, rv)
		}, want: "is revoked twice"},
		{name: "bad fingerprint", change: func(r *schemas.TrustRoot) {
			r.Revocations = append(r.Revocations, schemas.TrustRevocation{Fingerprint: "MD5:aa", RevokedAt: t0.Format(time.RFC3339), Reason: "leaked"})
		}, want: "is not a SHA256 key fingerprint"},
		{name: "every render key revoked", change: func(r *schemas.TrustRoot) {
			r.Revocations = append(r.Revocations, schemas.TrustRevocation{Fingerprint: fp(testKey(t, "render-2026")), RevokedAt: t0.Format(time.RFC3339), Reason: "leaked"})
		}, want: "signed.roles.render.keys: every render key is revoked"},
		{name: "unknown role", edit: func(s string) string {
			return strings.Replace(s, `"render":`, `"deployers":{"threshold":1,"keys":[{"name":"d","key":"ssh-ed25519 x"}]},"render":`, 1)
		}, want: "deployers"},
		{name: "no render role", edit: func(s string) string {
			return strings.Replace(s, `"roles":{"render":`, `"roles":{"server":`, 1)
		}, want: "render"},
		{name: "member twice", edit: func(s string) string {
			return strings.Replace(s, `"version":1`, `"version":1,"version":2`, 1)
		}, want: `member "version" named twice`},
		{name: "fraction", edit: func(s string) string {
			return strings.Replace(s, `"version":1`, `"version":1.0`, 1)
		}, want: "not an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := content(t, 1, 2, "root-alice", "root-bob", "root-carol")
			if tc.change != nil {
				tc.change(&tr)
			}
			raw, err := json.Marshal(schemas.TrustRootFile{Signed: tr, Signatures: []schemas.TrustSignature{}})
			if err != nil {
				t.Fatal(err)
			}
			s := string(raw)
			if tc.edit != nil {
				s = tc.edit(s)
			}
			_, err = Parse("trust/root/1.json", []byte(s))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "trust/root/1.json") {
				t.Errorf("Parse: %v\nwant an error naming the file and %q", err, tc.want)
			}
		})
	}
}

func TestParseKeyID(t *testing.T) {
	r := signedRoot(t, content(t, 1, 1, "root-alice"), "root-alice")
	b, _ := r.Encoded()
	b = []byte(strings.Replace(string(b), fp(testKey(t, "root-alice")), fp(testKey(t, "root-bob")), 1))
	if _, err := Parse("1.json", b); err == nil || !strings.Contains(err.Error(), "does not name the signing key") {
		t.Errorf("Parse with a wrong keyid: %v", err)
	}
}
