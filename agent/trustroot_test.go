package agent_test

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// drillClock is a settable drillClock shared by the renderer and the agent.
type drillClock struct{ t time.Time }

func (c *drillClock) now() time.Time          { return c.t }
func (c *drillClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// rootV is version v of the tests' root: root keys root-1..3, two needed,
// expiring a year after base.
func rootV(v int64, base time.Time, render ...trusttest.RenderKey) trusttest.Version {
	return trusttest.Version{Version: v, Expires: base.AddDate(1, 0, 0),
		RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2, Render: render}
}

// publishRoot commits version file under trust/root on main.
func (tn *tenant) publishRoot(v int64, file []byte) {
	tn.t.Helper()
	tn.write(trust.FileName(v), string(file))
	tn.commit("trust root version " + path.Base(trust.FileName(v)))
}

// forge writes a commit on acme's desired ref as someone holding key
// could: base's tree with add written and drop removed, the generation
// gen, dated when, signed by key; and points the server's ref at it.
func (tn *tenant) forge(t *testing.T, base, key string, gen int, when time.Time, add map[string][]byte, drop ...string) string {
	t.Helper()
	repo, err := gitrepo.Open(tn.bare)
	if err != nil {
		t.Fatal(err)
	}
	st := repo.Storer()
	c, files, err := gitobj.ReadCommitFiles(st, plumbing.NewHash(base), 0)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(files, add)
	for _, d := range drop {
		delete(files, d)
	}
	b := gitobj.NewBatch()
	who := object.Signature{Name: "nuon renderer", Email: "renderer@nuon.invalid", When: when}
	h, err := b.Commit(gitobj.Commit{Tree: tree(b, files), Parents: []plumbing.Hash{c.Hash}, Author: who,
		Message: bumpGeneration(c.Message, gen)}, trusttest.Key(t, key))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	tn.git("update-ref", acmeDesired, h.String())
	return h.String()
}

// tree writes files, nested by their slash-separated paths.
func tree(b *gitobj.Batch, files map[string][]byte) plumbing.Hash {
	var es []gitobj.Entry
	dirs := map[string]map[string][]byte{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		dir, rest, ok := strings.Cut(name, "/")
		if !ok {
			es = append(es, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, files[name])})
			continue
		}
		if dirs[dir] == nil {
			dirs[dir] = map[string][]byte{}
		}
		dirs[dir][rest] = files[name]
	}
	for dir, sub := range dirs {
		es = append(es, gitobj.Entry{Name: dir, Mode: filemode.Dir, Hash: tree(b, sub)})
	}
	return b.Tree(es)
}

