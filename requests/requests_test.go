package requests

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

func key(t testing.TB, name string) *signature.Signer {
	t.Helper()
	s, err := signature.LoadSigner("../fixtures/keys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var created = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func request(id, install, requester string) *schemas.Request {
	return &schemas.Request{APIVersion: schemas.APIVersion, Kind: schemas.KindRequest, ID: id, Install: install,
		Type: schemas.RequestDebug, Component: "api", Requester: requester, Created: created, Deadline: created.Add(time.Hour),
		Command: []string{"get", "pods"}}
}

// TestRead: requests signed by a trusted operator key whose requester is
// the key's principal are pending until their deadline; any other is
// dropped with the reason.
func TestRead(t *testing.T) {
	st := memory.NewStorage()
	alice, mallory := key(t, "acme"), key(t, "globex")
	trust, err := signature.ParseAllowedSigners([]byte("alice " + alice.AuthorizedKey() + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := gitobj.NewBatch()
	var head plumbing.Hash
	file := func(r *schemas.Request, s *signature.Signer) {
		if head, err = File(b, r, head, s); err != nil {
			t.Fatal(err)
		}
	}
	file(request("r-1", "acme", "alice"), alice)
	file(request("r-2", "acme", "alice"), mallory) // untrusted key
	file(request("r-3", "globex", "bob"), alice)   // requester is not the signer
	late := request("r-4", "acme", "alice")
	late.Created, late.Deadline = created.Add(-2*time.Hour), created.Add(-time.Hour)
	file(late, alice) // expired
	file(request("r-5", "globex", "alice"), alice)
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	filed, err := Read(st, head, trust)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range filed {
		reason := "ok"
		if f.Err != nil {
			reason = f.Err.Error()
			if !errors.Is(f.Err, ErrUntrusted) {
				t.Errorf("%s: %v is not ErrUntrusted", f.Request.ID, f.Err)
			}
		}
		got[f.Request.ID] = reason
	}
	if !strings.Contains(got["r-2"], "not trusted") || !strings.Contains(got["r-3"], `requester "bob" but signed by "alice"`) || got["r-1"] != "ok" || got["r-4"] != "ok" {
		t.Fatalf("read: %v", got)
	}
	pending := Pending(filed, created.Add(time.Minute))
	ids := map[string][]string{}
	for install, rs := range pending {
		for _, s := range rs {
			r, err := Verify(s, trust)
			if err != nil {
				t.Fatalf("a pending request does not verify: %v", err)
			}
			ids[install] = append(ids[install], r.ID)
		}
	}
	if diff := cmp.Diff(map[string][]string{"acme": {"r-1"}, "globex": {"r-5"}}, ids); diff != "" {
		t.Fatalf("pending (-want +got):\n%s", diff)
	}
	if err := Check(request("r-1", "acme", "alice"), "globex", created); err == nil || !strings.Contains(err.Error(), `for install "acme"`) {
		t.Fatalf("check another install: %v", err)
	}
	if err := Check(late, "acme", created); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("check expired: %v", err)
	}
}

// TestVerifyTampered: a file changed after signing, or a commit changed,
// does not verify.
func TestVerifyTampered(t *testing.T) {
	st := memory.NewStorage()
	alice := key(t, "acme")
	trust, _ := signature.ParseAllowedSigners([]byte("alice " + alice.AuthorizedKey() + "\n"))
	b := gitobj.NewBatch()
	h, err := File(b, request("r-1", "acme", "alice"), plumbing.ZeroHash, alice)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	filed, err := Read(st, h, trust)
	if err != nil || len(filed) != 1 || filed[0].Err != nil {
		t.Fatalf("read: %v %+v", err, filed)
	}
	s := filed[0].Signed
	for name, bad := range map[string]schemas.SignedRequest{
		"file":   {File: strings.Replace(s.File, `"pods"`, `"secrets"`, 1), Commit: s.Commit},
		"commit": {File: s.File, Commit: strings.Replace(s.Commit, "Asked by alice", "Asked by eve", 1)},
	} {
		if _, err := Verify(bad, trust); !errors.Is(err, ErrUntrusted) {
			t.Errorf("tampered %s: %v, want ErrUntrusted", name, err)
		}
	}
	if _, err := Verify(s, nil); !errors.Is(err, ErrUntrusted) {
		t.Errorf("no trust: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	alice := key(f, "acme")
	trust, _ := signature.ParseAllowedSigners([]byte("alice " + alice.AuthorizedKey() + "\n"))
	st := memory.NewStorage()
	b := gitobj.NewBatch()
	h, err := File(b, request("r-1", "acme", "alice"), plumbing.ZeroHash, alice)
	if err != nil {
		f.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		f.Fatal(err)
	}
	filed, _ := Read(st, h, trust)
	f.Add(filed[0].Signed.File, filed[0].Signed.Commit)
	f.Add("{}", "tree 0\n\nm\n")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, file, commit string) {
		r, err := Verify(schemas.SignedRequest{File: file, Commit: commit}, trust)
		if err != nil {
			return
		}
		if r.Requester != "alice" || r.Validate() != nil {
			t.Fatalf("accepted %+v", r)
		}
	})
}

// TestList: each request's state comes from the renderer's check, the
// install's status and its deadline.
func TestList(t *testing.T) {
	st := memory.NewStorage()
	alice, mallory := key(t, "acme"), key(t, "globex")
	trust, _ := signature.ParseAllowedSigners([]byte("alice " + alice.AuthorizedKey() + "\n"))
	b := gitobj.NewBatch()
	var head plumbing.Hash
	var err error
	for _, f := range []struct {
		id string
		s  *signature.Signer
	}{{"r-answered", alice}, {"r-refused", alice}, {"r-pending", alice}, {"r-dropped", mallory}} {
		if head, err = File(b, request(f.id, "acme", "alice"), head, f.s); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	filed, err := Read(st, head, trust)
	if err != nil {
		t.Fatal(err)
	}
	status := &schemas.Status{Requests: map[string]schemas.RequestState{
		"r-answered": {State: schemas.RequestAnswered, Answer: "answers/r-answered.txt"},
		"r-refused":  {State: schemas.RequestRefused, Reason: "turned off"},
	}}
	states := func(now time.Time) map[string]string {
		out := map[string]string{}
		for _, l := range List(filed, func(string) *schemas.Status { return status }, now) {
			out[l.ID] = l.State
		}
		return out
	}
	want := map[string]string{"r-answered": "answered", "r-refused": "refused", "r-pending": "pending", "r-dropped": "refused"}
	if diff := cmp.Diff(want, states(created)); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	want["r-pending"] = "expired"
	if diff := cmp.Diff(want, states(created.Add(2*time.Hour))); diff != "" {
		t.Errorf("states later (-want +got):\n%s", diff)
	}
}
