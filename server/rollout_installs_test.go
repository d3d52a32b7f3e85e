package server

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
)

// TestRolloutInstallsRead: the controller reads again only the install
// files whose blob changed on main; what it holds is what a full read
// gives; a main whose changed file is wrong is refused and leaves what
// it holds as it was.
func TestRolloutInstallsRead(t *testing.T) {
	root := t.TempDir()
	dir, src := filepath.Join(root, "tenant.git"), filepath.Join(root, "src")
	gittest.InitBare(t, dir)
	if err := os.CopyFS(src, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(file, old, new string) {
		t.Helper()
		p := filepath.Join(src, file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s lacks %q", file, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var ri rolloutInstalls
	read := func(msg string, wantRead int, wantErr string) map[string]installSeen {
		t.Helper()
		main := plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, msg))
		st := repo.Storer()
		fsys, err := renderer.SourceFS(st, main)
		if err != nil {
			t.Fatal(err)
		}
		_, files, n, err := ri.read(context.Background(), st, main, fsys)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("%s: error %v, want %q", msg, err, wantErr)
			}
			return nil
		}
		if err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		if n != wantRead {
			t.Fatalf("%s: read %d files, want %d", msg, n, wantRead)
		}
		// What it holds is what reading every file gives.
		var full rolloutInstalls
		_, all, _, err := full.read(context.Background(), st, main, fsys)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(files) {
			t.Fatalf("%s: holds %d files, a full read %d", msg, len(files), len(all))
		}
		for name, seen := range all {
			got := files[name]
			if got.blob != seen.blob || got.deleted != seen.deleted || got.install.Channel != seen.install.Channel ||
				got.install.ID != seen.install.ID || len(got.install.Labels) != len(seen.install.Labels) {
				t.Fatalf("%s: %s holds %+v, a full read %+v", msg, name, got, seen)
			}
			for k, v := range seen.install.Labels {
				if got.install.Labels[k] != v {
					t.Fatalf("%s: %s label %s", msg, name, k)
				}
			}
		}
		ri.files = files
		// The list waves are assigned from, patched or not, is a full
		// read's, in the order of the file names.
		got, want := ri.fleet(), full.fleet()
		if len(got) != len(want) {
			t.Fatalf("%s: lists %d installs, a full read %d", msg, len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].Channel != want[i].Channel || !maps.Equal(got[i].Labels, want[i].Labels) {
				t.Fatalf("%s: lists %+v at %d, a full read %+v", msg, got[i], i, want[i])
			}
		}
		for i := 1; i < len(got); i++ {
			if got[i-1].ID+".yaml" >= got[i].ID+".yaml" {
				t.Fatalf("%s: %s listed before %s", msg, got[i-1].ID, got[i].ID)
			}
		}
		return files
	}
	read("tenant", 3, "")
	read("stable: database 1.1.0", 0, "")
	edit("channels/stable.yaml", "database: 1.0.0", "database: 1.1.0")
	read("stable: database 1.1.0", 0, "")
	if err := os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), append(mustRead(os.ReadFile(filepath.Join(src, "installs", "acme.yaml"))), "labels: {ring: canary}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if f := read("acme is a canary", 1, ""); f["acme.yaml"].install.Labels["ring"] != "canary" {
		t.Fatalf("acme: %+v", f["acme.yaml"])
	}
	edit("installs/initech.yaml", "channel: stable", "channel: stabel")
	read("initech on a channel that does not exist", 0, `installs/initech.yaml:1:10: channel: channel "stabel" does not exist`)
	if ri.files["initech.yaml"].install.Channel != "stable" {
		t.Fatalf("a refused main changed what is held: %+v", ri.files["initech.yaml"])
	}
	edit("installs/initech.yaml", "channel: stabel", "channel: beta")
	if f := read("initech on beta", 1, ""); f["initech.yaml"].install.Channel != "beta" {
		t.Fatalf("initech: %+v", f["initech.yaml"])
	}
	if err := os.Remove(filepath.Join(src, "installs", "globex.yaml")); err != nil {
		t.Fatal(err)
	}
	if f := read("globex leaves", 0, ""); len(f) != 2 {
		t.Fatalf("holds %d files after globex left", len(f))
	}
	// An install added beside a changed one, a file that is no install,
	// a main refused in between: each read holds what a full read does.
	hooli := strings.Replace(string(mustRead(os.ReadFile(filepath.Join(src, "installs", "acme.yaml")))), "acme", "hooli", -1)
	hooli = strings.Replace(hooli, "AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv", "AAAAILLAJZAvOoyn5mqGazlrDbIysrLTvQ/yQQcK7bU/Jp6v", 1)
	if err := os.WriteFile(filepath.Join(src, "installs", "hooli.yaml"), []byte(hooli), 0o644); err != nil {
		t.Fatal(err)
	}
	edit("installs/acme.yaml", "ring: canary", "ring: early")
	if f := read("hooli joins; acme is early", 2, ""); len(f) != 3 || f["hooli.yaml"].install.ID != "hooli" || f["acme.yaml"].install.Labels["ring"] != "early" {
		t.Fatalf("after hooli joined: %+v", f)
	}
	if err := os.WriteFile(filepath.Join(src, "installs", "README.md"), []byte("the fleet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	edit("installs/hooli.yaml", "channel: stable", "channel: nope")
	read("hooli on a channel that does not exist", 0, `channel "nope" does not exist`)
	edit("installs/hooli.yaml", "channel: nope", "channel: beta")
	if err := os.Remove(filepath.Join(src, "installs", "initech.yaml")); err != nil {
		t.Fatal(err)
	}
	if f := read("hooli on beta, a README, initech leaves", 2, ""); len(f) != 2 || f["hooli.yaml"].install.Channel != "beta" {
		t.Fatalf("after initech left: %+v", f)
	}
	if ri.tree == nil || ri.tree.index == nil {
		t.Fatal("holds no installs/ tree")
	}
	tree := ri.tree
	edit("channels/stable.yaml", "database: 1.1.0", "database: 1.0.0")
	read("stable: database 1.0.0", 0, "")
	if ri.tree != tree {
		t.Error("a main whose installs/ is the same tree read it again")
	}
}

func mustRead(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
