package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// TestRotationDrillOnARunningFleet is issue 22's rotation drill on a
// running fleet: nuon server in front of the tenant and a long-running
// nuon-agent for each of the three installs, talking only to the server
// with signed requests, each given its key and version 1 of the trust root
// once. In sequence: the render key is rotated (added by a threshold of
// root keys, used, the old one retired); globex's install key is rotated
// while the others run; a leaked render key is revoked and a successor
// re-renders every install at a higher generation. No file inside any
// install's folder changes, except globex's key by its own rotation.
// Then each attack is served to acme through the server and refused with
// nothing applied: the retired key, the revoked key (also backdated and
// with a fast-forwarded generation), a rolled-back root, a root signed
// below threshold, and a root that expired.
func TestRotationDrillOnARunningFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries as a fleet")
	}
	st := newServerTenant(t)
	d := &drill{env: st.env, bare: st.repo, url: st.repo, src: st.src, keys: t.TempDir(), work: st.work}
	d.cache = filepath.Join(d.work, "cache")
	for _, k := range []string{"root-1", "root-2", "root-3", "render-a", "render-b", "render-c", "render-x"} {
		trusttest.WriteKey(t, d.keys, k)
	}
	f := &fleet{st: st, d: d, addr: freeAddr(t), ids: []string{"acme", "globex", "initech"},
		agents: map[string]*exec.Cmd{}, logs: map[string]*lockedBuffer{}, layout: fixtureLayout(t)}

	// Version 1: three offline root keys, two needed; render-a renders.
	// Each install gets it once, with its key, as nuon install create
	// hands them over.
	d.trust(t, "init", "--root-key", "root-1="+d.key("root-1.pub"), "--root-key", "root-2="+d.key("root-2.pub"),
		"--root-key", "root-3="+d.key("root-3.pub"), "--threshold", "2", "--render-key", "render-a="+d.key("render-a.pub"))
	d.publish(t, "trust root version 1", "root-1", "root-2")
	v1 := readFileT(t, filepath.Join(d.src, trust.FileName(1)))
	for _, id := range f.ids {
		files := map[string]string{"trust-root.json": v1,
			"agent.key":     readFileT(t, filepath.Join(st.keys, id)),
			"agent.key.pub": readFileT(t, filepath.Join(st.keys, id+".pub"))}
		if err := os.MkdirAll(f.dir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(f.dir(id), name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.given = filepath.Join(f.dir("acme"), "trust-root.json")
	f.step(t, "fleet up: server, three agents, generation 1 applied", func() {
		f.serve(t, "render-a")
		for _, id := range f.ids {
			f.start(t, id)
		}
		f.converge(t, "version 1")
	})
	given := f.configHashes(t)
	generation := func(id string) int64 { return f.status(id).Generation }

	// (a) The render key rotates: version 2 adds render-b and render-a
	// carries it to every install; the server then renders with render-b
	// and version 3 retires render-a.
	var retiredAt time.Time
	f.step(t, "render key: version 2 adds render-b, render-a carries it", func() {
		d.trust(t, "add-key", "render", "render-b", d.key("render-b.pub"))
		was := f.tips()
		d.publish(t, "trust root version 2: render-b", "root-1", "root-3")
		f.moved(t, "version 2", was)
		f.converge(t, "version 2")
	})
	f.step(t, "render key: render-b renders version 3, render-a retired", func() {
		was := f.tips()
		f.srv.stop()
		retiredAt = time.Now().UTC().Truncate(time.Second)
		d.trust(t, "revoke", trusttest.Fingerprint(t, "render-a"), "--reason", "retired", "--at", retiredAt.Format(time.RFC3339))
		d.publish(t, "trust root version 3: render-a retired", "root-2", "root-3")
		time.Sleep(time.Second) // the render is dated after the retirement
		f.serve(t, "render-b")
		f.moved(t, "version 3", was)
		f.converge(t, "version 3")
	})
	if rep := d.verify(t, 0); rep["signer"] != "render-b" || rep["trustRoot"] != 3.0 {
		t.Errorf("nuon verify after the rotation: %v, want signed by render-b under version 3", rep)
	}
	sameConfig(t, "render key rotated", given, f.configHashes(t))
	f.alive(t, "render key rotated", f.ids...)

	// (c) globex's install key rotates; acme and initech keep running.
	others := []string{"acme", "initech"}
	pids := map[string]int{}
	for _, id := range others {
		pids[id] = f.agents[id].Process.Pid
	}
	oldKey := filepath.Join(st.work, "globex-old-key")
	if err := os.WriteFile(oldKey, []byte(readFileT(t, filepath.Join(f.dir("globex"), "agent.key"))), 0o600); err != nil {
		t.Fatal(err)
	}
	var handover rotateKeyReport
	f.step(t, "install key: globex rotates its key, the others run", func() {
		stopProcess(f.agents["globex"])
		cmd := exec.Command(st.nuon, "install", "rotate-key", "globex", "--repo", f.srv.url+"/tenant.git", "--server-auth", "--dir", f.dir("globex"), "-o", "json")
		cmd.Env = append(os.Environ(), st.env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("rotate-key: %v\n%s\n%s", err, out, f.all())
		}
		if err := json.Unmarshal(out, &handover); err != nil || handover.AgentKey == handover.RetiredKey {
			t.Fatalf("rotate-key: %+v (%v)", handover, err)
		}
		f.start(t, "globex")
	})
	once := exec.Command(st.agent, "agent", "--once", "--server-auth", "--repo", f.srv.url+"/tenant.git", "--install", "globex",
		"--trust-root", filepath.Join(f.dir("globex"), "trust-root.json"), "--key", oldKey,
		"--workdir", t.TempDir(), "--artifacts", f.layout, "--insecure-skip-artifact-verification")
	once.Env = append(os.Environ(), st.env...)
	if out, err := once.CombinedOutput(); err == nil {
		t.Errorf("globex's retired key still reaches the server:\n%s", out)
	}
	for _, id := range others {
		if f.agents[id].Process.Pid != pids[id] {
			t.Errorf("%s's agent was restarted by globex's rotation", id)
		}
	}
	f.alive(t, "install key rotated", f.ids...)
	after := f.configHashes(t)
	for _, name := range []string{"globex/agent.key", "globex/agent.key.pub"} {
		if after[name] == given[name] {
			t.Errorf("%s did not change by globex's rotation", name)
		}
		given[name] = after[name]
	}
	// The hand-over leaves the retired key beside the new one
	// (agent.key.retired) and its work in DIR/rotate: rotate-key's own
	// files.
	for name, sum := range after {
		if strings.HasPrefix(name, "globex/agent.key.retired") || strings.HasPrefix(name, "globex/rotate/") {
			given[name] = sum
		}
	}
	sameConfig(t, "install key rotated", given, after)

	// (d) render-b leaks. Version 4, signed offline while the server is
	// stopped (a leaked key must not sign the commit that revokes it),
	// revokes it from before the leak and adds render-c; the server
	// renders every install again with render-c, at a higher generation.
	leak := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	before := map[string]int64{}
	for _, id := range f.ids {
		before[id] = generation(id)
	}
	var moved time.Duration
	f.step(t, "leak: version 4 revokes render-b, render-c re-renders, every agent moves off", func() {
		was := f.tips()
		f.srv.stop()
		d.trust(t, "add-key", "render", "render-c", d.key("render-c.pub"))
		d.trust(t, "revoke", trusttest.Fingerprint(t, "render-b"), "--reason", "leaked", "--at", leak.Format(time.RFC3339))
		d.publish(t, "trust root version 4: render-b leaked", "root-1", "root-2")
		f.serve(t, "render-c")
		f.moved(t, "version 4", was)
		moved = f.converge(t, "version 4")
	})
	t.Logf("every agent off the leaked key's state %s after the re-render reached the server (agent interval 1s)", moved.Round(100*time.Millisecond))
	for _, id := range f.ids {
		if g := generation(id); g <= before[id] {
			t.Errorf("%s at generation %d after the re-render, want above %d", id, g, before[id])
		}
	}
	sameConfig(t, "leaked key revoked", given, f.configHashes(t))
	f.alive(t, "leaked key revoked", f.ids...)
	if rep := d.verify(t, 0); rep["signer"] != "render-c" || rep["trustRoot"] != 4.0 {
		t.Errorf("nuon verify after the leak: %v, want signed by render-c under version 4", rep)
	}

	// The attacks, each served to acme through the server by someone who
	// can write its storage (the ref table is read at start), each refused
	// by acme's running agent with nothing applied, and by nuon verify;
	// then the genuine tip is put back.
	attack := func(name, reason string, forge func(base string, gen int64) string) {
		t.Helper()
		f.step(t, "attack refused: "+name, func() {
			was := f.status("acme")
			base := f.desired("acme")
			f.srv.stop()
			bad := forge(base, was.Generation)
			f.restartServer(t)
			if got := f.desired("acme"); got != bad {
				t.Fatalf("%s: the server moved acme's ref to %s on start, want the forged %s", name, got, bad)
			}
			waitFor(t, "acme to refuse "+name, 2*time.Minute, f.all, func() bool {
				r := f.status("acme").Refusal
				return r != nil && r.Commit == bad
			})
			now := f.status("acme")
			if !strings.Contains(now.Refusal.Reason, reason) {
				t.Errorf("%s: refused for %q, want %q", name, now.Refusal.Reason, reason)
			}
			if now.Desired != was.Desired || now.Applied != was.Applied || now.Generation != was.Generation {
				t.Errorf("%s: acme took desired %s applied %s generation %d, had %s %s %d",
					name, now.Desired, now.Applied, now.Generation, was.Desired, was.Applied, was.Generation)
			}
			if rep := d.verify(t, 1); !strings.Contains(fmt.Sprint(rep["reason"]), reason) {
				t.Errorf("%s: nuon verify says %v, want a refusal for %q", name, rep["reason"], reason)
			}
			f.srv.stop()
			gittest.Git(t, st.repo, "update-ref", drillRef, base)
			f.restartServer(t)
			f.converge(t, "back after "+name, "acme")
		})
	}
	attack("the retired key", "key revoked", func(base string, gen int64) string {
		return d.forge(t, base, "render-a", gen+1, time.Now(), nil)
	})
	attack("the revoked key", "key revoked", func(base string, gen int64) string {
		return d.forge(t, base, "render-b", gen+1, time.Now(), nil)
	})
	attack("the revoked key backdated before the leak", "key revoked", func(base string, gen int64) string {
		return d.forge(t, base, "render-b", gen+1, leak.Add(-time.Hour), nil)
	})
	attack("a fast-forwarded generation by the revoked key", "key revoked", func(base string, gen int64) string {
		return d.forge(t, base, "render-b", gen+1000, time.Now(), nil)
	})
	// A forgery whose tree differs from what main renders (a root rolled
	// back, a root signed below threshold) never reaches an agent: the
	// server, rendering at start, finds acme's ref off its own render and
	// renders acme again, signed by render-c, over it.
	overwritten := func(name string, forge func(base string, gen int64) string) {
		t.Helper()
		f.step(t, "forgery rendered over by the server: "+name, func() {
			was := f.status("acme")
			base := f.desired("acme")
			f.srv.stop()
			bad := forge(base, was.Generation)
			f.restartServer(t)
			if got := f.desired("acme"); got == bad || got == base {
				t.Fatalf("%s: acme's ref at %s after the server started, want a new render over the forged %s\n%s", name, got, bad, f.all())
			}
			f.converge(t, "the server's render over "+name, "acme")
			if rep := d.verify(t, 0); rep["signer"] != "render-c" {
				t.Errorf("%s: nuon verify of the server's render: %v", name, rep)
			}
			if strings.Contains(f.logs["acme"].String(), bad) {
				t.Errorf("%s: acme's agent saw the forged %s", name, bad)
			}
		})
	}
	overwritten("the root rolled back to version 2", func(base string, gen int64) string {
		return d.forge(t, base, "render-b", gen+1, leak.Add(-time.Hour), nil, trust.FileName(3), trust.FileName(4))
	})
	below := trusttest.Version{Version: 5, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2,
		Render: []trusttest.RenderKey{{Name: "render-x"}}}
	overwritten("a root signed below threshold", func(base string, gen int64) string {
		return d.forge(t, base, "render-x", gen+1, time.Now(), map[string][]byte{trust.FileName(5): below.File(t, "root-1")})
	})
	// The same root committed to main by someone who may write main: the
	// server refuses to render it, and nothing moves for any install.
	f.step(t, "a root signed below threshold on main: the server does not render it", func() {
		was := f.tips()
		writeTestFile(t, filepath.Join(d.src, trust.FileName(5)), below.File(t, "root-1"))
		gittest.CommitDir(t, st.repo, "main", d.src, "trust root version 5, one signature")
		waitFor(t, "the server to refuse the root", time.Minute, f.all, func() bool {
			return strings.Contains(f.srv.log.String(), "too few root signatures")
		})
		time.Sleep(2 * time.Second) // two more checks of main, and polls
		for _, id := range f.ids {
			if f.desired(id) != was[id] || f.status(id).Desired != was[id] {
				t.Errorf("%s moved to %s under a root signed below threshold", id, f.desired(id))
			}
		}
		if err := os.Remove(filepath.Join(d.src, trust.FileName(5))); err != nil {
			t.Fatal(err)
		}
		gittest.CommitDir(t, st.repo, "main", d.src, "revert trust root version 5")
	})

	// A stale root: version 5, signed by a threshold, expires in a few
	// seconds; once it has, acme's next render (a main change) is refused
	// even though render-c signed it, until version 6 comes. The
	// fast-forwarded generation above did not lock acme out: the genuine
	// renders after it are taken.
	expires := time.Now().UTC().Add(8 * time.Second).Truncate(time.Second)
	short := trusttest.Version{Version: 5, Expires: expires, RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2,
		Render:  []trusttest.RenderKey{{Name: "render-c"}},
		Revoked: []trusttest.Revoked{{Name: "render-a", At: retiredAt}, {Name: "render-b", At: leak}}}
	f.step(t, "stale root: version 5 applied, then refused once expired", func() {
		was5 := f.tips()
		writeTestFile(t, filepath.Join(d.src, trust.FileName(5)), short.File(t, "root-1", "root-2"))
		gittest.CommitDir(t, st.repo, "main", d.src, "trust root version 5, short-lived")
		f.moved(t, "version 5", was5)
		f.converge(t, "version 5")
		was := f.status("acme")
		time.Sleep(time.Until(expires) + time.Second)
		acme := filepath.Join(d.src, "installs", "acme.yaml")
		writeTestFile(t, acme, []byte(strings.Replace(readFileT(t, acme), "domain: acme.shop.example", "domain: acme2.shop.example", 1)))
		gittest.CommitDir(t, st.repo, "main", d.src, "acme: new domain")
		waitFor(t, "acme to refuse the render under an expired root", 2*time.Minute, f.all, func() bool {
			r := f.status("acme").Refusal
			return r != nil && r.Commit == f.desired("acme")
		})
		if now := f.status("acme"); !strings.Contains(now.Refusal.Reason, "root has expired") ||
			now.Desired != was.Desired || now.Applied != was.Applied || now.Generation != was.Generation {
			t.Errorf("stale root: acme's status %+v, want the expired root refused and %s kept", now, was.Desired)
		}
		if rep := d.verify(t, 1); !strings.Contains(fmt.Sprint(rep["reason"]), "root has expired") {
			t.Errorf("stale root: nuon verify says %v", rep["reason"])
		}
	})
	f.step(t, "stale root: version 6 brings every agent back", func() {
		fresh := short
		fresh.Version, fresh.Expires = 6, time.Now().AddDate(1, 0, 0)
		was := f.tips()
		writeTestFile(t, filepath.Join(d.src, trust.FileName(6)), fresh.File(t, "root-2", "root-3"))
		gittest.CommitDir(t, st.repo, "main", d.src, "trust root version 6")
		f.moved(t, "version 6", was)
		f.converge(t, "version 6")
	})
	sameConfig(t, "after the attacks", given, f.configHashes(t))
	f.alive(t, "after the attacks", f.ids...)
	t.Logf("drill steps:\n%s", f.note())
}

// gitGeneration reads the generation trailer of a commit.
func gitGeneration(t *testing.T, repo, commit string) int64 {
	t.Helper()
	msg := gittest.Git(t, repo, "log", "-1", "--format=%B", commit)
	g, err := schemas.Generation(msg)
	if err != nil {
		t.Fatalf("commit %s: %v", commit, err)
	}
	return g
}
