package server

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckUpstream(t *testing.T) {
	for in, want := range map[string]string{
		"/srv/tenant.git":                              "",
		"https://git.example.com/v/t.git":              "",
		"ssh://git@git.example.com/v/t.git":            "",
		"git@git.example.com:v/t.git":                  "",
		"https://bot:s3cret@git.example.com/v/t.git":   "user information",
		"https://ghp_s3cret@git.example.com/v/t.git":   "user information",
		"http://bot:s3cret@127.0.0.1:8080/tenant.git/": "user information",
	} {
		err := checkUpstream(in)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("checkUpstream(%s) = %v, want %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error shows the secret: %v", err)
		}
	}
	if got := redactURL("fatal: https://bot:s3cret@git.example.com/x unreachable"); got != "fatal: https://REDACTED@git.example.com/x unreachable" {
		t.Errorf("redactURL: %s", got)
	}
}

func TestUpstreamError(t *testing.T) {
	refused := errors.New("git fetch: exit status 128: fatal: could not read Username for 'https://git.example.com': terminal prompts disabled")
	err := upstreamError("fetch main from", "https://git.example.com/v/t.git", nil, refused)
	if want := "fetch main from upstream https://git.example.com/v/t.git: it refused the credentials (no git credentials): git fetch"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
	if !errors.Is(err, refused) {
		t.Error("error does not wrap git's")
	}
	down := errors.New("git fetch: exit status 128: fatal: unable to access 'https://git.example.com/v/t.git/': Could not resolve host")
	if err := upstreamError("fetch main from", "ssh://git@git.example.com/v/t.git", nil, down); strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "upstream ssh://git.example.com/v/t.git:") {
		t.Errorf("error %q", err)
	}
}
