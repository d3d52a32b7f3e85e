package buildreq_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

var now = time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)

func keys(t testing.TB) (ci, other *signature.Signer, trusted *signature.AllowedSigners) {
	t.Helper()
	var err error
	if ci, err = signature.LoadSigner("../../fixtures/keys/ci"); err != nil {
		t.Fatal(err)
	}
	if other, err = signature.LoadSigner("../../fixtures/keys/operator"); err != nil {
		t.Fatal(err)
	}
	if trusted, err = signature.LoadAllowedSigners("../../fixtures/keys/builds.allowed"); err != nil {
		t.Fatal(err)
	}
	return ci, other, trusted
}

func good() schemas.BuildRequest {
	return schemas.BuildRequest{ID: "api-1", Component: "api", Repository: "https://git.vendor.example/shop.git",
		Commit: strings.Repeat("0a", 20), Version: "2.5.0", Requester: "vendor-ci", Created: now, Expires: now.Add(time.Hour)}
}

func TestVerifyRequest(t *testing.T) {
	ci, other, trusted := keys(t)
	sign := func(r schemas.BuildRequest, k *signature.Signer) schemas.SignedBuildRequest {
		sub, err := buildreq.SignRequest(r, k)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	with := func(f func(*schemas.BuildRequest)) schemas.BuildRequest { r := good(); f(&r); return r }
	// A request SignRequest refuses to sign, signed by hand.
	rawSign := func(r schemas.BuildRequest) schemas.SignedBuildRequest {
		data, _ := json.Marshal(r)
		sig, err := ci.Sign(strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		return schemas.SignedBuildRequest{Request: data, Signature: string(sig)}
	}
	tampered := sign(good(), ci)
	tampered.Request = []byte(strings.Replace(string(tampered.Request), "2.5.0", "2.5.1", 1))
	extra := sign(good(), ci)
	extra.Request = append(extra.Request[:len(extra.Request)-1], []byte(`,"x":1}`)...)
	extraSigned := rawSign(good())
	extraSigned.Request = extra.Request
	sig, _ := ci.Sign(strings.NewReader(string(extra.Request)))
	extraSigned.Signature = string(sig)

	for _, tc := range []struct {
		name    string
		sub     schemas.SignedBuildRequest
		trusted *signature.AllowedSigners
		want    string
	}{
		{"good", sign(good(), ci), trusted, ""},
		{"untrusted key", sign(good(), other), trusted, "not trusted"},
		{"no trust list", sign(good(), ci), nil, "no key is trusted"},
		{"tampered", tampered, trusted, "does not match"},
		{"no signature", schemas.SignedBuildRequest{Request: sign(good(), ci).Request}, trusted, "malformed"},
		{"unknown field", extraSigned, trusted, "unknown field"},
		{"requester is another", sign(with(func(r *schemas.BuildRequest) { r.Requester = "mallory" }), ci), trusted, `names requester "mallory"`},
		{"expired", sign(with(func(r *schemas.BuildRequest) { r.Created, r.Expires = now.Add(-2*time.Hour), now.Add(-time.Hour) }), ci), trusted, "expired"},
		{"from the future", sign(with(func(r *schemas.BuildRequest) { r.Created, r.Expires = now.Add(time.Hour), now.Add(2*time.Hour) }), ci), trusted, "in the future"},
		{"short commit", rawSign(with(func(r *schemas.BuildRequest) { r.Commit = "abc" })), trusted, "full 40-hex"},
		{"bad id", rawSign(with(func(r *schemas.BuildRequest) { r.ID = "../etc" })), trusted, "build request id"},
		{"lives too long", rawSign(with(func(r *schemas.BuildRequest) { r.Expires = now.Add(48 * time.Hour) })), trusted, "lives longer"},
		{"huge", schemas.SignedBuildRequest{Request: []byte(strings.Repeat(" ", schemas.MaxBuildRequest+1))}, trusted, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := buildreq.VerifyRequest(tc.sub, tc.trusted, now)
			if tc.want == "" {
				if err != nil || r.ID != "api-1" {
					t.Fatalf("good request: %v %v", r, err)
				}
				return
			}
			if !errors.Is(err, buildreq.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}

func TestLedger(t *testing.T) {
	l := buildreq.Ledger{Dir: t.TempDir()}
	for _, id := range []string{"api-1", "api-2"} {
		if resumed, err := l.Take(id); err != nil || resumed {
			t.Fatalf("take %s: resumed %v, %v", id, resumed, err)
		}
	}
	// A take that never finished (the agent died): another agent process
	// on the same directory takes it up, the release on main guards it.
	if resumed, err := (buildreq.Ledger{Dir: l.Dir}).Take("api-1"); err != nil || !resumed {
		t.Errorf("an unfinished take: resumed %v, %v; want it taken up", resumed, err)
	}
	// A failed one is spent, after a restart too.
	if err := l.Fail("api-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := (buildreq.Ledger{Dir: l.Dir}).Take("api-2"); !errors.Is(err, buildreq.ErrReplayed) || !errors.Is(err, buildreq.ErrRefused) {
		t.Errorf("a failed id was taken again: %v", err)
	}
	entries, _ := os.ReadDir(l.Dir)
	if len(entries) != 2 {
		t.Errorf("ledger holds %d ids, want 2", len(entries))
	}
}

// FuzzVerifyRequest: whatever the bytes, a request verifies only when the
// trusted key signed exactly them and they are a valid request.
func FuzzVerifyRequest(f *testing.F) {
	ci, _, trusted := keys(f)
	sub, err := buildreq.SignRequest(good(), ci)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(sub.Request), sub.Signature)
	f.Add([]byte(`{"id":"x"}`), sub.Signature)
	f.Add([]byte(`{}`), "")
	f.Fuzz(func(t *testing.T, data []byte, sig string) {
		r, err := buildreq.VerifyRequest(schemas.SignedBuildRequest{Request: data, Signature: sig}, trusted, now)
		if err != nil {
			if !errors.Is(err, buildreq.ErrRefused) {
				t.Fatalf("an error that is not a refusal: %v", err)
			}
			return
		}
		if string(data) != string(sub.Request) || r.Validate() != nil {
			t.Fatalf("verified bytes that were not signed: %q", data)
		}
	})
}
