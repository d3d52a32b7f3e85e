package renderer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// TestRenderRequests: the pending requests signed by an operator key that
// trust/requests on main lists go into their install's rendered state;
// an untrusted one, an expired one and one for an unknown install do not,
// and the render says why. An install whose source did not change is
// rendered when it has requests (incremental renders too).
func TestRenderRequests(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	alice, mallory := loadSigner(t, "acme"), loadSigner(t, "globex")
	tn.write(requests.TrustFile, "alice "+alice.AuthorizedKey()+"\n")
	tn.commit("trust alice for requests")
	tn.render(options(t))

	b := gitobj.NewBatch()
	var head plumbing.Hash
	head = fileRequest(t, b, head, "r-ok", "acme", alice, renderTime.Add(-time.Minute))
	head = fileRequest(t, b, head, "r-untrusted", "acme", mallory, renderTime.Add(-time.Minute))
	head = fileRequest(t, b, head, "r-old", "acme", alice, renderTime.Add(-2*time.Hour))
	head = fileRequest(t, b, head, "r-nobody", "nobody", alice, renderTime.Add(-time.Minute))
	res := renderRequests(t, tn, b, head)
	for _, in := range res.Installs {
		if want := map[bool]string{true: "changed", false: "unchanged"}[in.ID == "acme"]; string(in.Change) != want {
			t.Errorf("%s: %s, want %s", in.ID, in.Change, want)
		}
	}
	warnings := strings.Join(res.Warnings, "\n")
	for _, want := range []string{"request r-untrusted to acme", "not trusted", "requests to nobody dropped: no such install"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings do not say %q:\n%s", want, warnings)
		}
	}
	data := gittest.Git(t, tn.dir, "show", schemas.InstallRef("acme")+":"+schemas.RequestsFile)
	if err := schemas.ValidateJSON(schemas.SchemaInstallRequests, []byte(data)); err != nil {
		t.Fatal(err)
	}
	var got schemas.InstallRequests
	if err := json.Unmarshal([]byte(data), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Requests) != 1 {
		t.Fatalf("acme has %d requests, want 1:\n%s", len(got.Requests), data)
	}
	trust, _ := requestTrust(t, alice.AuthorizedKey())
	if req, err := requests.Verify(got.Requests[0], trust); err != nil || req.ID != "r-ok" {
		t.Fatalf("rendered request: %v %+v", err, req)
	}
}

func requestTrust(t *testing.T, key string) (*signature.AllowedSigners, error) {
	return signature.ParseAllowedSigners([]byte("alice " + key + "\n"))
}

// TestRequestsToNewInstall adds an install on main and files requests to
// it and to the installs whose files did not change: the render is a full
// one, and every request reaches its install, the new one's included,
// whatever order the requests are read in.
func TestRequestsToNewInstall(t *testing.T) {
	tn := newTenant(t)
	alice := loadSigner(t, "acme")
	tn.write(requests.TrustFile, "alice "+alice.AuthorizedKey()+"\n")
	tn.commit("trust alice for requests")
	tn.render(options(t))
	acme, err := os.ReadFile(filepath.Join(tn.src, "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tn.write("installs/newco.yaml", strings.Replace(string(acme), "acme.shop.example", "newco.shop.example", 1))
	tn.commit("add newco")

	b := gitobj.NewBatch()
	var head plumbing.Hash
	ids := []string{"acme", "globex", "initech", "newco"}
	for _, install := range ids {
		head = fileRequest(t, b, head, "r-"+install, install, alice, renderTime.Add(-time.Minute))
	}
	res := renderRequests(t, tn, b, head)
	if res.Incremental {
		t.Error("requests to installs whose files did not change rendered incrementally")
	}
	if len(res.Warnings) > 0 {
		t.Errorf("warnings: %q", res.Warnings)
	}
	for _, id := range ids {
		data := gittest.Git(t, tn.dir, "show", schemas.InstallRef(id)+":"+schemas.RequestsFile)
		if !strings.Contains(data, "r-"+id) {
			t.Errorf("%s's requests.json does not hold r-%s:\n%s", id, id, data)
		}
	}
}

// fileRequest files a request for an install's api logs, made at created
// and due an hour later, on top of head in b, and returns the new head.
func fileRequest(t *testing.T, b *gitobj.Batch, head plumbing.Hash, id, install string, s gitobj.Signer, created time.Time) plumbing.Hash {
	t.Helper()
	req := &schemas.Request{APIVersion: schemas.APIVersion, Kind: schemas.KindRequest, ID: id, Install: install,
		Type: schemas.RequestLogs, Component: "api", Requester: "alice", Created: created, Deadline: created.Add(time.Hour)}
	head, err := requests.File(b, req, head, s)
	if err != nil {
		t.Fatal(err)
	}
	return head
}

// renderRequests writes the requests filed in b, renders main with those
// up to head and applies the render.
func renderRequests(t *testing.T, tn *tenant, b *gitobj.Batch, head plumbing.Hash) *renderer.Result {
	t.Helper()
	r := tn.open()
	if err := b.Flush(r.Storer()); err != nil {
		t.Fatal(err)
	}
	opts := options(t)
	opts.Requests = head
	res, err := renderRepo(t.Context(), r, "main", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(t.Context(), r, res, res.Updates); err != nil {
		t.Fatal(err)
	}
	return res
}
