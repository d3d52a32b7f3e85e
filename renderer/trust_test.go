package renderer_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// TestRenderReplacesWhatItDidNotSign moves one install ref to a commit the
// renderer did not sign, as a careless or hostile writer of the tenant
// repository could: the render still writes every other install, reports
// that one, and replaces it with a signed commit whose generation is above
// every one it issued, never one read from the foreign commit.
func TestRenderReplacesWhatItDidNotSign(t *testing.T) {
	huge := strconv.FormatInt(1<<63-1, 10)
	tests := []struct {
		name string
		// move returns what to point globex's ref at, given the tenant.
		move func(t *testing.T, tn *tenant, ref string) string
	}{
		{"unsigned with a junk generation", func(t *testing.T, tn *tenant, ref string) string {
			return gittest.Git(t, tn.dir, "commit-tree", ref+"^{tree}", "-p", ref, "-m", "x\n\nNuon-Install: globex\nNuon-Generation: banana")
		}},
		{"unsigned with a huge generation", func(t *testing.T, tn *tenant, ref string) string {
			return gittest.Git(t, tn.dir, "commit-tree", ref+"^{tree}", "-p", ref, "-m", "x\n\nNuon-Install: globex\nNuon-Generation: "+huge)
		}},
		{"reset to an older commit the renderer signed", func(t *testing.T, tn *tenant, ref string) string {
			return gittest.Git(t, tn.dir, "rev-parse", ref+"^")
		}},
		{"signed by another install's key", func(t *testing.T, tn *tenant, ref string) string {
			return signedCommit(t, tn, "acme", ref, "x\n\nNuon-Install: globex\nNuon-Generation: 99\n")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTenant(t)
			tn.render(options(t))
			// A second generation for everyone, so that there is an older
			// signed commit to reset to.
			tn.edit("nuon.yaml", "timeout: 5m", "timeout: 6m")
			tn.commit("slower api rollout")
			tn.render(options(t))
			ref := plumbing.ReferenceName(schemas.InstallRef("globex")).String()
			issued := gittest.Git(t, tn.dir, "rev-parse", ref)
			bad := tt.move(t, tn, ref)
			gittest.Git(t, tn.dir, "update-ref", ref, bad)

			// A change for acme, so that the render has work besides.
			tn.edit("installs/acme.yaml", "cidr: 10.10.0.0/16", "cidr: 10.13.0.0/16")
			tn.commit("move acme")
			res := tn.render(options(t))
			got := installsByID(res)
			if got["acme"].Change != renderer.Changed {
				t.Errorf("acme: %s, want changed", got["acme"].Change)
			}
			g := got["globex"]
			if g.Change != renderer.Replaced || g.Generation != 3 || !strings.Contains(g.Replaced, bad) {
				t.Fatalf("globex: %+v, want replaced at generation 3 naming %s", g, bad)
			}
			if head := gittest.Git(t, tn.dir, "rev-parse", ref); head != g.Commit.String() {
				t.Errorf("%s at %s, want %s", ref, head, g.Commit)
			}
			if first := gittest.Git(t, tn.dir, "rev-parse", ref+"^1"); first != issued {
				t.Errorf("first parent %s, want the last commit the renderer signed, %s", first, issued)
			}
			if got := trailer(t, tn.dir, ref, schemas.TrailerGeneration); got != "3" {
				t.Errorf("generation trailer %s, want 3", got)
			}
			checkConsistent(t, tn.dir)
			if res := tn.render(options(t)); res.ChangedCount() != 0 {
				t.Errorf("the next render changed %d installs", res.ChangedCount())
			}
		})
	}
}

// TestRenderRecreatesDeletedRef: an install ref deleted by someone comes
// back with a generation above the last one issued.
func TestRenderRecreatesDeletedRef(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	ref := plumbing.ReferenceName(schemas.InstallRef("initech")).String()
	gittest.Git(t, tn.dir, "update-ref", "-d", ref)
	res := tn.render(options(t))
	if in := installsByID(res)["initech"]; in.Change != renderer.Replaced || in.Generation != 2 {
		t.Errorf("initech: %+v, want replaced at generation 2", in)
	}
}

// TestRenderForgedRenderedRef: a rendered ref moved to a commit the
// renderer did not sign is not trusted: the render continues from its own
// newest rendered commit, says so, and keeps issuing higher generations.
func TestRenderForgedRenderedRef(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	// A forged rendered commit whose tree claims nothing was issued.
	empty := gittest.Git(t, tn.dir, "hash-object", "-t", "tree", "-w", "--stdin")
	forged := gittest.Git(t, tn.dir, "commit-tree", empty, "-p", rendered, "-m", "forged")
	gittest.Git(t, tn.dir, "update-ref", rendered, forged)
	tn.edit("installs/acme.yaml", "cidr: 10.10.0.0/16", "cidr: 10.13.0.0/16")
	tn.commit("move acme")
	res := tn.render(options(t))
	if len(res.Warnings) == 0 || !strings.Contains(res.Warnings[0], "did not sign") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if in := installsByID(res)["acme"]; in.Change != renderer.Changed || in.Generation != 2 {
		t.Errorf("acme: %+v, want changed at generation 2", in)
	}
	checkConsistent(t, tn.dir)
}

