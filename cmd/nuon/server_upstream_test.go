package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestServerPrivateUpstream runs `nuon server --upstream` against a git
// host that requires a token, given with --git-token-file: it renders main
// and mirrors the rendered refs back, and the token is neither in its
// command line nor in its log. With a wrong token it stays unready and its
// log names the upstream and says it refused the credentials.
func TestServerPrivateUpstream(t *testing.T) {
	const token = "tok-cli-upstream-3f9a81"
	root := repoRoot()
	host := gittest.NewServer(t)
	upstreamDir := host.InitBare(t, "upstream.git")
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, upstreamDir, "main", src, "shop")
	host.RequireToken(token)
	upstream := host.URL("upstream.git")
	bin := nuonBinary(t)

	run := func(token string) (string, func() string) {
		work := t.TempDir()
		repo := filepath.Join(work, "tenant.git")
		gittest.InitBare(t, repo)
		tokenFile := filepath.Join(work, "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		srv := startServer(t, bin, nil, "--repo", repo, "--render-key", filepath.Join(root, "fixtures", "keys", "render"),
			"--upstream", upstream, "--git-token-file", tokenFile, "--poll-interval", "200ms")
		argv, _ := os.ReadFile("/proc/" + strconv.Itoa(srv.pid()) + "/cmdline")
		if strings.Contains(string(argv), token) {
			t.Errorf("the token is in the command line: %q", argv)
		}
		return srv.url, srv.log.String
	}

	base, log := run(token)
	ref := func(dir, name string) string {
		out, _ := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", name)
		return out
	}
	waitFor(t, "the rendered refs mirrored upstream", time.Minute, log, func() bool {
		r := ref(upstreamDir, schemas.InstallRef("acme"))
		return r != "" && ref(upstreamDir, schemas.RenderedRef) != ""
	})
	if resp, err := http.Get(base + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("readyz: %v %v", resp, err)
	}

	const wrong = "tok-wrong-0c1d"
	base, badLog := run(wrong)
	waitFor(t, "the refused fetch in the log", time.Minute, badLog, func() bool {
		return strings.Contains(badLog(), "refused the credentials")
	})
	if !strings.Contains(badLog(), "upstream "+upstream) {
		t.Errorf("the log does not name the upstream:\n%s", badLog())
	}
	if resp, err := http.Get(base + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz with a refused upstream: %v %v, want 503", resp, err)
	}
	for _, l := range []string{log(), badLog()} {
		if strings.Contains(l, token) || strings.Contains(l, wrong) {
			t.Errorf("a token is in the log:\n%s", l)
		}
	}
}
