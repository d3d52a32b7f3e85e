package schemas

import (
	"errors"
	"strings"
	"testing"
)

const goodRolloutRequest = `{"apiVersion":"nuon.dev/v1","kind":"RolloutRequest","id":"p-1","channel":"stable","action":"pause","reason":"error rate up","requester":"alice","created":"2030-01-01T00:00:00Z","deadline":"2030-01-01T01:00:00Z"}`

// TestDecodeRolloutRequest: a rollout request is read as an install's
// request is, against its JSON Schema first: a wrong field is named with
// the file, its line and column.
func TestDecodeRolloutRequest(t *testing.T) {
	const path = "rollouts/stable/p-1.json"
	for _, tt := range []struct {
		name, path, data, err string
	}{
		{"pause", path, goodRolloutRequest, ""},
		{"resume without reason", path, strings.Replace(strings.Replace(goodRolloutRequest, `"pause"`, `"resume"`, 1), `"reason":"error rate up",`, "", 1), ""},
		{"wrong folder", "rollouts/beta/p-1.json", goodRolloutRequest, "belong in rollouts/stable/p-1.json"},
		{"unknown action", path, strings.Replace(goodRolloutRequest, `"pause"`, `"skip"`, 1), path + `:1:92: action: must be one of pause, resume or abort, not "skip"`},
		{"unknown field", path, strings.Replace(goodRolloutRequest, `"reason"`, `"waves":[1],"reason"`, 1), path + `:1:100: waves: unknown field "waves"`},
		{"no requester", path, strings.Replace(goodRolloutRequest, `"requester":"alice",`, "", 1), "requester"},
		{"bad channel", "rollouts/Stable/p-1.json", strings.Replace(goodRolloutRequest, `"stable"`, `"Stable"`, 1), "channel"},
		{"an install's request", "requests/acme/r-1.json", goodRequest, "kind"},
		{"deadline over an hour", path, strings.Replace(goodRolloutRequest, "01:00:00Z", "02:00:00Z", 1), "more than 1h0m0s after created"},
		{"reason too long", path, strings.Replace(goodRolloutRequest, "error rate up", strings.Repeat("x", 1025), 1), "reason"},
		{"two documents", path, goodRolloutRequest + goodRolloutRequest, "invalid"},
		{"not JSON", path, "pause", path},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRolloutRequest(tt.path, []byte(tt.data))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if r.Channel != "stable" || r.Requester != "alice" {
					t.Fatalf("decoded %+v", r)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want ErrInvalidRequest mentioning %q", err, tt.err)
			}
		})
	}
}

func FuzzDecodeRolloutRequest(f *testing.F) {
	f.Add("rollouts/stable/p-1.json", []byte(goodRolloutRequest))
	f.Add("rollouts/../p.json", []byte(`{"id":"../x","channel":".."}`))
	f.Add("requests/acme/r-1.json", []byte(goodRequest))
	f.Add("x", []byte(`{} {}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		r, err := DecodeRolloutRequest(name, data)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted request fails Validate: %v", err)
		}
		if name != RolloutRequestPath(r.Channel, r.ID) || strings.ContainsAny(r.ID+r.Channel, "/.") {
			t.Fatalf("accepted %q of %q at %s", r.ID, r.Channel, name)
		}
	})
}