// TestRenderFreshness: with a freshness bound, every install commit
// carries a signed expiry; a render inside the renewal window re-signs the
// same trees with new generations, and one before it writes nothing.
func TestRenderFreshness(t *testing.T) {
	tn := newTenant(t)
	tn.edit("nuon.yaml", "name: shop\n", "name: shop\nfreshness:\n  validFor: 168h\n  renewBefore: 48h\n")
	tn.commit("installs' state expires after a week")
	at := func(d time.Duration) renderer.Options {
		o := options(t)
		o.Now = func() time.Time { return renderTime.Add(d) }
		return o
	}
	res := tn.render(at(0))
	ref := plumbing.ReferenceName(schemas.InstallRef("acme")).String()
	if got, want := trailer(t, tn.dir, ref, schemas.TrailerExpires), renderTime.Add(168*time.Hour).Format(time.RFC3339); got != want {
		t.Fatalf("expiry %q, want %q", got, want)
	}
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	if got := trailer(t, tn.dir, rendered, renderer.TrailerRenewAt); got != renderTime.Add(120*time.Hour).Format(time.RFC3339) {
		t.Errorf("renew-at %q", got)
	}
	n := len(res.Installs)

	if res := tn.render(at(119 * time.Hour)); len(res.Updates) != 0 {
		t.Errorf("a render before the renewal window moved %d refs", len(res.Updates))
	}
	tree := gittest.Git(t, tn.dir, "rev-parse", ref+"^{tree}")
	res = tn.render(at(121 * time.Hour))
	if got := res.ChangedCount(); got != n {
		t.Errorf("%d of %d installs renewed", got, n)
	}
	for _, in := range res.Installs {
		if in.Change != renderer.Renewed || in.Generation != 2 {
			t.Errorf("%s: %s generation %d, want renewed generation 2", in.ID, in.Change, in.Generation)
		}
	}
	if got := gittest.Git(t, tn.dir, "rev-parse", ref+"^{tree}"); got != tree {
		t.Errorf("renewal changed the tree: %s, want %s", got, tree)
	}
	if got, want := trailer(t, tn.dir, ref, schemas.TrailerExpires), renderTime.Add(121*time.Hour+168*time.Hour).Format(time.RFC3339); got != want {
		t.Errorf("renewed expiry %q, want %q", got, want)
	}
	checkConsistent(t, tn.dir)
}

// signedCommit writes a commit of ref's tree signed by the fixture key
// name, with ref as its parent.
func signedCommit(t *testing.T, tn *tenant, key, ref, msg string) string {
	t.Helper()
	r := tn.open()
	tree := plumbing.NewHash(gittest.Git(t, tn.dir, "rev-parse", ref+"^{tree}"))
	parent := plumbing.NewHash(gittest.Git(t, tn.dir, "rev-parse", ref))
	b := gitobj.NewBatch()
	who := object.Signature{Name: key, Email: key + "@example.com", When: renderTime}
	h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: []plumbing.Hash{parent}, Author: who, Message: msg}, loadSigner(t, key))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(r.Storer()); err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// TestCacheDoesNotTrustMovedRef: a Cache keeps the install refs a render
// left and their digest, so that the next render need not hash them
// again. When a ref moved behind the renderer's back after that render
// (the cache is stale), the next render with the cache must still find
// the refs are not as left and check every one: the moved ref is
// replaced, exactly as without a cache.
func TestCacheDoesNotTrustMovedRef(t *testing.T) {
	tests := []struct {
		name string
		// move moves globex's ref behind the renderer's back.
		move func(t *testing.T, tn *tenant, ref string)
		want int64
	}{
		{"to a commit it did not sign", func(t *testing.T, tn *tenant, ref string) {
			bad := gittest.Git(t, tn.dir, "commit-tree", ref+"^{tree}", "-p", ref, "-m", "x\n\nNuon-Install: globex\nNuon-Generation: 7")
			gittest.Git(t, tn.dir, "update-ref", ref, bad)
		}, 3},
		{"back to an older commit it signed", func(t *testing.T, tn *tenant, ref string) {
			gittest.Git(t, tn.dir, "update-ref", ref, gittest.Git(t, tn.dir, "rev-parse", ref+"^"))
		}, 3},
		{"deleted", func(t *testing.T, tn *tenant, ref string) {
			gittest.Git(t, tn.dir, "update-ref", "-d", ref)
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTenant(t)
			cache := renderer.NewCache()
			opts := func() renderer.Options {
				o := options(t)
				o.Cache = cache
				return o
			}
			tn.render(opts())
			tn.edit("nuon.yaml", "timeout: 5m", "timeout: 6m")
			tn.commit("slower api rollout")
			tn.render(opts())
			tn.edit("installs/acme.yaml", "cidr: 10.10.0.0/16", "cidr: 10.13.0.0/16")
			tn.commit("move acme")
			if res := tn.render(opts()); !res.Incremental {
				t.Fatal("the render of acme's change with the cache is not incremental")
			}
			ref := plumbing.ReferenceName(schemas.InstallRef("globex")).String()
			tt.move(t, tn, ref)

			tn.edit("installs/acme.yaml", "cidr: 10.13.0.0/16", "cidr: 10.14.0.0/16")
			tn.commit("move acme again")
			res := tn.render(opts())
			got := installsByID(res)
			if got["acme"].Change != renderer.Changed {
				t.Errorf("acme: %s, want changed", got["acme"].Change)
			}
			if g := got["globex"]; g.Change != renderer.Replaced || g.Generation != tt.want {
				t.Fatalf("globex: %+v, want replaced at generation %d", g, tt.want)
			}
			checkConsistent(t, tn.dir)
			if res := tn.render(opts()); res.ChangedCount() != 0 {
				t.Errorf("the next render changed %d installs", res.ChangedCount())
			}
		})
	}
}
