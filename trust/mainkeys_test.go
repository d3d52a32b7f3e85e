package trust

import (
	"errors"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/schemas"
)

// TestMainKeys: the root's role wins over the legacy file, the legacy
// file is read with a deprecation warning when the root lacks the role
// or main has no root, revoked and out-of-window keys are left out, and a
// broken root names no key at all.
func TestMainKeys(t *testing.T) {
	legacyOps := []byte("support " + authorized(testKey(t, "legacy-op")) + "\n")
	approvers := []byte("apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: rm\n    key: " + authorized(testKey(t, "legacy-approver")) + "\n")
	v1 := content(t, 1, 1, "root-a")
	v1.Roles.BuildRequesters = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{
		{Name: "ci", Key: authorized(testKey(t, "ci"))},
		{Name: "ci-old", Key: authorized(testKey(t, "ci-old")), NotAfter: t0.Add(-time.Hour).Format(time.RFC3339)},
		{Name: "ci-leaked", Key: authorized(testKey(t, "ci-leaked"))},
		{Name: "ci-next", Key: authorized(testKey(t, "ci-next")), NotBefore: t0.Add(time.Hour).Format(time.RFC3339)},
	}}
	v1.Roles.Approvers = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{
		{Name: "rm", Key: authorized(testKey(t, "rm"))},
		{Name: "rm-leaked", Key: authorized(testKey(t, "rm-leaked"))},
	}}
	v1.Revocations = []schemas.TrustRevocation{
		{Fingerprint: fp(testKey(t, "ci-leaked")), RevokedAt: t0.Add(-time.Minute).Format(time.RFC3339), Reason: "leaked"},
		{Fingerprint: fp(testKey(t, "rm-leaked")), RevokedAt: t0.Add(-time.Minute).Format(time.RFC3339), Reason: "leaked"},
	}
	good := encoded(t, signedRoot(t, v1, "root-a"))
	unsigned := encoded(t, signedRoot(t, v1))

	tests := []struct {
		name     string
		files    Files
		role     Role
		from     string
		has      []string // key names (or comments) the data must hold
		hasNot   []string
		warnings []string
		// deprecated is what Deprecated must hold; "" for nothing.
		deprecated string
		err        string
	}{
		{name: "no root, legacy file", role: RoleOperators,
			files: Files{"trust/requests": legacyOps},
			from:  "trust/requests", has: []string{"support "},
			deprecated: "trust/requests on main is deprecated"},
		{name: "nothing", role: RoleOperators, files: Files{}},
		{name: "root names the role, legacy ignored", role: RoleOperators,
			files: Files{FileName(1): good, "trust/requests": legacyOps},
			from:  FileName(1), has: []string{"ops-eu "}, hasNot: []string{"support"},
			warnings: []string{"trust/requests on main is ignored: trust/root/1.json names the operators role"}},
		{name: "root lacks the role, legacy read", role: RoleBuildAgents,
			files: Files{FileName(1): good, "trust/build-agents": legacyOps},
			from:  "trust/build-agents", has: []string{"support "},
			deprecated: "trust/build-agents on main is deprecated: the trust root's build-agents role replaces it"},
		{name: "windows and revocations", role: RoleBuildRequesters,
			files: Files{FileName(1): good},
			from:  FileName(1), has: []string{"ci "}, hasNot: []string{"ci-old", "ci-leaked", "ci-next"}},
		{name: "approvers keep the revocation as notAfter", role: RoleApprovers,
			files: Files{FileName(1): good, "trust/approvals": approvers},
			from:  FileName(1), has: []string{"name: rm\n", "name: rm-leaked", "notAfter: \"" + t0.Add(-time.Minute).Format(time.RFC3339)},
			hasNot: []string{"legacy"}, warnings: []string{"trust/approvals on main is ignored"}},
		{name: "root below threshold names no key", role: RoleOperators,
			files: Files{FileName(1): unsigned, "trust/requests": legacyOps},
			err:   "too few root signatures"},
		{name: "no version 1", role: RoleOperators,
			files: Files{FileName(2): good},
			err:   "trust/root/2.json"},
		{name: "unknown role", role: "janitors", files: Files{}, err: "role not in the root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := MainKeys(tt.files, tt.role, t0)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.From != tt.from {
				t.Errorf("from = %q, want %q", k.From, tt.from)
			}
			if k.FromRoot() != strings.HasPrefix(tt.from, Dir) {
				t.Errorf("FromRoot = %v", k.FromRoot())
			}
			for _, h := range tt.has {
				if !strings.Contains(string(k.Data), h) {
					t.Errorf("data lacks %q:\n%s", h, k.Data)
				}
			}
			for _, h := range tt.hasNot {
				if strings.Contains(string(k.Data), h) {
					t.Errorf("data holds %q:\n%s", h, k.Data)
				}
			}
			if (tt.deprecated == "") != (k.Deprecated == "") || !strings.Contains(k.Deprecated, tt.deprecated) {
				t.Errorf("deprecated = %q, want %q", k.Deprecated, tt.deprecated)
			}
			if rf, _ := tt.files.RootFiles(); k.MainHasRoot != (rf != nil) {
				t.Errorf("MainHasRoot = %v", k.MainHasRoot)
			}
			if len(k.Warnings) != len(tt.warnings) {
				t.Fatalf("warnings = %q, want %q", k.Warnings, tt.warnings)
			}
			for i, w := range tt.warnings {
				if !strings.Contains(k.Warnings[i], w) {
					t.Errorf("warning %d = %q, want %q", i, k.Warnings[i], w)
				}
			}
		})
	}
	t.Run("expired root still names keys, with a warning", func(t *testing.T) {
		k, err := MainKeys(Files{FileName(1): good}, RoleOperators, t0.AddDate(2, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if len(k.Warnings) != 1 || !strings.Contains(k.Warnings[0], "expired") {
			t.Fatalf("warnings = %q", k.Warnings)
		}
	})
	t.Run("unknown role wraps ErrUnknownRole", func(t *testing.T) {
		if _, err := MainKeys(Files{}, "x", t0); !errors.Is(err, ErrUnknownRole) {
			t.Fatal(err)
		}
	})
}

func encoded(t testing.TB, r *Root) []byte {
	t.Helper()
	b, err := r.Encoded()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzMainKeys: whatever main holds, MainKeys either refuses or returns
// keys from the file it names, and never keys from a root that does not
// chain.
func FuzzMainKeys(f *testing.F) {
	f.Add([]byte(`{"signed":{}}`), []byte("support ssh-ed25519 AAAA\n"))
	f.Add([]byte("{}"), []byte(""))
	f.Fuzz(func(t *testing.T, root, legacy []byte) {
		k, err := MainKeys(Files{FileName(1): root, "trust/requests": legacy}, RoleOperators, t0)
		if err != nil {
			return
		}
		if k.FromRoot() {
			if _, err := Chain(k.Root, []*Root{k.Root}, time.Time{}); err != nil {
				t.Fatalf("keys from a root that does not verify: %v", err)
			}
		} else if k.From != "trust/requests" || string(k.Data) != string(legacy) {
			t.Fatalf("from %q", k.From)
		}
	})
}

// BenchmarkMainKeys is one read of a role's keys from main's files: the
// chain from version 1 (one version here) and the role written out. The
// server pays it when main moves, or once a minute for a root's keys.
func BenchmarkMainKeys(b *testing.B) {
	files := Files{FileName(1): encoded(b, signedRoot(b, content(b, 1, 1, "root-a"), "root-a"))}
	for b.Loop() {
		if _, err := MainKeys(files, RoleOperators, t0); err != nil {
			b.Fatal(err)
		}
	}
}
