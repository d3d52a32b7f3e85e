package requests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

func rolloutSubmission(t testing.TB, signer string, r *schemas.RolloutRequest) schemas.SignedRequest {
	t.Helper()
	b := gitobj.NewBatch()
	h, err := FileRollout(b, r, key(t, signer))
	if err != nil {
		t.Fatal(err)
	}
	_, raw, _ := b.Get(h)
	data, _ := json.MarshalIndent(r, "", "  ")
	return schemas.SignedRequest{File: string(data) + "\n", Commit: string(raw)}
}

func rolloutReq(id, channel, action, requester string) *schemas.RolloutRequest {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &schemas.RolloutRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutRequest, ID: id, Channel: channel,
		Action: action, Requester: requester, Created: at, Deadline: at.Add(10 * time.Minute)}
}

func operatorTrust(t testing.TB, principal string) *signature.AllowedSigners {
	return &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{principal}, Key: key(t, "operator").PublicKey()}}}
}

// TestVerifyRollout: a rollout request verifies against the key that
// signed it; another key, a changed file, a requester that is not the
// signer, an install request or a bad request file is refused.
func TestVerifyRollout(t *testing.T) {
	trust := operatorTrust(t, "support")
	good := rolloutSubmission(t, "operator", rolloutReq("r-1", "stable", schemas.RolloutPause, "support"))
	r, h, err := VerifyRollout(good, trust)
	if err != nil || r.Channel != "stable" || r.Action != schemas.RolloutPause || h.IsZero() {
		t.Fatalf("good: %+v %s %v", r, h, err)
	}
	swapped := good
	swapped.File = strings.Replace(good.File, "pause", "abort", 1)
	install, _ := submission(t, request("r-2", "acme", "support"), [20]byte{})
	for _, tc := range []struct {
		name  string
		sub   schemas.SignedRequest
		trust *signature.AllowedSigners
		want  string
	}{
		{"no trust", good, nil, "no keys are trusted"},
		{"another key", rolloutSubmission(t, "acme", rolloutReq("r-1", "stable", schemas.RolloutPause, "support")), trust, "not signed by a trusted operator key"},
		{"requester", rolloutSubmission(t, "operator", rolloutReq("r-1", "stable", schemas.RolloutPause, "mallory")), trust, `requester "mallory" but signed by "support"`},
		{"swapped file", swapped, trust, "is not the tree of"},
		{"install request", install, trust, "is not rollouts/<channel>/<id>.json"},
		{"garbage", schemas.SignedRequest{File: "{}", Commit: "x"}, trust, "invalid request"},
	} {
		if _, _, err := VerifyRollout(tc.sub, tc.trust); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	bad := rolloutReq("r-1", "stable", "rollback", "support")
	if _, err := FileRollout(gitobj.NewBatch(), bad, key(t, "operator")); err == nil || !strings.Contains(err.Error(), "not pause, resume or abort") {
		t.Errorf("bad action: %v", err)
	}
	long := rolloutReq("r-1", "stable", schemas.RolloutAbort, "support")
	long.Deadline = long.Created.Add(2 * time.Hour)
	if _, err := FileRollout(gitobj.NewBatch(), long, key(t, "operator")); err == nil || !strings.Contains(err.Error(), "more than 1h0m0s") {
		t.Errorf("long deadline: %v", err)
	}
}

// FuzzVerifyRollout: whatever the bytes, VerifyRollout accepts only a
// request the trusted key signed, whose file is the signed one.
func FuzzVerifyRollout(f *testing.F) {
	good := rolloutSubmission(f, "operator", rolloutReq("r-1", "stable", schemas.RolloutPause, "support"))
	f.Add(good.File, good.Commit)
	f.Add("", "")
	f.Add(strings.Replace(good.File, "pause", "abort", 1), good.Commit)
	trust := operatorTrust(f, "support")
	f.Fuzz(func(t *testing.T, file, commit string) {
		r, _, err := VerifyRollout(schemas.SignedRequest{File: file, Commit: commit}, trust)
		if err != nil {
			if r != nil {
				t.Fatal("a request with an error")
			}
			return
		}
		if r.Requester != "support" || r.Validate() != nil {
			t.Fatalf("accepted %+v", r)
		}
	})
}
