package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// copies records what the agent asked to copy: the copy is an image
// component's whole apply.
type copies struct{ got [][]schemas.Artifact }

func (c *copies) Sync(_ context.Context, arts []schemas.Artifact) error {
	c.got = append(c.got, slices.Clone(arts))
	return nil
}

func newSigner(t *testing.T) ssh.Signer {
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

func art(name, digest string) schemas.Artifact {
	return schemas.Artifact{Name: name, Source: "vendor.example/" + name + "@" + digest, Local: "registry.acme/" + name + "@" + digest, Digest: digest}
}

func digest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

// TestImageNeedsCustomerApproval: an image component has no plan, its
// apply is the copy of its artifacts; when the customer's policy names it,
// that copy waits for the customer's own approval of the change's hash
// (imageChange), published as the plan record's hash. Unapproved, approved
// with the vendor's key, or approved for another hash: nothing is copied,
// the component is AwaitingApproval and the install deferred for the
// customer's approval. Approved: copied. A change of a kind the policy
// does not list, or one that moves no digest, copies without waiting.
func TestImageNeedsCustomerApproval(t *testing.T) {
	customerKey, vendorKey := newSigner(t), newSigner(t)
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	vendor, err := policy.ParseApprovers("trust/approvals", []byte("apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: release-manager\n    key: "+authorized(vendorKey)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	const (
		unapproved = iota
		vendorSigned
		otherHash
		approved
	)
	tests := []struct {
		name     string
		changes  string // requireApproval.changes
		had      []schemas.Artifact
		want     []schemas.Artifact
		approval int
		copied   bool
		kinds    []string
		refused  string
	}{
		{"first copy, unapproved", "", nil, []schemas.Artifact{art("web", digest('1'))}, unapproved, false, []string{"create"}, ""},
		{"new digest, unapproved", "", []schemas.Artifact{art("web", digest('1'))}, []schemas.Artifact{art("web", digest('2'))}, unapproved, false, []string{"update"}, ""},
		{"the vendor's key", "", []schemas.Artifact{art("web", digest('1'))}, []schemas.Artifact{art("web", digest('2'))}, vendorSigned, false, []string{"update"}, "the vendor's approver (release-manager)"},
		{"another hash", "", []schemas.Artifact{art("web", digest('1'))}, []schemas.Artifact{art("web", digest('2'))}, otherHash, false, []string{"update"}, "not the waiting"},
		{"approved", "", []schemas.Artifact{art("web", digest('1'))}, []schemas.Artifact{art("web", digest('2'))}, approved, true, nil, ""},
		{"an artifact dropped, deletes listed", "[delete]", []schemas.Artifact{art("web", digest('1')), art("worker", digest('3'))}, []schemas.Artifact{art("web", digest('1'))}, unapproved, false, []string{"delete"}, ""},
		{"an update, only delete and replace listed", "[delete, replace]", []schemas.Artifact{art("web", digest('1'))}, []schemas.Artifact{art("web", digest('2'))}, unapproved, true, nil, ""},
		{"no digest moves", "", []schemas.Artifact{art("web", digest('1'))}, []schemas.Artifact{art("web", digest('1'))}, unapproved, true, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			approvals := t.TempDir()
			pol := "apiVersion: nuon.dev/v1\nkind: CustomerPolicy\napprovers:\n  - name: acme-sre\n    key: " + authorized(customerKey) +
				"\n  - name: release-manager\n    key: " + authorized(vendorKey) + "\nrequireApproval: {components: [web]"
			if tt.changes != "" {
				pol += ", changes: " + tt.changes
			}
			if err := os.WriteFile(policyFile, []byte(pol+"}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := policy.Load(policyFile)
			if err != nil {
				t.Fatal(err)
			}
			cp := &copies{}
			a := &Agent{cfg: Config{Install: "acme", Workdir: t.TempDir(), Sync: cp, Approvers: vendor, CustomerApprovals: approvals, Now: func() time.Time { return now }},
				log: slog.New(slog.DiscardHandler), checked: map[string]time.Time{}}
			spec := &schemas.ComponentState{Name: "web", Type: schemas.TypeImage, Version: "2", Artifacts: tt.want}
			old := &schemas.ComponentState{Name: "web", Type: schemas.TypeImage, Version: "1", Artifacts: tt.had}
			st := schemas.Status{Components: map[string]schemas.ComponentStatus{}}
			var applied *reconciler.Applied
			if tt.had != nil {
				st.Components["web"] = schemas.ComponentStatus{Phase: schemas.PhaseApplied, Spec: reconciler.SpecHash(old)}
				applied = &reconciler.Applied{Spec: old, Status: st.Components["web"]}
			}
			p := &pass{agent: a, log: a.log, rec: &record{Status: st, Applied: map[string]*schemas.ComponentState{}},
				desired: &Desired{Install: schemas.InstallState{Channel: "stable"}, Components: map[string]*schemas.ComponentState{"web": spec}},
				gate:    &customerGate{policy: c}}
			rec, err := imageChange(spec, old)
			if err != nil {
				t.Fatal(err)
			}
			sign := func(signer ssh.Signer, approver, hash string) {
				data, err := json.Marshal(schemas.Approval{APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: "acme", Component: "web", Plan: hash,
					Decision: schemas.DecisionApprove, Approver: approver, Created: now.Add(-time.Minute), Expires: now.Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				s, err := policy.SignApproval(data, signer)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := json.Marshal(s)
				if err := os.WriteFile(filepath.Join(approvals, approver+customerApprovalExt), out, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			switch tt.approval {
			case vendorSigned:
				sign(vendorKey, "release-manager", rec.Hash)
			case otherHash:
				sign(customerKey, "acme-sre", digest('9'))
			case approved:
				sign(customerKey, "acme-sre", rec.Hash)
			}

			var mu sync.Mutex
			p.step(context.Background(), reconciler.Step{Component: "web", Action: reconciler.Apply, Desired: spec, Applied: applied}, &mu, reconciler.Outputs{}, map[string][]string{})
			cs := p.rec.Status.Components["web"]
			if tt.copied {
				if len(cp.got) != 1 || !slices.Equal(cp.got[0], tt.want) || cs.Phase != schemas.PhaseApplied || cs.Plan != nil {
					t.Fatalf("copied %v, web %s (plan %+v); want the artifacts copied and applied", cp.got, cs.Phase, cs.Plan)
				}
				return
			}
			if len(cp.got) != 0 || cs.Phase != schemas.PhaseAwaitingApproval || cs.Plan == nil {
				t.Fatalf("copied %v, web %s %q; want nothing copied, awaiting approval", cp.got, cs.Phase, cs.Error)
			}
			if cs.Plan.Hash != rec.Hash || !slices.Equal(cs.Plan.Summary.Kinds(), tt.kinds) || cs.Plan.Customer == "" || cs.Plan.Needs != cs.Plan.Customer {
				t.Errorf("record %+v: want hash %s, kinds %v, waiting for the customer", cs.Plan, rec.Hash, tt.kinds)
			}
			if tt.refused != "" && !slices.ContainsFunc(cs.Plan.Refused, func(r string) bool { return strings.HasPrefix(r, "customer: ") && strings.Contains(r, tt.refused) }) {
				t.Errorf("refused %q, want one saying %q", cs.Plan.Refused, tt.refused)
			}
			if phase := p.awaiting(schemas.InstallDegraded); phase != schemas.InstallAwaitingApproval || p.rec.Status.Deferred == nil || p.rec.Status.Deferred.Reason != schemas.DeferredCustomerApproval {
				t.Errorf("install %s, deferred %+v; want awaiting the customer's approval", phase, p.rec.Status.Deferred)
			}
		})
	}
}

// TestImageChangeHash: the hash binds exactly what is copied: the same
// artifacts in any order hash alike; another digest, source or name does
// not.
func TestImageChangeHash(t *testing.T) {
	h := func(arts ...schemas.Artifact) string {
		rec, err := imageChange(&schemas.ComponentState{Name: "web", Type: schemas.TypeImage, Artifacts: arts}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Hash
	}
	base := h(art("a", digest('1')), art("b", digest('2')))
	if got := h(art("b", digest('2')), art("a", digest('1'))); got != base {
		t.Errorf("order changes the hash: %s != %s", got, base)
	}
	moved := art("b", digest('2'))
	moved.Source = "elsewhere.example/b@" + digest('2')
	for name, other := range map[string]string{
		"digest": h(art("a", digest('1')), art("b", digest('3'))),
		"source": h(art("a", digest('1')), moved),
		"name":   h(art("a", digest('1')), art("c", digest('2'))),
		"fewer":  h(art("a", digest('1'))),
	} {
		if other == base {
			t.Errorf("another %s, same hash", name)
		}
	}
}