// TestTrustRootDrill runs the rotation drill against one agent that was
// given version 1 of the root and nothing else: a render key is added,
// used and retired, and a leaked one revoked, all through main and the
// rendered refs alone, with nothing changed in the agent's configuration;
// after each step the attacks that step should stop are refused with
// nothing applied.
func TestTrustRootDrill(t *testing.T) {
	clk := &drillClock{t: time.Now().UTC().Truncate(time.Second)}
	base := clk.t
	tn := newTenant(t, func(tn *tenant) { tn.now = clk.now })
	a1, b, c := trusttest.RenderKey{Name: "render-a"}, trusttest.RenderKey{Name: "render-b"}, trusttest.RenderKey{Name: "render-c"}

	v1 := rootV(1, base, a1).File(t, "root-1", "root-2")
	tn.publishRoot(1, v1)
	tn.render = trusttest.Key(t, "render-a")
	tn.renderMain()
	given, err := trust.Parse(trust.FileName(1), v1)
	if err != nil {
		t.Fatal(err)
	}
	workdir := t.TempDir()
	open := func() *installAgent {
		return tn.agentIn("acme", workdir, func(c *agent.Config) { c.Trust, c.TrustRoot, c.Now = nil, given, clk.now })
	}
	a := open()
	expectApplied := func(step string, signer string, root int64) schemas.Status {
		t.Helper()
		st := a.reconcile(t).Status
		head := tn.git("rev-parse", acmeDesired)
		if st.Desired != head || st.Refusal != nil || st.Phase != schemas.InstallReady {
			t.Fatalf("%s: status desired %s phase %s refusal %+v, want %s applied", step, st.Desired, st.Phase, st.Refusal, head[:12])
		}
		if got := a.Root().Version; got != root {
			t.Errorf("%s: agent holds root version %d, want %d", step, got, root)
		}
		return st
	}
	expectRefused := func(step, bad, reason string, applied schemas.Status) {
		t.Helper()
		// Drift checks of the applied state (read-only, due as the clock
		// moves) may run; nothing may be applied.
		applies := func() []string {
			return slices.DeleteFunc(runs(t, a.records), func(r string) bool { return strings.HasSuffix(r, "_drift") })
		}
		before := len(applies())
		st := a.reconcile(t).Status
		if st.Phase != schemas.InstallRefused || st.Refusal == nil || st.Refusal.Commit != bad {
			t.Fatalf("%s: phase %s refusal %+v, want %s refused", step, st.Phase, st.Refusal, bad[:12])
		}
		if !strings.Contains(st.Refusal.Reason, reason) {
			t.Errorf("%s: refused for %q, want a reason with %q", step, st.Refusal.Reason, reason)
		}
		if st.Desired != applied.Desired || st.Generation != applied.Generation {
			t.Errorf("%s: the applied state moved to %s generation %d", step, st.Desired, st.Generation)
		}
		if after := applies(); len(after) != before {
			t.Errorf("%s: plugin calls on a refused commit: %v", step, after[before:])
		}
	}
	applied := expectApplied("version 1", "render-a", 1)
	tn.git("update-ref", "refs/heads/good", applied.Desired)
	restore := func() { tn.git("update-ref", acmeDesired, tn.git("rev-parse", "refs/heads/good")) }

	// Rotation: version 2 adds render-b; the renderer, still render-a,
	// carries it to every install; then render-b takes over; version 3
	// retires render-a.
	clk.advance(time.Hour)
	tn.publishRoot(2, rootV(2, base, a1, b).File(t, "root-1", "root-2"))
	tn.renderMain()
	applied = expectApplied("version 2 carried by render-a", "render-a", 2)
	clk.advance(time.Hour)
	tn.render = trusttest.Key(t, "render-b")
	tn.write("installs/acme.yaml", readFile(t, tn.src+"/installs/acme.yaml")+"versions: {d: 1.1.0}\n")
	tn.commit("acme: d 1.1.0")
	tn.renderMain()
	applied = expectApplied("render-b in use", "render-b", 2)
	clk.advance(time.Hour)
	retired := clk.t
	aRetired := trusttest.RenderKey{Name: "render-a", NotAfter: retired}
	tn.publishRoot(3, rootV(3, base, aRetired, b).File(t, "root-2", "root-3"))
	tn.renderMain()
	applied = expectApplied("version 3 retires render-a", "render-b", 3)
	tn.git("update-ref", "refs/heads/good", applied.Desired)
	good := applied.Desired
	gen := int(applied.Generation)

	for _, tc := range []struct {
		name   string
		forge  func() string
		reason string
	}{
		{"old key after retirement", func() string {
			return tn.forge(t, good, "render-a", gen+1, clk.t, nil)
		}, "key window has ended"},
		{"old key, backdated before retirement", func() string {
			return tn.forge(t, good, "render-a", gen+1, retired.Add(-2*time.Hour), nil)
		}, "key window has ended"},
		{"old key with the root rolled back to version 1", func() string {
			return tn.forge(t, good, "render-a", gen+1, retired.Add(-2*time.Hour), nil, trust.FileName(2), trust.FileName(3))
		}, "key window has ended"},
		{"root signed below threshold", func() string {
			v4 := rootV(4, base, trusttest.RenderKey{Name: "render-x"}).File(t, "root-1")
			return tn.forge(t, good, "render-x", gen+1, clk.t, map[string][]byte{trust.FileName(4): v4})
		}, "too few root signatures"},
		{"root signed by keys that are not root keys", func() string {
			v4 := rootV(4, base, trusttest.RenderKey{Name: "render-x"}).File(t, "x-1", "x-2", "x-3")
			return tn.forge(t, good, "render-x", gen+1, clk.t, map[string][]byte{trust.FileName(4): v4})
		}, "too few root signatures"},
		{"root fast-forwarded past a version", func() string {
			v5 := rootV(5, base, trusttest.RenderKey{Name: "render-x"}).File(t, "root-1", "root-2")
			return tn.forge(t, good, "render-x", gen+1, clk.t, map[string][]byte{trust.FileName(5): v5})
		}, "skips ahead"},
		{"a key no version names", func() string {
			return tn.forge(t, good, "render-x", gen+1, clk.t, nil)
		}, "key not in the role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectRefused(tc.name, tc.forge(), tc.reason, applied)
			restore()
		})
	}
	applied = expectApplied("back on the good commit", "render-b", 3)

	// A restart given version 1 again resumes from version 3, kept in the
	// workdir: the rolled-back root stays refused.
	a = open()
	if got := a.Root().Version; got != 3 {
		t.Fatalf("restarted agent holds root version %d, want 3", got)
	}
	bad := tn.forge(t, good, "render-a", gen+1, retired.Add(-2*time.Hour), nil, trust.FileName(2), trust.FileName(3))
	expectRefused("restart, then the old key", bad, "key window has ended", applied)
	restore()
	applied = expectApplied("restart", "render-b", 3)

	// render-b leaks. Version 4 revokes it at the time of the leak and
	// adds render-c; the renderer, now render-c, re-renders at a higher
	// generation, and the agent moves onto it in one poll.
	clk.advance(time.Hour)
	leak := clk.t.Add(-30 * time.Minute)
	tn.publishRoot(4, trusttest.Version{Version: 4, Expires: base.AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2,
		Render: []trusttest.RenderKey{aRetired, b, c}, Revoked: []trusttest.Revoked{{Name: "render-b", At: leak}}}.File(t, "root-1", "root-3"))
	tn.render = trusttest.Key(t, "render-c")
	clk.advance(time.Minute)
	tn.renderMain()
	applied = expectApplied("re-rendered after the leak", "render-c", 4)
	tn.git("update-ref", "refs/heads/good", applied.Desired)
	good, gen = applied.Desired, int(applied.Generation)
	for _, tc := range []struct {
		name string
		when time.Time
	}{
		{"revoked key, now", clk.t},
		{"revoked key, backdated before the leak", leak.Add(-time.Hour)},
		{"revoked key, backdated before the re-render", clk.t.Add(-time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectRefused(tc.name, tn.forge(t, good, "render-b", gen+1, tc.when, nil), "key revoked", applied)
			restore()
		})
	}
	applied = expectApplied("after the revoked key's attempts", "render-c", 4)

	// Freeze: version 5 expires soon; once it has, even a commit by a
	// good key is refused until a newer version comes.
	clk.advance(time.Hour)
	v5 := trusttest.Version{Version: 5, Expires: clk.t.Add(time.Hour), RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2,
		Render: []trusttest.RenderKey{c}, Revoked: []trusttest.Revoked{{Name: "render-b", At: leak}}}
	tn.publishRoot(5, v5.File(t, "root-2", "root-3"))
	tn.renderMain()
	applied = expectApplied("version 5", "render-c", 5)
	clk.advance(2 * time.Hour)
	tn.setInstall("acme", tn.keys["acme"], "false", "1s")
	tn.commit("acme: b sleeps")
	tn.renderMain()
	expectRefused("stale root", tn.git("rev-parse", acmeDesired), "root has expired", applied)
	v6 := v5
	v6.Version, v6.Expires = 6, clk.t.AddDate(0, 1, 0)
	tn.publishRoot(6, v6.File(t, "root-1", "root-2"))
	tn.renderMain()
	expectApplied("version 6 unfreezes", "render-c", 6)
}
