package renderer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// TestRequestsTakeTheRootsOperators: once main's trust root names the
// operators role, the renderer takes requests signed by its keys and no
// longer by the keys of trust/requests, which it says to remove; before
// that, the file is read as ever. A key the root revoked is refused even
// while the file still lists it.
func TestRequestsTakeTheRootsOperators(t *testing.T) {
	tn := newTenant(t)
	alice, aliceOld := loadSigner(t, "acme"), loadSigner(t, "globex")
	tn.write(requests.TrustFile, "alice "+aliceOld.AuthorizedKey()+"\n")
	tn.commit("trust alice's old key for requests (the old file)")
	tn.render(options(t))

	rendered := func() string {
		return gittest.Git(t, tn.dir, "show", schemas.InstallRef("acme")+":"+schemas.RequestsFile)
	}

	// The old file alone: the old key's request is taken, the new key's
	// is not.
	b := gitobj.NewBatch()
	var head plumbing.Hash
	head = fileRequest(t, b, head, "old-1", "acme", aliceOld, renderTime.Add(-time.Minute))
	head = fileRequest(t, b, head, "new-1", "acme", alice, renderTime.Add(-time.Minute))
	res := renderRequests(t, tn, b, head)
	if got := rendered(); !strings.Contains(got, "old-1") || strings.Contains(got, "new-1") {
		t.Fatalf("before the root: requests.json\n%s", got)
	}
	for _, w := range res.Warnings {
		if strings.Contains(w, "deprecated") {
			t.Errorf("a tenant without a root is warned: %q", w)
		}
	}

	// The root names alice's new key as the operator's and revokes the
	// old one, which the file still lists.
	v := trusttest.Version{Version: 1, Expires: renderTime.AddDate(1, 0, 0), RootKeys: []string{"root-1"}, Threshold: 1,
		Render: []trusttest.RenderKey{{Name: "render-a"}}}
	c := v.Content(t)
	c.Roles.Operators = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "alice", Key: alice.AuthorizedKey()}}}
	c.Revocations = []schemas.TrustRevocation{{Fingerprint: ssh.FingerprintSHA256(aliceOld.PublicKey()), RevokedAt: renderTime.Add(-time.Hour).Format(time.RFC3339), Reason: "leaked"}}
	tn.write("trust/root/1.json", string(trusttest.Sign(t, c, "root-1")))
	tn.commit("trust root: operators")
	b = gitobj.NewBatch()
	head = plumbing.ZeroHash
	head = fileRequest(t, b, head, "old-2", "acme", aliceOld, renderTime.Add(-time.Minute))
	head = fileRequest(t, b, head, "new-2", "acme", alice, renderTime.Add(-time.Minute))
	res = renderRequests(t, tn, b, head)
	if got := rendered(); strings.Contains(got, "old-2") || !strings.Contains(got, "new-2") {
		t.Fatalf("with the root: requests.json\n%s", got)
	}
	warnings := strings.Join(res.Warnings, "\n")
	for _, want := range []string{"request old-2 to acme", "trust/requests on main is ignored: trust/root/1.json names the operators role"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings do not say %q:\n%s", want, warnings)
		}
	}
}
