package trust

import (
	"errors"
	"testing"
	"time"

	"nuon.dev/nuon/schemas"
)

func TestAuthorize(t *testing.T) {
	c := content(t, 1, 1, "A")
	nb, na := t0.AddDate(0, -1, 0), t0.AddDate(0, 6, 0) // render-2026's window
	revokedAt := t0.Add(time.Hour)
	c.Roles.Server = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "server-old", Key: authorized(testKey(t, "server-old"))}}}
	c.Roles.Approvers = &schemas.TrustRole{
		Threshold: 1,
		Scope:     &schemas.TrustScope{Channels: []string{"stable", "beta"}},
		Keys:      []schemas.TrustKey{{Name: "approver", Key: authorized(testKey(t, "approver"))}},
	}
	c.Revocations = []schemas.TrustRevocation{{Fingerprint: fp(testKey(t, "server-old")), RevokedAt: revokedAt.Format(time.RFC3339), Reason: "leaked"}}
	r := signedRoot(t, c, "A")
	render, server, ops, approver := fp(testKey(t, "render-2026")), fp(testKey(t, "server-old")), fp(testKey(t, "ops-eu")), fp(testKey(t, "approver"))
	eu := Target{Labels: map[string]string{"region": "eu", "tier": "gold"}, RequestKind: KindLogs}
	for _, tc := range []struct {
		name string
		role Role
		fp   string
		at   time.Time
		t    Target
		want error
	}{
		{name: "inside the window", role: RoleRender, fp: render, at: t0},
		{name: "at notBefore", role: RoleRender, fp: render, at: nb},
		{name: "just before notBefore", role: RoleRender, fp: render, at: nb.Add(-time.Second), want: ErrNotYetValid},
		{name: "just before notAfter", role: RoleRender, fp: render, at: na.Add(-time.Second)},
		{name: "at notAfter", role: RoleRender, fp: render, at: na, want: ErrKeyExpired},
		{name: "another role's key", role: RoleRender, fp: ops, at: t0, want: ErrUnknownKey},
		{name: "role not in the root", role: RoleBuilders, fp: render, at: t0, want: ErrUnknownRole},
		{name: "root is not a signing role", role: RoleRoot, fp: fp(testKey(t, "A")), at: t0, want: ErrUnknownRole},
		{name: "signed before revocation", role: RoleServer, fp: server, at: revokedAt.Add(-time.Second)},
		{name: "signed at revocation", role: RoleServer, fp: server, at: revokedAt, want: ErrRevoked},
		{name: "signed after revocation", role: RoleServer, fp: server, at: revokedAt.Add(time.Hour), want: ErrRevoked},
		{name: "in scope", role: RoleOperators, fp: ops, at: t0, t: eu},
		{name: "label differs", role: RoleOperators, fp: ops, at: t0, t: Target{Labels: map[string]string{"region": "us"}, RequestKind: KindLogs}, want: ErrOutOfScope},
		{name: "label missing", role: RoleOperators, fp: ops, at: t0, t: Target{RequestKind: KindLogs}, want: ErrOutOfScope},
		{name: "request kind outside the role's", role: RoleOperators, fp: ops, at: t0, t: Target{Labels: eu.Labels, RequestKind: KindBuild}, want: ErrOutOfScope},
		{name: "no request kind given", role: RoleOperators, fp: ops, at: t0, t: Target{Labels: eu.Labels}, want: ErrOutOfScope},
		{name: "channel in scope", role: RoleApprovers, fp: approver, at: t0, t: Target{Channel: "beta"}},
		{name: "channel out of scope", role: RoleApprovers, fp: approver, at: t0, t: Target{Channel: "edge"}, want: ErrOutOfScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := r.Authorize(tc.role, tc.fp, tc.at, tc.t)
			if tc.want == nil {
				if err != nil || k.Fingerprint != tc.fp {
					t.Fatalf("Authorize: %v, %v", k.Name, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrNotAuthorized) {
				t.Fatalf("Authorize: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestMeets(t *testing.T) {
	c := content(t, 1, 1, "A")
	c.Roles.Approvers = &schemas.TrustRole{Threshold: 2, Keys: []schemas.TrustKey{
		{Name: "ann", Key: authorized(testKey(t, "ann"))},
		{Name: "ben", Key: authorized(testKey(t, "ben")), NotAfter: t0.Format(time.RFC3339)},
		{Name: "cat", Key: authorized(testKey(t, "cat"))},
	}}
	r := signedRoot(t, c, "A")
	ann, ben, cat := fp(testKey(t, "ann")), fp(testKey(t, "ben")), fp(testKey(t, "cat"))
	for _, tc := range []struct {
		name string
		fps  []string
		ok   bool
	}{
		{name: "two people", fps: []string{ann, cat}, ok: true},
		{name: "one person twice", fps: []string{ann, ann}},
		{name: "one in window, one after", fps: []string{ann, ben}},
		{name: "a stranger", fps: []string{ann, fp(testKey(t, "stranger"))}},
		{name: "none", fps: nil},
	} {
		err := r.Meets(RoleApprovers, tc.fps, t0, Target{})
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrRoleThreshold) {
			t.Errorf("%s: Meets: %v", tc.name, err)
		}
	}
}

// TestSignedAt is the rule for a backdated commit: a time before what the
// verifier already accepted is judged at that floor, so a leaked key
// revoked in between is refused.
func TestSignedAt(t *testing.T) {
	c := content(t, 1, 1, "A")
	c.Roles.Render.Keys = append(c.Roles.Render.Keys, schemas.TrustKey{Name: "render-2027", Key: authorized(testKey(t, "render-2027"))})
	c.Revocations = []schemas.TrustRevocation{{Fingerprint: fp(testKey(t, "render-2026")), RevokedAt: t0.Format(time.RFC3339), Reason: "leaked"}}
	r := signedRoot(t, c, "A")
	applied := t0.Add(time.Hour) // the re-render after the revocation
	backdated := t0.Add(-24 * time.Hour)
	if _, err := r.Authorize(RoleRender, fp(testKey(t, "render-2026")), SignedAt(backdated, applied), Target{}); !errors.Is(err, ErrRevoked) {
		t.Errorf("backdated commit by a revoked key: %v, want ErrRevoked", err)
	}
	if _, err := r.Authorize(RoleRender, fp(testKey(t, "render-2026")), SignedAt(backdated, time.Time{}), Target{}); err != nil {
		t.Errorf("history before the revocation: %v", err)
	}
	if got := SignedAt(applied, backdated); !got.Equal(applied) {
		t.Errorf("SignedAt(later, earlier) = %v", got)
	}
}
