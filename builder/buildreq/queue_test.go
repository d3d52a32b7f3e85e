package buildreq_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/schemas"
)

func goodRecord(t testing.TB) ([]byte, []byte) {
	ci, _, _ := keys(t)
	sub, err := buildreq.SignRequest(good(), ci)
	if err != nil {
		t.Fatal(err)
	}
	r := good()
	until := now.Add(time.Minute)
	req, _ := json.Marshal(sub)
	st, _ := json.Marshal(schemas.BuildStatus{ID: r.ID, State: schemas.BuildRunning, Component: r.Component, Commit: r.Commit, Version: r.Version,
		Requester: r.Requester, Agent: "build-agent-1", Attempt: 1, LeaseSeconds: 60, LeaseUntil: &until})
	return req, st
}

func TestParseRecord(t *testing.T) {
	req, st := goodRecord(t)
	id := good().ID
	if _, err := buildreq.ParseRecord(id, req, st); err != nil {
		t.Fatalf("a good record: %v", err)
	}
	edit := func(from, to string) []byte { return []byte(strings.Replace(string(st), from, to, 1)) }
	for _, tc := range []struct {
		name    string
		id      string
		req, st []byte
		want    string
	}{
		{"another id", "other", req, st, "not \"other\""},
		{"unknown state", id, req, edit(`"state":"building"`, `"state":"done"`), "unknown state"},
		{"building without a lease", id, req, edit(`"leaseSeconds":60,`, ``), "without an agent and a lease"},
		{"too many attempts", id, req, edit(`"attempt":1`, `"attempt":9`), "attempt 9"},
		{"state of another component", id, req, edit(`"component":"api"`, `"component":"network"`), "does not match"},
		{"unknown field", id, req, edit(`{`, `{"x":1,`), "unknown field"},
		{"trailing data", id, req, append(append([]byte{}, st...), []byte(" {}")...), "trailing data"},
		{"not a request", id, []byte(`{"request":{"id":"x"},"signature":""}`), st, "request.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := buildreq.ParseRecord(tc.id, tc.req, tc.st); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// FuzzParseRecord: whatever a queue ref holds, a record parses only when
// both files are of the id and the state is a known one with its fields.
func FuzzParseRecord(f *testing.F) {
	req, st := goodRecord(f)
	f.Add("api-1", req, st)
	f.Add("x", []byte(`{}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, id string, req, st []byte) {
		rec, err := buildreq.ParseRecord(id, req, st)
		if err != nil {
			return
		}
		switch s := rec.Status; {
		case s.ID != id:
			t.Fatalf("a record of %q parsed as %q", s.ID, id)
		case s.State == schemas.BuildRunning && (s.Agent == "" || s.LeaseUntil == nil):
			t.Fatalf("building without a lease: %+v", s)
		case s.State != schemas.BuildQueued && s.State != schemas.BuildRunning && s.State != schemas.BuildSucceeded && s.State != schemas.BuildFailed:
			t.Fatalf("unknown state %q", s.State)
		}
	})
}

func TestCheckSource(t *testing.T) {
	src, err := buildreq.ParseSources([]byte("components:\n  network:\n    - repository: https://git.example/a.git/\n      refs: [refs/tags/v*]\n    - repository: https://git.example/a.git\n      refs: [refs/heads/main]\n  api:\n    - repository: https://git.example/b.git\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		component, repo, ref string
		ok                   bool
	}{
		{"network", "https://git.example/a.git", "refs/tags/v1.2", true},
		{"network", "https://git.example/a.git", "refs/heads/main", true},
		{"network", "https://git.example/a.git", "refs/heads/dev", false},
		{"network", "https://git.example/a.git", "", false},
		{"network", "https://git.example/b.git", "refs/heads/main", false},
		{"api", "https://git.example/b.git", "", true},
		{"api", "https://git.example/b.git", "refs/heads/anything", true},
		{"api", "https://git.example/b.git.evil", "", false},
		{"database", "https://git.example/a.git", "refs/heads/main", false},
	} {
		r := good()
		r.Component, r.Repository, r.Ref = tc.component, tc.repo, tc.ref
		err := buildreq.CheckSource(src, &r)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, buildreq.ErrRefused)) {
			t.Errorf("%s from %s at %q: %v, want allowed %v", tc.component, tc.repo, tc.ref, err, tc.ok)
		}
	}
	for _, bad := range []string{"components:\n  a:\n    - refs: [refs/heads/main]\n", "components:\n  a:\n    - repository: r\n      refs: [main]\n", "components:\n  a:\n    - repository: r\n      refs: ['refs/[']\n", "other: 1\n"} {
		if _, err := buildreq.ParseSources([]byte(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

// FuzzParseSources: a file parses or fails, never panics, and every
// source it keeps names a repository.
func FuzzParseSources(f *testing.F) {
	f.Add([]byte("components:\n  network:\n    - repository: r\n      refs: [refs/heads/main]\n"))
	f.Add([]byte("components: {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := buildreq.ParseSources(data)
		if err != nil {
			return
		}
		for c, list := range s.Components {
			for _, src := range list {
				if strings.TrimSpace(src.Repository) == "" {
					t.Fatalf("component %s: a source without a repository", c)
				}
			}
		}
	})
}
