package gitproto

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gittest"
)

// installRef is the ref of install i in the fixtures.
func installRef(i int) plumbing.ReferenceName {
	return plumbing.ReferenceName(fmt.Sprintf("refs/heads/nuon/installs/install-%05d", i))
}

// fixture is a repository served by git's http-backend with a main branch
// of two commits, a tag, and install refs pointing at those commits in
// turn.
type fixture struct {
	srv     *gittest.Server
	dir     string // the bare repository
	url     string
	commits []plumbing.Hash // main's commits, oldest first
}

func newFixture(tb testing.TB, installs int) *fixture {
	tb.Helper()
	f := &fixture{srv: gittest.NewServer(tb)}
	f.dir = f.srv.InitBare(tb, "tenant.git")
	f.url = f.srv.URL("tenant.git")
	src := tb.TempDir()
	writeFiles(tb, src, map[string]string{
		"README.md":              "tenant\n",
		"installs/a/values.yaml": strings.Repeat("replicas: 1\n", 200),
		"installs/b/values.yaml": strings.Repeat("replicas: 2\n", 200),
	})
	f.commit(tb, src, "first")
	writeFiles(tb, src, map[string]string{"installs/a/values.yaml": strings.Repeat("replicas: 3\n", 200)})
	f.commit(tb, src, "second")
	var stdin strings.Builder
	for i := range installs {
		fmt.Fprintf(&stdin, "create %s %s\n", installRef(i), f.commits[i%2])
	}
	fmt.Fprintf(&stdin, "create refs/tags/v1 %s\n", f.commits[0])
	if _, err := gittest.Run(f.dir, []byte(stdin.String()), "update-ref", "--stdin"); err != nil {
		tb.Fatal(err)
	}
	gittest.Git(tb, f.dir, "pack-refs", "--all")
	f.srv.Reset()
	return f
}

// commit commits src as main's new tree.
func (f *fixture) commit(tb testing.TB, src, message string) plumbing.Hash {
	tb.Helper()
	h := plumbing.NewHash(gittest.CommitDir(tb, f.dir, "main", src, message))
	f.commits = append(f.commits, h)
	return h
}

func writeFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
