package cli

import (
	"net/http"
	"os"
	"testing"

	"nuon.dev/nuon/internal/gitauth"
)

// TestGitAuthLeavesNoSecretInTheEnvironment: the credentials are read
// once, and the jobs the agent starts (which inherit its environment) do
// not get the token.
func TestGitAuthLeavesNoSecretInTheEnvironment(t *testing.T) {
	t.Setenv(gitauth.EnvToken, "tok-env-2718")
	t.Setenv(gitauth.EnvPassword, "pw-env-1618")
	g := &Globals{}
	for range 2 {
		a, err := g.GitAuth()
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "https://git.example.com/", nil)
		a.SetHeader(req)
		if got := req.Header.Get("Authorization"); got != "Bearer tok-env-2718" {
			t.Errorf("Authorization = %q, want the token from the environment", got)
		}
	}
	for _, k := range []string{gitauth.EnvToken, gitauth.EnvPassword} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("$%s = %q is still in the environment", k, v)
		}
	}
}
