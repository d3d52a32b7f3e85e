package jobrun

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// artifactRoot builds a DirArtifacts root holding the artifact "api" and
// a few bad ones, and a directory beside it that they must not reach.
func artifactRoot(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "artifacts")
	files := map[string]string{
		"outside/secret":                 "do not copy",
		"artifacts/api/main.tf":          "resource {}\n",
		"artifacts/api/modules/db/db.tf": "module {}\n",
		"artifacts/shared/common.tf":     "locals {}\n",
		"artifacts/escape/ok.tf":         "",
		"artifacts/absolute/ok.tf":       "",
		"artifacts/dirlink/ok.tf":        "",
		"artifacts/fifo/ok.tf":           "",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "api", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink("../shared/common.tf", filepath.Join(root, "api", "common.tf")))
	must(os.Symlink("../../outside/secret", filepath.Join(root, "escape", "secret")))
	must(os.Symlink(filepath.Join(base, "outside", "secret"), filepath.Join(root, "absolute", "secret")))
	must(os.Symlink("../shared", filepath.Join(root, "dirlink", "shared")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo", "pipe"), 0o600))
	return root
}

func TestDirArtifactsExtract(t *testing.T) {
	t.Parallel()
	root := artifactRoot(t)
	tests := []struct {
		name string
		a    schemas.Artifact
	}{
		{"local", schemas.Artifact{Name: "module", Local: "123.dkr.ecr.us-east-1.amazonaws.com/nuon/api@" + digest, Source: "vendor.example/app/other@" + digest}},
		{"source", schemas.Artifact{Name: "module", Source: "vendor.example/app/api@" + digest}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "work")
			if err := (DirArtifacts{Root: root}).Extract(context.Background(), tt.a, dir); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"main.tf":          "-rw-r--r-- resource {}\n",
				"modules/db/db.tf": "-rw-r--r-- module {}\n",
				"common.tf":        "-rw-r--r-- locals {}\n",
				"run.sh":           "-rwxr-xr-x #!/bin/sh\n",
			}
			if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
				t.Errorf("extracted tree (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDirArtifactsRefuses(t *testing.T) {
	t.Parallel()
	root := artifactRoot(t)
	tests := []struct {
		name    string
		ref     string
		wantMsg string
	}{
		{"symlink out of the root", "r.example/escape@" + digest, "escape/secret: path escapes from parent"},
		{"absolute symlink", "r.example/absolute@" + digest, "absolute/secret: path escapes from parent"},
		{"symlink to a directory", "r.example/dirlink@" + digest, "dirlink/shared: symbolic link to a directory"},
		{"fifo", "r.example/fifo@" + digest, "fifo/pipe: not a regular file or directory"},
		{"dot dot", "r.example/x/..@" + digest, `no repository name in "r.example/x/..@`},
		{"no reference", "", `no repository name in ""`},
		{"missing", "r.example/nothing@" + digest, "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			err := (DirArtifacts{Root: root}).Extract(context.Background(), schemas.Artifact{Name: "m", Local: tt.ref}, dir)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %v, want one with %q", err, tt.wantMsg)
			}
			for path, content := range tree(t, dir) {
				if strings.Contains(content, "do not copy") {
					t.Errorf("%s holds the file outside the root", path)
				}
			}
		})
	}
}

func TestDirArtifactsHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := (DirArtifacts{Root: artifactRoot(t)}).Extract(ctx, schemas.Artifact{Name: "m", Local: "r.example/api@" + digest}, t.TempDir())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// tree returns every regular file under dir with its mode and content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = info.Mode().String() + " " + string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
