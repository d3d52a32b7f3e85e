package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// drill is the tenant of the rotation drill: main checked out in src, the
// bare repository behind a smart-HTTP server, and the keys as files.
type drill struct {
	env             []string
	bare, url, src  string
	keys, work      string
	cache, agentDir string
	given           string
}

func (d *drill) key(name string) string { return filepath.Join(d.keys, name) }

// trust runs nuon trust on the checkout of main.
func (d *drill) trust(t *testing.T, args ...string) string {
	t.Helper()
	return nuon(t, d.env, 0, append(append([]string{"trust"}, args...), "--dir", d.src)...)
}

// publish signs the newest version with the named root keys and commits
// it to main.
func (d *drill) publish(t *testing.T, msg string, signers ...string) {
	t.Helper()
	for _, s := range signers {
		d.trust(t, "sign", "--key", d.key(s))
	}
	d.trust(t, "verify")
	gittest.CommitDir(t, d.bare, "main", d.src, msg)
}

func (d *drill) render(t *testing.T, key string) {
	t.Helper()
	nuon(t, d.env, 0, "render", "--repo", d.url, "--key", d.key(key), "--cache-dir", d.cache)
}

// poll runs the agent once, as its loop does every interval, given the
// trust root's version 1 and nothing else, and returns its status.
func (d *drill) poll(t *testing.T) schemas.Status {
	t.Helper()
	out := nuon(t, d.env, 0, "agent", "--once", "-o", "json", "--repo", d.url, "--install", "acme",
		"--trust-root", d.given, "--key", filepath.Join(repoRoot(), "fixtures", "keys", "acme"), "--workdir", d.agentDir)
	var rep struct {
		Status schemas.Status `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	return rep.Status
}

// verify runs nuon verify with the trust root's version 1.
func (d *drill) verify(t *testing.T, wantCode int) map[string]any {
	t.Helper()
	cmd := exec.Command(nuonBinary(t), "verify", "--repo", d.url, "--install", "acme", "--trust-root", d.given, "-o", "json", "--cache-dir", d.cache)
	cmd.Env = append(os.Environ(), d.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	var rep map[string]any
	if err := json.Unmarshal(out, &rep); err != nil || cmd.ProcessState.ExitCode() != wantCode {
		t.Fatalf("verify: exit %d, want %d: %v\n%s\n%s", cmd.ProcessState.ExitCode(), wantCode, err, out, stderr.String())
	}
	return rep
}

const drillRef = "refs/heads/nuon/installs/acme"

// forge writes, as someone holding key could, a commit on acme's desired
// ref: base's tree with add written and drop removed, at generation gen,
// dated when, signed by key.
func (d *drill) forge(t *testing.T, base, key string, gen int64, when time.Time, add map[string][]byte, drop ...string) string {
	t.Helper()
	index := filepath.Join(t.TempDir(), "index")
	git := func(stdin string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir", d.bare}, args...)...)
		cmd.Env = append(append(os.Environ(), "GIT_INDEX_FILE="+index), env...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	git("", nil, "read-tree", base+"^{tree}")
	for path, data := range add {
		blob := git(string(data), nil, "hash-object", "-w", "--stdin")
		git("", nil, "update-index", "--add", "--cacheinfo", "100644,"+blob+","+path)
	}
	for _, path := range drop {
		// Mode 0 removes the entry; --force-remove needs a work tree.
		git("0 0000000000000000000000000000000000000000\t"+path+"\n", nil, "update-index", "--index-info")
	}
	tree := git("", nil, "write-tree")
	msg := regexp.MustCompile(`(?m)^Nuon-Generation: \d+$`).ReplaceAllString(git("", nil, "log", "-1", "--format=%B", base), fmt.Sprintf("Nuon-Generation: %d", gen))
	date := when.UTC().Format(time.RFC3339)
	c := git("", []string{"GIT_COMMITTER_DATE=" + date, "GIT_AUTHOR_DATE=" + date},
		"-c", "gpg.format=ssh", "-c", "user.signingkey="+d.key(key), "commit-tree", "-S", tree, "-p", base, "-m", msg)
	git("", nil, "update-ref", drillRef, c)
	return c
}

// TestTrustRootDrillWithTheBinaries is the rotation drill with nuon trust,
// nuon render, nuon agent and nuon verify as a vendor and an install run
// them: the agent is given version 1 of the root at creation and nothing
// in its configuration or workdir is touched afterwards. A render key is
// rotated (added, used, retired) and a leaked one revoked, and each attack
// is refused by the agent, with nothing applied, and by nuon verify.
func TestTrustRootDrillWithTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	srv := gittest.NewServer(t)
	d := &drill{env: e2eEnv(t), bare: srv.InitBare(t, "tenant.git"), keys: t.TempDir(), work: t.TempDir()}
	d.url = srv.URL("tenant.git")
	d.src, _ = commitTenant(t, d.bare, nil)
	d.cache, d.agentDir = filepath.Join(d.work, "cache"), filepath.Join(d.work, "acme")
	for _, k := range []string{"root-1", "root-2", "root-3", "render-a", "render-b", "render-c", "render-x"} {
		trusttest.WriteKey(t, d.keys, k)
	}

	// Version 1: three offline root keys, two needed; render-a renders.
	d.trust(t, "init", "--root-key", "root-1="+d.key("root-1.pub"), "--root-key", "root-2="+d.key("root-2.pub"),
		"--root-key", "root-3="+d.key("root-3.pub"), "--threshold", "2", "--render-key", "render-a="+d.key("render-a.pub"))
	d.publish(t, "trust root version 1", "root-1", "root-2")
	d.given = filepath.Join(d.work, "trust-root.json")
	data, err := os.ReadFile(filepath.Join(d.src, trust.FileName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.given, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d.render(t, "render-a")
	head := func() string { return gittest.Git(t, d.bare, "rev-parse", drillRef) }
	applied := func(step string) schemas.Status {
		t.Helper()
		st := d.poll(t)
		if st.Refusal != nil || st.Desired != head() {
			t.Fatalf("%s: desired %s refusal %+v, want %s taken", step, st.Desired, st.Refusal, head())
		}
		return st
	}
	refused := func(step, bad, reason string, was schemas.Status) {
		t.Helper()
		st := d.poll(t)
		if st.Refusal == nil || st.Refusal.Commit != bad || !strings.Contains(st.Refusal.Reason, reason) {
			t.Errorf("%s: refusal %+v, want %s refused for %q", step, st.Refusal, bad, reason)
		}
		if st.Desired != was.Desired || st.Generation != was.Generation {
			t.Errorf("%s: the agent took %s generation %d", step, st.Desired, st.Generation)
		}
		if rep := d.verify(t, 1); !strings.Contains(fmt.Sprint(rep["reason"]), reason) {
			t.Errorf("%s: nuon verify says %v, want a refusal for %q", step, rep["reason"], reason)
		}
		gittest.Git(t, d.bare, "update-ref", drillRef, was.Desired)
	}
	st := applied("version 1")

	// Rotation. Version 2 adds render-b; render-a carries it to every
	// install; render-b takes over; version 3 revokes render-a as retired.
	d.trust(t, "add-key", "render", "render-b", d.key("render-b.pub"))
	d.publish(t, "trust root version 2: render-b", "root-1", "root-3")
	d.render(t, "render-a")
	st = applied("version 2")
	os.WriteFile(filepath.Join(d.src, "installs", "acme.yaml"), []byte(strings.Replace(readFileT(t, filepath.Join(d.src, "installs", "acme.yaml")), "domain: acme.shop.example", "domain: acme2.shop.example", 1)), 0o644)
	gittest.CommitDir(t, d.bare, "main", d.src, "acme: new domain")
	d.render(t, "render-b")
	st = applied("render-b in use")
	if rep := d.verify(t, 0); rep["signer"] != "render-b" || rep["trustRoot"] != 2.0 {
		t.Errorf("nuon verify: %v, want signed by render-b under version 2", rep)
	}
	retiredAt := time.Now().UTC().Truncate(time.Second)
	d.trust(t, "revoke", trusttest.Fingerprint(t, "render-a"), "--reason", "retired", "--at", retiredAt.Format(time.RFC3339))
	d.publish(t, "trust root version 3: render-a retired", "root-2", "root-3")
	time.Sleep(time.Second) // the re-render is dated after the retirement
	d.render(t, "render-b")
	st = applied("version 3")
	gen := st.Generation

	refused("old key after retirement", d.forge(t, st.Desired, "render-a", gen+1, time.Now(), nil), "key revoked", st)
	refused("old key backdated", d.forge(t, st.Desired, "render-a", gen+1, retiredAt.Add(-time.Hour), nil), "key revoked", st)
	refused("old key with the root rolled back to version 1",
		d.forge(t, st.Desired, "render-a", gen+1, retiredAt.Add(-time.Hour), nil, trust.FileName(2), trust.FileName(3)), "key revoked", st)
	below := trusttest.Version{Version: 4, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2,
		Render: []trusttest.RenderKey{{Name: "render-x"}}}
	refused("root signed below threshold",
		d.forge(t, st.Desired, "render-x", gen+1, time.Now(), map[string][]byte{trust.FileName(4): below.File(t, "root-1")}), "too few root signatures", st)
	st = applied("after the attacks")

	// render-b leaks. Version 4 revokes it from before the leak and adds
	// render-c; render-c re-renders every install at a higher generation,
	// and the agent is on it after one poll.
	leak := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	d.trust(t, "add-key", "render", "render-c", d.key("render-c.pub"))
	d.trust(t, "revoke", trusttest.Fingerprint(t, "render-b"), "--reason", "leaked", "--at", leak.Format(time.RFC3339))
	d.publish(t, "trust root version 4: render-b leaked", "root-1", "root-2")
	d.render(t, "render-c")
	st = applied("re-rendered after the leak")
	if st.Generation <= gen {
		t.Errorf("generation %d after the re-render, want above %d", st.Generation, gen)
	}
	gen = st.Generation
	refused("revoked key", d.forge(t, st.Desired, "render-b", gen+1, time.Now(), nil), "key revoked", st)
	refused("revoked key backdated before the leak", d.forge(t, st.Desired, "render-b", gen+1, leak.Add(-time.Hour), nil), "key revoked", st)
	st = applied("after the revoked key's attempts")

	// Freeze: version 5 expires in a few seconds; once it has, a commit
	// even by render-c is refused until a newer version comes.
	v4, err := trust.Parse(trust.FileName(4), []byte(readFileT(t, filepath.Join(d.src, trust.FileName(4)))))
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().UTC().Add(4 * time.Second).Truncate(time.Second)
	short := trusttest.Version{Version: 5, Expires: expires, RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2,
		Render:  []trusttest.RenderKey{{Name: "render-c"}},
		Revoked: []trusttest.Revoked{{Name: "render-a", At: retiredAt}, {Name: "render-b", At: leak}}}
	if len(v4.Revocations) != 2 {
		t.Fatalf("version 4 has %d revocations, want 2", len(v4.Revocations))
	}
	os.WriteFile(filepath.Join(d.src, trust.FileName(5)), short.File(t, "root-1", "root-2"), 0o644)
	gittest.CommitDir(t, d.bare, "main", d.src, "trust root version 5, short-lived")
	d.render(t, "render-c")
	st = applied("version 5")
	time.Sleep(time.Until(expires) + time.Second)
	refused("stale root", d.forge(t, st.Desired, "render-c", gen+5, time.Now(), nil), "root has expired", st)
}

func readFileT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
