package renderer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// fmtUpdates lists the refs a render moves.
func fmtUpdates(res *renderer.Result) string {
	var b strings.Builder
	for _, u := range res.Updates {
		b.WriteString(u.Name.String() + "\n")
	}
	return b.String()
}

// installUpdates counts the install refs a render moves.
func installUpdates(res *renderer.Result) int {
	n := 0
	for _, u := range res.Updates {
		if strings.HasPrefix(u.Name.String(), schemas.InstallRefPrefix) {
			n++
		}
	}
	return n
}

// rootVersion is version v of the tests' root: root keys root-1..3, two
// of them needed, and the given render keys.
func rootVersion(v int64, render ...string) trusttest.Version {
	tv := trusttest.Version{Version: v, Expires: renderTime.AddDate(1, 0, 0),
		RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2}
	for _, n := range render {
		tv.Render = append(tv.Render, trusttest.RenderKey{Name: n})
	}
	return tv
}

// TestRenderCarriesTheTrustRoot: the versions of the root on main are
// copied, byte for byte, into every install's tree; an install whose root
// and files did not change gets no commit; a new version gives every
// install exactly one new commit; a version that does not chain, or a
// chain with no version 1, fails the render and moves no ref.
func TestRenderCarriesTheTrustRoot(t *testing.T) {
	tn := newTenant(t)
	opts := options(t)
	opts.Signer = trusttest.Key(t, "render-a")
	v1 := rootVersion(1, "render-a").File(t, "root-1", "root-2")
	tn.write("trust/root/1.json", string(v1))
	tn.commit("trust root version 1")
	res := tn.render(opts)
	ids := []string{"acme", "globex", "initech"}
	for _, id := range ids {
		ref := schemas.InstallRef(id)
		if got := gittest.Git(t, tn.dir, "show", ref+":trust/root/1.json"); got != strings.TrimSpace(string(v1)) {
			t.Errorf("%s carries trust/root/1.json:\n%s\nwant the file on main", id, got)
		}
	}
	if installUpdates(res) != len(ids) {
		t.Fatalf("first render moved %d install refs, want %d", installUpdates(res), len(ids))
	}

	if res := tn.render(opts); len(res.Updates) != 0 {
		t.Errorf("render of the same main moved %v, want nothing", res.Updates)
	}
	tn.edit("installs/acme.yaml", "cidr: 10.10.0.0/16", "cidr: 10.13.0.0/16")
	tn.commit("move acme")
	res = tn.render(opts)
	if installUpdates(res) != 1 || !strings.Contains(fmtUpdates(res), "/acme") {
		t.Errorf("a change to acme alone moved %v, want acme's ref only", res.Updates)
	}
	gens := map[string]string{}
	for _, id := range ids {
		gens[id] = gittest.Git(t, tn.dir, "log", "-1", "--format=%(trailers:key=Nuon-Generation,valueonly)", schemas.InstallRef(id))
	}

	// Version 2 adds a render key: every install carries it in one commit,
	// still signed by the key in force.
	v2 := rootVersion(2, "render-a", "render-b").File(t, "root-1", "root-3")
	tn.write("trust/root/2.json", string(v2))
	tn.commit("trust root version 2: render-b")
	res = tn.render(opts)
	if installUpdates(res) != len(ids) {
		t.Fatalf("new root version moved %d install refs, want every install's (%d)", installUpdates(res), len(ids))
	}
	for _, in := range res.Installs {
		if in.Change != renderer.Changed {
			t.Errorf("%s: %s, want changed", in.ID, in.Change)
		}
	}
	for _, id := range ids {
		ref := schemas.InstallRef(id)
		if got := gittest.Git(t, tn.dir, "show", ref+":trust/root/2.json"); got != strings.TrimSpace(string(v2)) {
			t.Errorf("%s does not carry version 2", id)
		}
		if got := gittest.Git(t, tn.dir, "ls-tree", "--name-only", ref+":trust/root"); got != "1.json\n2.json" {
			t.Errorf("%s carries %q under trust/root", id, got)
		}
		gen := gittest.Git(t, tn.dir, "log", "-1", "--format=%(trailers:key=Nuon-Generation,valueonly)", ref)
		if gen == gens[id] {
			t.Errorf("%s: generation %s did not move with the root", id, gen)
		}
	}

	// The renderer rotated to render-b keeps its history: no install is
	// replaced, and nothing moves without a change.
	opts.Signer = trusttest.Key(t, "render-b")
	if res := tn.render(opts); len(res.Updates) != 0 || len(res.Warnings) != 0 {
		t.Errorf("render with the new key moved %v, warned %q; want nothing", res.Updates, res.Warnings)
	}

	for _, tt := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"below threshold", map[string][]byte{"trust/root/3.json": rootVersion(3, "render-b").File(t, "root-1")}, "too few root signatures"},
		{"skips a version", map[string][]byte{"trust/root/4.json": rootVersion(4, "render-b").File(t, "root-1", "root-2")}, "skips ahead"},
		{"signed by strangers", map[string][]byte{"trust/root/3.json": rootVersion(3, "render-b").File(t, "x-1", "x-2")}, "too few root signatures"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for name, data := range tt.files {
				tn.write(name, string(data))
			}
			tn.commit(tt.name)
			before := gittest.Git(t, tn.dir, "for-each-ref", "refs/heads/nuon")
			_, err := renderRepo(context.Background(), tn.open(), "main", opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render: %v, want an error about %q", err, tt.want)
			}
			if after := gittest.Git(t, tn.dir, "for-each-ref", "refs/heads/nuon"); after != before {
				t.Errorf("refs moved:\n%s\n%s", before, after)
			}
			for name := range tt.files {
				tn.remove(name)
			}
			tn.commit("undo " + tt.name)
		})
	}
}

// TestRenderWarnsOfTheRoot: an expired newest version, or a render key the
// root does not name, still renders (main is what it is) but says that
// agents will refuse it.
func TestRenderWarnsOfTheRoot(t *testing.T) {
	tn := newTenant(t)
	opts := options(t)
	opts.Signer = trusttest.Key(t, "render-z")
	v := rootVersion(1, "render-a")
	v.Expires = renderTime.Add(-time.Hour)
	tn.write("trust/root/1.json", string(v.File(t, "root-1", "root-2")))
	tn.commit("an expired root")
	res := tn.render(opts)
	all := strings.Join(res.Warnings, "\n")
	for _, want := range []string{"trust/root/1.json expired at", "the render key is not authorized by trust/root/1.json"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
}
