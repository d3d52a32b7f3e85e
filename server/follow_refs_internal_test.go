package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// TestResolveRefs: resolveRefs gives each ref's commit as revParse does,
// for a ref to a commit, an annotated tag of a commit, a tag of a tree (by
// revParse, which fails: left out), a ref not there, and not the refs
// that only start like a name asked for (for-each-ref matches the refs
// under a name, which git keeps from beside a ref of that name).
func TestResolveRefs(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "r.git")
	gittest.InitBare(t, dir)
	when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	files := map[string][]byte{"a.txt": []byte("a\n")}
	c1 := strings.TrimSpace(gittest.FastImport(t, dir, schemas.MainRef, "", when, files))
	files["b.txt"] = []byte("b\n")
	c2 := strings.TrimSpace(gittest.FastImport(t, dir, "refs/heads/side", c1, when, files))
	tagOf := func(obj, typ string) string {
		out, err := gittest.Run(dir, []byte(fmt.Sprintf("object %s\ntype %s\ntag t\ntagger T <t@example.com> 1700000000 +0000\n\nt\n", obj, typ)), "mktag")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	tree := strings.TrimSpace(gittest.Git(t, dir, "rev-parse", c1+"^{tree}"))
	// git update-ref keeps anything but a commit out of refs/heads/: the
	// ref files are written as another writer might.
	for name, id := range map[string]string{requests.Ref: tagOf(c2, "commit"), schemas.ApprovalsRef: tagOf(tree, "tree")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(id+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, dir, "update-ref", "refs/heads/mainx", c2)
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/approvalsx", c2)
	for _, tc := range []struct {
		names []string
		want  map[string]plumbing.Hash
	}{
		{[]string{schemas.MainRef, requests.Ref, schemas.ApprovalsRef}, map[string]plumbing.Hash{
			schemas.MainRef: plumbing.NewHash(c1), requests.Ref: plumbing.NewHash(c2)}},
		{[]string{"refs/heads/side", "refs/heads/absent"}, map[string]plumbing.Hash{"refs/heads/side": plumbing.NewHash(c2)}},
	} {
		got, err := resolveRefs(ctx, dir, tc.names...)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tc.names, diff)
		}
		for _, name := range tc.names {
			h, err := revParse(ctx, dir, name)
			if g, ok := got[name]; ok != (err == nil) || ok && g != h {
				t.Errorf("%s: resolved %s %v, revParse %s %v", name, g, ok, h, err)
			}
		}
	}
}

func TestParseResolved(t *testing.T) {
	h1, h2 := strings.Repeat("1", 40), strings.Repeat("2", 40)
	out := "commit " + h1 + "   refs/heads/main\n" +
		"tag " + h2 + " commit " + h1 + " refs/heads/nuon/requests\n" +
		"tag " + h2 + " tree " + h1 + " refs/heads/nuon/approvals\n" +
		"blob " + h2 + "   refs/heads/b\n" +
		"commit " + h2 + "   refs/heads/main/x\n" +
		"commit " + h2 + "   refs/heads/main\n" + // a name twice: the first
		"commit nothex   refs/heads/c\n" +
		"garbage\n"
	found, other := parseResolved(out, []string{"refs/heads/main", "refs/heads/nuon/requests", "refs/heads/nuon/approvals", "refs/heads/b", "refs/heads/c", "refs/heads/d"})
	want := map[string]plumbing.Hash{"refs/heads/main": plumbing.NewHash(h1), "refs/heads/nuon/requests": plumbing.NewHash(h1)}
	if diff := cmp.Diff(want, found); diff != "" {
		t.Errorf("found (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"refs/heads/nuon/approvals", "refs/heads/b", "refs/heads/c"}, other); diff != "" {
		t.Errorf("other (-want +got):\n%s", diff)
	}
}

// FuzzParseResolved: any output is read without a panic, only names asked
// for come back, each once, found or other, never both.
func FuzzParseResolved(f *testing.F) {
	f.Add("commit "+strings.Repeat("1", 40)+"   refs/heads/main\n", "refs/heads/main")
	f.Add("tag "+strings.Repeat("2", 40)+" commit "+strings.Repeat("1", 40)+" refs/x\n", "refs/x")
	f.Fuzz(func(t *testing.T, out, name string) {
		found, other := parseResolved(out, []string{name, "refs/heads/main"})
		for n, h := range found {
			if n != name && n != "refs/heads/main" || h.IsZero() && !strings.Contains(out, strings.Repeat("0", 40)) {
				t.Fatalf("found %q %s", n, h)
			}
		}
		seen := map[string]bool{}
		for _, n := range other {
			if _, ok := found[n]; ok || seen[n] || n != name && n != "refs/heads/main" {
				t.Fatalf("other %q (found too, twice, or not asked)", n)
			}
			seen[n] = true
		}
	})
}
