package policy_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
)

var (
	planH = "sha256:" + strings.Repeat("ab", 32)
	planG = "sha256:" + strings.Repeat("cd", 32)
	t0    = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
)

func loadSigner(t testing.TB, path string) ssh.Signer {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authorized(s ssh.Signer) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
}

func approval(mut func(*schemas.Approval)) []byte {
	a := schemas.Approval{
		APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: "acme", Component: "database",
		Plan: planH, Decision: schemas.DecisionApprove, Approver: "release-manager",
		Created: t0.Add(-time.Hour), Expires: t0.Add(23 * time.Hour),
	}
	if mut != nil {
		mut(&a)
	}
	b, _ := json.Marshal(a)
	return b
}

func sign(t testing.TB, s ssh.Signer, file []byte) schemas.SignedApproval {
	t.Helper()
	sa, err := policy.SignApproval(file, s)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// TestApprovalJudge signs approvals as attackers would and checks that only
// the right key's approval of the waiting plan of this install, in time,
// approves it.
func TestApprovalJudge(t *testing.T) {
	approver := loadSigner(t, "../fixtures/keys/approver")
	operator := loadSigner(t, "../fixtures/keys/operator")
	render := loadSigner(t, "../fixtures/keys/render")
	second, stranger := newSigner(t), newSigner(t)
	data, err := os.ReadFile("../fixtures/tenant/trust/approvals")
	if err != nil {
		t.Fatal(err)
	}
	// The render key listed as an approver by mistake: excluded all the same.
	data = append(data, []byte("  - name: renderer\n    key: "+authorized(render)+"\n  - name: second\n    key: "+authorized(second)+
		"\n    notBefore: \"2030-03-01T13:00:00Z\"\n  - name: stable-only\n    key: "+authorized(stranger)+"\n    scope:\n      channels: [stable]\n")...)
	as, err := policy.ParseApprovers("trust/approvals", data)
	if err != nil {
		t.Fatal(err)
	}
	as.Exclude("render", render.PublicKey())
	as.Exclude("request", operator.PublicKey())
	target := policy.Target{Install: "acme", Channel: "beta", Component: "database", Plan: planH}

	namespaced := func(ns string) schemas.SignedApproval {
		file := approval(nil)
		sig, err := sshsig.Sign(strings.NewReader(string(file)), approver, sshsig.HashSHA512, ns)
		if err != nil {
			t.Fatal(err)
		}
		return schemas.SignedApproval{File: string(file), Signature: string(sshsig.Armor(sig))}
	}
	tampered := sign(t, approver, approval(nil))
	tampered.File = string(approval(func(a *schemas.Approval) { a.Plan = planG }))

	tests := []struct {
		name      string
		approvals []schemas.SignedApproval
		now       time.Time
		approved  bool
		rejected  string
		refused   error
	}{
		{"approved", []schemas.SignedApproval{sign(t, approver, approval(nil))}, t0, true, "", nil},
		{"none", nil, t0, false, "", nil},
		{"another plan", []schemas.SignedApproval{sign(t, approver, approval(func(a *schemas.Approval) { a.Plan = planG }))}, t0, false, "", policy.ErrApprovalOtherPlan},
		{"expired", []schemas.SignedApproval{sign(t, approver, approval(nil))}, t0.Add(24 * time.Hour), false, "", policy.ErrApprovalExpired},
		{"another install", []schemas.SignedApproval{sign(t, approver, approval(func(a *schemas.Approval) { a.Install = "globex" }))}, t0, false, "", policy.ErrApprovalElsewhere},
		{"signed by a request key", []schemas.SignedApproval{sign(t, operator, approval(nil))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"signed by the render key, though listed", []schemas.SignedApproval{sign(t, render, approval(func(a *schemas.Approval) { a.Approver = "renderer" }))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"signed by a stranger under a listed name", []schemas.SignedApproval{sign(t, newSigner(t), approval(nil))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"approver is not the signer", []schemas.SignedApproval{sign(t, approver, approval(func(a *schemas.Approval) { a.Approver = "second" }))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"file changed after signing", []schemas.SignedApproval{tampered}, t0, false, "", policy.ErrApprovalUntrusted},
		{"git namespace signature", []schemas.SignedApproval{namespaced("git")}, t0, false, "", policy.ErrApprovalUntrusted},
		{"key not yet valid", []schemas.SignedApproval{sign(t, second, approval(func(a *schemas.Approval) { a.Approver = "second" }))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"key valid later", []schemas.SignedApproval{sign(t, second, approval(func(a *schemas.Approval) { a.Approver = "second" }))}, t0.Add(2 * time.Hour), true, "", nil},
		{"key past its window", []schemas.SignedApproval{sign(t, approver, approval(func(a *schemas.Approval) { a.Expires = time.Date(2037, 1, 1, 0, 0, 0, 0, time.UTC) }))}, time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC), false, "", policy.ErrApprovalUntrusted},
		{"key scoped to another channel", []schemas.SignedApproval{sign(t, stranger, approval(func(a *schemas.Approval) { a.Approver = "stable-only" }))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"created in the future", []schemas.SignedApproval{sign(t, approver, approval(func(a *schemas.Approval) { a.Created = t0.Add(time.Hour) }))}, t0, false, "", policy.ErrApprovalUntrusted},
		{"reject wins", []schemas.SignedApproval{
			sign(t, approver, approval(nil)),
			sign(t, second, approval(func(a *schemas.Approval) { a.Approver = "second"; a.Decision = schemas.DecisionReject })),
		}, t0.Add(2 * time.Hour), false, "second", nil},
		{"other component ignored", []schemas.SignedApproval{sign(t, approver, approval(func(a *schemas.Approval) { a.Component = "api" }))}, t0, false, "", nil},
		{"garbage", []schemas.SignedApproval{{File: "{", Signature: "x"}}, t0, false, "", schemas.ErrInvalidApproval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := as.Judge(tt.approvals, target, tt.now)
			if v.Approved != tt.approved || v.Rejected != tt.rejected {
				t.Errorf("approved %v rejected %q, want %v %q (refused %v)", v.Approved, v.Rejected, tt.approved, tt.rejected, v.Refused)
			}
			if (tt.refused != nil) != (len(v.Refused) > 0) {
				t.Errorf("refused %v, want %v", v.Refused, tt.refused)
			}
			for _, s := range tt.approvals {
				if _, err := as.Verify(s, target, tt.now); tt.refused != nil && tt.refused != policy.ErrApprovalOtherPlan && !errors.Is(err, tt.refused) {
					t.Errorf("Verify: %v, want %v", err, tt.refused)
				}
			}
		})
	}
}

func TestApprovalThreshold(t *testing.T) {
	a, b := newSigner(t), newSigner(t)
	data := "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 2\nkeys:\n  - name: a\n    key: " + authorized(a) + "\n  - name: b\n    key: " + authorized(b) + "\n"
	as, err := policy.ParseApprovers("trust/approvals", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	target := policy.Target{Install: "acme", Component: "database", Plan: planH}
	byA := sign(t, a, approval(func(x *schemas.Approval) { x.Approver = "a" }))
	byA2 := sign(t, a, approval(func(x *schemas.Approval) { x.Approver = "a"; x.Reason = "again" }))
	byB := sign(t, b, approval(func(x *schemas.Approval) { x.Approver = "b" }))
	if v := as.Judge([]schemas.SignedApproval{byA, byA2}, target, t0); v.Approved {
		t.Errorf("one approver twice meets a threshold of 2")
	}
	if v := as.Judge([]schemas.SignedApproval{byA, byB}, target, t0); !v.Approved || strings.Join(v.Approvers, ",") != "a,b" {
		t.Errorf("two approvers: %+v", v)
	}
}

func TestParseApproversProblems(t *testing.T) {
	k := authorized(newSigner(t))
	tests := []struct {
		name, data, want string
	}{
		{"threshold above keys", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 2\nkeys:\n  - name: a\n    key: " + k + "\n",
			"trust/approvals:3:12: threshold: threshold 2 is more than the 1 keys listed"},
		{"bad time", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: a\n    key: " + k + "\n    notAfter: tomorrow\n",
			"trust/approvals:7:15: keys[0].notAfter: not an RFC 3339 time"},
		{"empty window", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: a\n    key: " + k + "\n    notBefore: \"2030-01-02T00:00:00Z\"\n    notAfter: \"2030-01-01T00:00:00Z\"\n",
			"trust/approvals:8:15: keys[0].notAfter: the key's window is empty"},
		{"duplicate key", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: a\n    key: " + k + "\n  - name: b\n    key: " + k + "\n",
			"trust/approvals:8:10: keys[1].key: key SHA256:"},
		{"not a key", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: a\n    key: ssh-ed25519 nope\n",
			"trust/approvals:6:10: keys[0].key: not an OpenSSH public key"},
		{"unknown field", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nowner: x\nkeys:\n  - name: a\n    key: " + k + "\n",
			"trust/approvals:4:1: owner: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseApprovers("trust/approvals", []byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func FuzzParseApprovers(f *testing.F) {
	if b, err := os.ReadFile("../fixtures/tenant/trust/approvals"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys: []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		as, err := policy.ParseApprovers("trust/approvals", data)
		if err == nil && as.Threshold < 1 {
			t.Fatalf("accepted threshold %d", as.Threshold)
		}
	})
}

// FuzzApprovalVerify: whatever the file and signature, only the fixture
// approver's signature over that very file can verify.
func FuzzApprovalVerify(f *testing.F) {
	approver := loadSigner(f, "../fixtures/keys/approver")
	data, err := os.ReadFile("../fixtures/tenant/trust/approvals")
	if err != nil {
		f.Fatal(err)
	}
	as, err := policy.ParseApprovers("trust/approvals", data)
	if err != nil {
		f.Fatal(err)
	}
	good := sign(f, approver, approval(nil))
	f.Add(good.File, good.Signature)
	f.Add(string(approval(func(a *schemas.Approval) { a.Plan = planG })), good.Signature)
	target := policy.Target{Install: "acme", Component: "database", Plan: planH}
	f.Fuzz(func(t *testing.T, file, sig string) {
		a, err := as.Verify(schemas.SignedApproval{File: file, Signature: sig}, target, t0)
		if err != nil {
			return
		}
		if s, uerr := sshsig.Unarmor([]byte(sig)); uerr != nil || sshsig.Verify(strings.NewReader(file), s, approver.PublicKey(), s.HashAlgorithm, schemas.ApprovalNamespace) != nil {
			t.Fatalf("verified an approval the approver did not sign: %+v", a)
		}
	})
}
