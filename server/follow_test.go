package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUpstreamURL(t *testing.T) {
	for _, tc := range []struct {
		in, url string
		env     []string
	}{
		{"/srv/tenant.git", "/srv/tenant.git", nil},
		{"https://git.example.com/v/t.git", "https://git.example.com/v/t.git", nil},
		{"https://bot:s3cret@git.example.com/v/t.git", "https://git.example.com/v/t.git",
			[]string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic Ym90OnMzY3JldA=="}},
		{"ssh://git@git.example.com/v/t.git", "ssh://git@git.example.com/v/t.git", nil},
	} {
		u, env := upstreamURL(tc.in)
		if u != tc.url {
			t.Errorf("%s: url %s, want %s", tc.in, u, tc.url)
		}
		if diff := cmp.Diff(tc.env, env); diff != "" {
			t.Errorf("%s: env (-want +got):\n%s", tc.in, diff)
		}
	}
	if got := redactURL("fatal: https://bot:s3cret@git.example.com/x unreachable"); got != "fatal: https://REDACTED@git.example.com/x unreachable" {
		t.Errorf("redactURL: %s", got)
	}
}
