package gittest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestServerCloneAndPush(t *testing.T) {
	s := NewServer(t)
	bare := s.InitBare(t, "tenant.git")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c1 := CommitDir(t, bare, "main", src, "first")
	clone := filepath.Join(t.TempDir(), "clone")
	Git(t, "", "clone", "--quiet", s.URL("tenant.git"), clone)
	if got := Git(t, clone, "rev-parse", "HEAD"); got != c1 {
		t.Fatalf("cloned HEAD = %s, want %s", got, c1)
	}
	if s.Requests() == 0 || s.Bytes() == 0 {
		t.Fatalf("server counted %d requests, %d bytes", s.Requests(), s.Bytes())
	}
	Git(t, clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "--allow-empty", "-m", "second")
	Git(t, clone, "push", "--quiet", "origin", "HEAD:refs/heads/main")
	if got, want := Git(t, bare, "rev-parse", "main"), Git(t, clone, "rev-parse", "HEAD"); got != want {
		t.Fatalf("pushed main = %s, want %s", got, want)
	}
	s.Down()
	if _, err := Run(clone, nil, "fetch", "--quiet", "origin"); err == nil {
		t.Fatal("fetch from a down server succeeded")
	}
}
