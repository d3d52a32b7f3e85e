package agent_test

import (
	"strings"
	"testing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/redact/redacttest"
	"nuon.dev/nuon/schemas"
)

// TestSecretsNeverReachGit fails a job that prints the install's secret as
// terraform does (HCL-escaped, word-wrapped in its frame) in its log and
// its error, and finds none of it in any object of the tenant repository:
// not in status.json, not in the commit message, not in any spelling.
func TestSecretsNeverReachGit(t *testing.T) {
	tests := []struct {
		name, secret string
	}{
		{"quotes and html characters", `lic-"k3y"-<&>-\-${x}`},
		{"spaces, word-wrapped", "the quick brown fox jumps over the lazy dog"},
		{"both", `a "quoted" <b>secret</b> that is long enough to wrap & more`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTenant(t)
			tn.setInstall("acme", tn.keys["acme"], "true", "0s") // b fails
			tn.commit("fail b")
			tn.renderMain()
			secretEnv := "NUON_SECRET_LEAK=" + tt.secret
			a := tn.agent("acme", func(c *agent.Config) {
				c.Environ = []string{secretEnv}
				c.Runner.(*jobs.Local).Env = append(c.Runner.(*jobs.Local).Env, secretEnv)
			})
			rep := a.reconcile(t)
			if got := rep.Status.Components["b"]; got.Phase != schemas.PhaseFailed || !strings.Contains(got.Error, redact.Marker) {
				t.Errorf("b = %+v, want Failed with the secret redacted", got)
			}
			texts := map[string]string{}
			for id, content := range redacttest.GitObjects(t, tn.bare) {
				texts["object "+id] = content
			}
			redacttest.NoLeaks(t, tt.secret, texts)
			msg := tn.git("log", "-1", "--format=%B", "refs/heads/nuon/status/acme")
			if !strings.Contains(msg, "failed: the component says no") || !strings.Contains(msg, redact.Marker) {
				t.Errorf("status commit message:\n%s", msg)
			}
		})
	}
}
