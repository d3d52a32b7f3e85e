package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// trustBuilds puts fixtures/keys' build trust lists on main.
func (e *env) trustBuilds() {
	e.t.Helper()
	work := filepath.Join(e.t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	for file, from := range map[string]string{schemas.BuildTrustFile: "builds.allowed", schemas.BuildAgentTrustFile: "build-agents.allowed"} {
		data, err := os.ReadFile(filepath.Join(fixtureKeys, from))
		if err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, file), data, 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	e.mustGit(work, "add", "-A")
	e.mustGit(work, "commit", "--quiet", "-m", "trust builds")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	if err := e.srv.Sync(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func buildRequest(t *testing.T, key *signature.Signer, id, component string) schemas.SignedBuildRequest {
	t.Helper()
	now := time.Now()
	sub, err := buildreq.SignRequest(schemas.BuildRequest{ID: id, Component: component, Repository: "https://git.vendor.example/shop.git",
		Commit: strings.Repeat("ab", 20), Version: "1.0.0", Requester: "vendor-ci", Created: now, Expires: now.Add(time.Hour)}, key)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestBuilds files a request, has a build agent take and answer it, and
// reads the answer; then tries what an attacker would.
func TestBuilds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ci, _ := loadKey(t, "ci")
	agentKey, _ := loadKey(t, "build-agent")
	operator, _ := loadKey(t, "operator")
	vendor := buildreq.NewClient(e.http.URL, ci)
	agent := buildreq.NewClient(e.http.URL, agentKey)

	// Before main lists any key, nobody is trusted.
	if _, err := vendor.File(ctx, buildRequest(t, ci, "early", "network")); err == nil || !strings.Contains(err.Error(), "not trusted for builds") {
		t.Fatalf("a request before trust/builds: %v", err)
	}
	e.trustBuilds()

	if sub, err := agent.Next(ctx, 0); err != nil || sub != nil {
		t.Fatalf("next on an empty queue: %v %v", sub, err)
	}
	st, err := vendor.File(ctx, buildRequest(t, ci, "b1", "network"))
	if err != nil || st.State != schemas.BuildQueued || st.Requester != "vendor-ci" {
		t.Fatalf("file: %+v %v", st, err)
	}
	// A long poll started before the request wakes when it is filed.
	got := make(chan *schemas.SignedBuildRequest, 1)
	go func() {
		sub, err := agent.Next(ctx, 10)
		if err != nil {
			t.Error(err)
		}
		got <- sub
	}()
	sub := <-got
	if sub == nil || !strings.Contains(string(sub.Request), `"id":"b1"`) {
		t.Fatalf("next: %v", sub)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		res, _ := json.Marshal(map[string]string{"digest": "sha256:" + strings.Repeat("0", 64)})
		if err := agent.Answer(ctx, "b1", schemas.BuildOutcome{Result: res}); err != nil {
			t.Error(err)
		}
	}()
	st, err = vendor.Status(ctx, "b1", 10)
	if err != nil || st.State != schemas.BuildSucceeded || st.Agent != "build-agent-1" || st.Finished == nil || len(st.Result) == 0 {
		t.Fatalf("status after the answer: %+v %v", st, err)
	}

	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"replayed request", func() error { _, err := vendor.File(ctx, buildRequest(t, ci, "b1", "network")); return err }, "replay"},
		{"unknown component", func() error { _, err := vendor.File(ctx, buildRequest(t, ci, "b2", "payments")); return err }, `no component "payments"`},
		{"untrusted key", func() error {
			_, err := buildreq.NewClient(e.http.URL, operator).File(ctx, buildRequest(t, operator, "b3", "network"))
			return err
		}, "not trusted for builds"},
		{"signed by another key than the HTTP request", func() error {
			_, err := buildreq.NewClient(e.http.URL, ci).File(ctx, buildRequest(t, agentKey, "b4", "network"))
			return err
		}, "not trusted"},
		{"vendor CI takes requests", func() error { _, err := vendor.Next(ctx, 0); return err }, "build-agents on main does not list it"},
		{"build agent files requests", func() error { _, err := agent.File(ctx, buildRequest(t, agentKey, "b5", "network")); return err }, "trust/builds on main does not list it"},
		{"answer again", func() error { return agent.Answer(ctx, "b1", schemas.BuildOutcome{Error: "x"}) }, "not being built"},
		{"answer a request nobody took", func() error {
			if _, err := vendor.File(ctx, buildRequest(t, ci, "b6", "database")); err != nil {
				return err
			}
			return agent.Answer(ctx, "b6", schemas.BuildOutcome{Error: "x"})
		}, "not being built"},
		{"answer an unknown request", func() error { return agent.Answer(ctx, "nope", schemas.BuildOutcome{}) }, "no build request nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, buildreq.ErrServer) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	// The request refused for its component was never queued: the next
	// one taken is b6.
	if sub, err := agent.Next(ctx, 0); err != nil || sub == nil || !strings.Contains(string(sub.Request), `"id":"b6"`) {
		t.Errorf("next after the refusals: %v %v", sub, err)
	}
	if sub, err := agent.Next(ctx, 0); err != nil || sub != nil {
		t.Errorf("a refused request was queued: %v %v", sub, err)
	}
}
