package main

import (
	"github.com/go-git/go-git/v5/plumbing"
	"nuon.dev/nuon/cmd/internal/cli"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// renderTenant is a tenant repository for the render command's tests: a
// bare repository whose main is the fixture tenant, committed by the git
// CLI from src.
type renderTenant struct {
	dir, src string
	location string // --repo: dir or a URL
	cache    string
}

func newRenderTenant(t *testing.T, dir, location string) *renderTenant {
	t.Helper()
	t.Setenv("GIT_AUTHOR_DATE", "2026-03-01T11:00:00Z")
	t.Setenv("GIT_COMMITTER_DATE", "2026-03-01T11:00:00Z")
	rt := &renderTenant{dir: dir, src: filepath.Join(t.TempDir(), "src"), location: location, cache: t.TempDir()}
	if err := os.CopyFS(rt.src, os.DirFS(filepath.Join(repoRoot(), "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	rt.commit(t, "import the fixture tenant")
	return rt
}

func localRenderTenant(t *testing.T) *renderTenant {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	return newRenderTenant(t, dir, dir)
}

func (rt *renderTenant) commit(t *testing.T, msg string) string {
	t.Helper()
	return gittest.CommitDir(t, rt.dir, "main", rt.src, msg)
}

// edit replaces the one occurrence of old in a source file and commits.
func (rt *renderTenant) edit(t *testing.T, name, old, new string) {
	t.Helper()
	p := filepath.Join(rt.src, filepath.FromSlash(name))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), old) != 1 {
		t.Fatalf("%s does not hold %q once", name, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	rt.commit(t, "edit "+name)
}

// renderRun is one in-process run of `nuon render`.
type renderRun struct {
	stdout, stderr string
	err            error
}

// run runs `nuon render` in process with the fixture render key and a
// fixed clock; adjust changes the options the flags would set.
func (rt *renderTenant) run(t *testing.T, adjust func(*renderOptions)) renderRun {
	t.Helper()
	var stdout, stderr bytes.Buffer
	g := &cli.Globals{LogFormat: "text", LogLevel: "info", Stdout: &stdout, Stderr: &stderr}
	o := &renderOptions{
		repo:     rt.location,
		key:      filepath.Join(repoRoot(), "fixtures", "keys", "render"),
		source:   "refs/heads/main",
		output:   "text",
		cacheDir: rt.cache,
		retries:  3,
		now:      func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) },
	}
	if adjust != nil {
		adjust(o)
	}
	err := runRender(context.Background(), g, o)
	return renderRun{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// mustRun is run that fails the test when the command fails.
func (rt *renderTenant) mustRun(t *testing.T, adjust func(*renderOptions)) renderRun {
	t.Helper()
	r := rt.run(t, adjust)
	if r.err != nil {
		t.Fatalf("nuon render: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	return r
}

// gitRefs lists the refs of the repository at dir.
func gitRefs(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(gittest.Git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if name, h, ok := strings.Cut(line, " "); ok {
			out[name] = h
		}
	}
	return out
}

// fixtureInstalls lists the install ids of the fixture tenant.
func fixtureInstalls(t *testing.T) []string {
	t.Helper()
	src, err := schemas.Load(os.DirFS(filepath.Join(repoRoot(), "fixtures", "tenant")))
	if err != nil {
		t.Fatal(err)
	}
	return src.InstallIDs()
}

// allowedSigners writes an allowed_signers file trusting the public key in
// fixtures/keys/KEY.pub as principal.
func allowedSigners(t *testing.T, principal, key string) string {
	t.Helper()
	pub, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "keys", key+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(f, []byte("# who may sign rendered state\n"+principal+" "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRenderIntoBareRepository runs the render command on a bare
// repository on disk and reads the result back with the git CLI.
func TestRenderIntoBareRepository(t *testing.T) {
	rt := localRenderTenant(t)
	out := rt.mustRun(t, nil)
	ids := fixtureInstalls(t)
	if want := fmt.Sprintf("rendered %d of %d installs", len(ids), len(ids)); !strings.Contains(out.stdout, want) {
		t.Errorf("output does not say %q:\n%s", want, out.stdout)
	}

	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	if got := gittest.Git(t, rt.dir, "cat-file", "-t", rendered); got != "commit" {
		t.Fatalf("%s is a %s", rendered, got)
	}
	var got []string
	for _, shard := range strings.Fields(gittest.Git(t, rt.dir, "ls-tree", "--name-only", rendered+":"+schemas.InstallsDir)) {
		got = append(got, strings.Fields(gittest.Git(t, rt.dir, "ls-tree", "--name-only", rendered+":"+schemas.InstallsDir+"/"+shard))...)
	}
	slices.Sort(got)
	if !cmp.Equal(got, ids) {
		t.Errorf("rendered installs %v, want %v", got, ids)
	}
	refs := []string{rendered}
	for _, id := range ids {
		ref := plumbing.ReferenceName(schemas.InstallRef(id)).String()
		refs = append(refs, ref)
		folder := gittest.Git(t, rt.dir, "ls-tree", rendered, schemas.RenderedInstallPath(id))
		own := gittest.Git(t, rt.dir, "rev-parse", ref+"^{tree}")
		if f := strings.Fields(folder); len(f) < 3 || f[1] != "tree" || f[2] != own {
			t.Errorf("%s: rendered tree entry %q, own tree %s", id, folder, own)
		}
		if got := gittest.Git(t, rt.dir, "ls-tree", "--name-only", ref); got != "components\ninstall.json\npolicies" {
			t.Errorf("%s holds %q", ref, got)
		}
		state := gittest.Git(t, rt.dir, "cat-file", "blob", ref+":"+schemas.InstallStateFile)
		var st schemas.InstallState
		if err := json.Unmarshal([]byte(state), &st); err != nil || st.Install != id {
			t.Errorf("%s:%s names install %q (%v)", ref, schemas.InstallStateFile, st.Install, err)
		}
	}

	trusted := allowedSigners(t, "nuon-render", "render")
	other := allowedSigners(t, "nuon-render", "acme")
	for _, ref := range refs {
		if _, err := gittest.Run(rt.dir, nil, "-c", "gpg.ssh.allowedSignersFile="+trusted, "verify-commit", ref); err != nil {
			t.Errorf("git verify-commit %s: %v", ref, err)
		}
		if _, err := gittest.Run(rt.dir, nil, "-c", "gpg.ssh.allowedSignersFile="+other, "verify-commit", ref); err == nil {
			t.Errorf("git verify-commit %s accepts a signature by a key it does not trust", ref)
		}
	}
	if got := gittest.Git(t, rt.dir, "fsck", "--strict", "--no-dangling"); got != "" {
		t.Errorf("git fsck --strict: %s", got)
	}
}

// TestRenderInvalidSource breaks nuon.yaml: exit code 1, every problem on
// stderr as FILE:LINE, and no ref moved.
func TestRenderInvalidSource(t *testing.T) {
	rt := localRenderTenant(t)
	rt.mustRun(t, nil)
	rt.edit(t, "nuon.yaml", "dependsOn: [network]", "dependsOn: [network")
	before := gitRefs(t, rt.dir)

	r := rt.run(t, nil)
	var ee cli.ExitError
	if !errors.As(r.err, &ee) || ee.Code != 1 {
		t.Fatalf("nuon render: %v, want exit code 1", r.err)
	}
	if !strings.Contains(r.stderr, "nuon.yaml:") || !strings.Contains(r.stderr, "no ref moved") {
		t.Errorf("stderr does not locate the problem in nuon.yaml:\n%s", r.stderr)
	}
	line := strings.SplitN(r.stderr, "\n", 2)[0]
	if file, rest, _ := strings.Cut(line, ":"); file != "nuon.yaml" || !strings.ContainsAny(rest[:1], "0123456789") {
		t.Errorf("first line %q is not nuon.yaml:LINE", line)
	}
	if diff := cmp.Diff(before, gitRefs(t, rt.dir)); diff != "" {
		t.Errorf("refs moved (-before +after):\n%s", diff)
	}

	r = rt.run(t, func(o *renderOptions) { o.output = "json" })
	var rep renderReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--output json: %v\n%s", err, r.stdout)
	}
	if len(rep.Problems) == 0 || rep.Problems[0].File != "nuon.yaml" || rep.Problems[0].Line == 0 {
		t.Errorf("--output json problems: %+v", rep.Problems)
	}

	// The binary exits with the code.
	cmd := exec.Command(nuonBinary(t), "render", "--repo", rt.dir, "--key", filepath.Join(repoRoot(), "fixtures", "keys", "render"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var xe *exec.ExitError
	if !errors.As(err, &xe) || xe.ExitCode() != 1 {
		t.Errorf("nuon render exits with %v, want 1", err)
	}
	if !strings.HasPrefix(stderr.String(), "nuon.yaml:") {
		t.Errorf("nuon render stderr:\n%s", stderr.String())
	}
	if diff := cmp.Diff(before, gitRefs(t, rt.dir)); diff != "" {
		t.Errorf("refs moved (-before +after):\n%s", diff)
	}
}

// TestRenderOneBadInstall breaks one install's file: every other install
// is rendered and its ref moves, the bad one keeps its ref, the problem is
// named as FILE:LINE, and the command exits 1.
func TestRenderOneBadInstall(t *testing.T) {
	rt := localRenderTenant(t)
	rt.mustRun(t, nil)
	rt.edit(t, "installs/globex.yaml", "channel: beta", "channel: nightly")
	rt.edit(t, "nuon.yaml", "timeout: 5m", "timeout: 6m")
	before := gitRefs(t, rt.dir)

	r := rt.run(t, nil)
	var ee cli.ExitError
	if !errors.As(r.err, &ee) || ee.Code != 1 {
		t.Fatalf("nuon render: %v, want exit code 1\n%s", r.err, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "installs/globex.yaml:1:") || !strings.Contains(r.stderr, "not rendered") || !strings.Contains(r.stderr, "globex") {
		t.Errorf("stderr does not name the bad install:\n%s", r.stderr)
	}
	after := gitRefs(t, rt.dir)
	for _, id := range fixtureInstalls(t) {
		ref := plumbing.ReferenceName(schemas.InstallRef(id)).String()
		moved := after[ref] != before[ref]
		if want := id != "globex"; moved != want {
			t.Errorf("%s moved: %v, want %v", ref, moved, want)
		}
	}
}

// objectCount is what `git count-objects -v` counts, loose and packed.
func objectCount(t *testing.T, dir string) string {
	t.Helper()
	var keep []string
	for _, line := range strings.Split(gittest.Git(t, dir, "count-objects", "-v"), "\n") {
		if strings.HasPrefix(line, "count:") || strings.HasPrefix(line, "in-pack:") || strings.HasPrefix(line, "packs:") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, " ")
}

// TestRenderDryRun promotes a version on main and asks what would change:
// nothing is written, the text output holds a unified diff per changed
// install and --output json lists the installs with their diffs.
func TestRenderDryRun(t *testing.T) {
	rt := localRenderTenant(t)
	rt.mustRun(t, nil)
	rt.edit(t, "channels/stable.yaml", "\n  api: 2.3.0\n", "\n  api: 2.4.0\n")
	refs, objects := gitRefs(t, rt.dir), objectCount(t, rt.dir)

	out := rt.mustRun(t, func(o *renderOptions) { o.dryRun = true })
	if !strings.Contains(out.stdout, "would render 1 of ") {
		t.Errorf("dry run output:\n%s", out.stdout)
	}
	for _, want := range []string{
		"### install acme (changed, generation 2)",
		"diff --git a/installs/acme/components/api.json b/installs/acme/components/api.json",
		"--- a/installs/acme/components/api.json",
		"+++ b/installs/acme/components/api.json",
		"-  \"version\": \"2.3.0\",",
		"+  \"version\": \"2.4.0\",",
	} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.stdout)
		}
	}
	if strings.Contains(out.stdout, "### install globex") || strings.Contains(out.stdout, "### install initech") {
		t.Errorf("dry run shows a diff for an unchanged install:\n%s", out.stdout)
	}

	out = rt.mustRun(t, func(o *renderOptions) { o.dryRun, o.output = true, "json" })
	var rep renderReport
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out.stdout)
	}
	if !rep.DryRun || rep.Changed != 1 {
		t.Errorf("report: dryRun %t, changed %d", rep.DryRun, rep.Changed)
	}
	byID := map[string]renderer.InstallResult{}
	for _, in := range rep.Installs {
		byID[in.ID] = in
	}
	if acme := byID["acme"]; acme.Change != renderer.Changed || acme.Generation != 2 || !strings.Contains(acme.Diff, "+  \"version\": \"2.4.0\",") {
		t.Errorf("acme in the report: %+v", acme)
	}
	for _, id := range []string{"globex", "initech"} {
		if in := byID[id]; in.Change != renderer.Unchanged || in.Diff != "" {
			t.Errorf("%s in the report: %+v", id, in)
		}
	}

	if diff := cmp.Diff(refs, gitRefs(t, rt.dir)); diff != "" {
		t.Errorf("dry run moved refs (-before +after):\n%s", diff)
	}
	if got := objectCount(t, rt.dir); got != objects {
		t.Errorf("dry run wrote objects: %s, then %s", objects, got)
	}
}

// TestRenderOverHTTP renders into a repository on a smart-HTTP server by
// URL: every ref arrives in one push; a second run pushes nothing.
func TestRenderOverHTTP(t *testing.T) {
	srv := gittest.NewServer(t)
	dir := srv.InitBare(t, "tenant.git")
	rt := newRenderTenant(t, dir, srv.URL("tenant.git"))
	rt.mustRun(t, nil)
	remote := lsRemote(t, srv.URL("tenant.git"))
	for _, id := range fixtureInstalls(t) {
		if remote[plumbing.ReferenceName(schemas.InstallRef(id)).String()] == "" {
			t.Errorf("the server has no %s", plumbing.ReferenceName(schemas.InstallRef(id)))
		}
	}
	if remote[plumbing.ReferenceName(schemas.RenderedRef).String()] == "" {
		t.Errorf("the server has no %s", plumbing.ReferenceName(schemas.RenderedRef))
	}
	trusted := allowedSigners(t, "nuon-render", "render")
	for name := range remote {
		if strings.HasPrefix(name, "refs/heads/nuon/") {
			if _, err := gittest.Run(dir, nil, "-c", "gpg.ssh.allowedSignersFile="+trusted, "verify-commit", name); err != nil {
				t.Errorf("git verify-commit %s on the server: %v", name, err)
			}
		}
	}

	srv.Reset()
	out := rt.mustRun(t, nil)
	if !strings.Contains(out.stdout, "nothing changed; no ref moved") {
		t.Errorf("second run:\n%s", out.stdout)
	}
	for _, r := range srv.Log() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "git-receive-pack") {
			t.Errorf("the second run pushed: %+v", r)
		}
	}
	if diff := cmp.Diff(remote, lsRemote(t, srv.URL("tenant.git"))); diff != "" {
		t.Errorf("server refs moved (-before +after):\n%s", diff)
	}
}

// TestRenderPushRace has another writer move the rendered ref on the
// server while the push is received (a pre-receive hook does it): the
// atomic push moves no ref, and the command renders again and succeeds.
func TestRenderPushRace(t *testing.T) {
	srv := gittest.NewServer(t)
	dir := srv.InitBare(t, "tenant.git")
	rt := newRenderTenant(t, dir, srv.URL("tenant.git"))
	rt.mustRun(t, nil)
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	other := gittest.Git(t, dir, "commit-tree", rendered+"^{tree}", "-p", rendered, "-m", "another writer")
	armed := filepath.Join(t.TempDir(), "armed")
	hook := fmt.Sprintf(`#!/bin/sh
cat >/dev/null
[ -e %[1]q ] || exit 0
rm -f %[1]q
unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
exec git update-ref %[2]s %[3]s
`, armed, rendered, other)
	if err := os.WriteFile(filepath.Join(dir, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	rt.edit(t, "channels/stable.yaml", "\n  api: 2.3.0\n", "\n  api: 2.4.0\n")

	// Without retries the command fails and no ref moves but the other
	// writer's.
	if err := os.WriteFile(armed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := gitRefs(t, dir)
	r := rt.run(t, func(o *renderOptions) { o.retries = 0 })
	if !errors.Is(r.err, gitrepo.ErrStale) {
		t.Fatalf("nuon render --retries 0: %v, want a stale ref\n%s", r.err, r.stderr)
	}
	before[rendered] = other
	if diff := cmp.Diff(before, gitRefs(t, dir)); diff != "" {
		t.Errorf("a rejected push moved refs (-want +got):\n%s", diff)
	}

	// With retries it renders on top of the other writer.
	gittest.Git(t, dir, "update-ref", rendered, gittest.Git(t, dir, "rev-parse", rendered+"^"))
	if err := os.WriteFile(armed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Reset()
	r = rt.mustRun(t, nil)
	if !strings.Contains(r.stderr, "another writer moved a ref") {
		t.Errorf("no retry logged:\n%s", r.stderr)
	}
	pushes := 0
	for _, req := range srv.Log() {
		if req.Method == "POST" && strings.HasSuffix(req.Path, "git-receive-pack") {
			pushes++
		}
	}
	if pushes != 2 {
		t.Errorf("%d pushes, want a rejected one and a good one", pushes)
	}
	// The other writer did not sign: its commit is kept as the second
	// parent, the renderer's own history continuing as the first.
	if got := gittest.Git(t, dir, "rev-parse", rendered+"^2"); got != other {
		t.Errorf("rendered second parent %s, want the other writer's %s", got, other)
	}
	if got := gittest.Git(t, dir, "rev-parse", plumbing.ReferenceName(schemas.InstallRef("acme")).String()+"^{tree}"); got != gittest.Git(t, dir, "rev-parse", rendered+":"+schemas.RenderedInstallPath("acme")) {
		t.Errorf("acme's ref does not hold its rendered tree")
	}
}

// lsRemote lists a remote's refs with the git CLI.
func lsRemote(t *testing.T, url string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(gittest.Git(t, "", "ls-remote", url), "\n") {
		if h, name, ok := strings.Cut(line, "\t"); ok {
			out[name] = h
		}
	}
	return out
}

// TestRenderReportStreamed checks that the report written one install at
// a time is, byte for byte, what json.Encoder writes of the whole: with
// no install, one, several, with text json escapes (HTML, quotes,
// newlines, non-ASCII), problems, warnings and rollouts after the
// installs, and with an install whose fields might look like the place
// the installs go.
func TestRenderReportStreamed(t *testing.T) {
	in := func(id string, c renderer.Change) renderer.InstallResult {
		return renderer.InstallResult{ID: id, Change: c, Generation: 3, Commit: renderer.ObjectID(plumbing.NewHash(strings.Repeat("a", 40))), Tree: renderer.ObjectID(plumbing.NewHash(strings.Repeat("b", 40)))}
	}
	odd := in("i2", renderer.Changed)
	odd.Diff = "--- a\n+++ b\n-<script>&</script>\n+\"installs\": []\n+é\t\u2028\n"
	odd.Error = "\n  \"installs\": []"
	tests := []struct {
		name string
		rep  renderReport
	}{
		{"no install", renderReport{Source: "s", Installs: []renderer.InstallResult{}}},
		{"nil installs", renderReport{Source: "s"}},
		{"one", renderReport{Source: "s", Rendered: "r", Changed: 1, Installs: []renderer.InstallResult{in("i1", renderer.Added)}}},
		{"several, with the rest after them", renderReport{
			Source: "s", DryRun: true, Changed: 2,
			Installs: []renderer.InstallResult{in("i1", renderer.Unchanged), odd, {ID: "i3", Change: renderer.Failed, Error: "bad <file>"}},
			Problems: schemas.Problems{{File: "installs/i3.yaml", Line: 2, Column: 1, Field: "channel", Message: "unknown & \"odd\""}},
			Warnings: []string{"a <warning>"},
			Rollouts: []*rollout.Waves{{Channel: "stable", Declared: true, Waves: []rollout.Wave{{Number: 1, Name: "canary", Installs: []string{"i1"}}}}},
		}},
	}
	// More installs than a block, the last block short: blocks marshaled
	// in parallel are written in order, each comma once.
	var many []renderer.InstallResult
	for i := range 2*reportBlock + 7 {
		r := in(fmt.Sprintf("i%06d", i), renderer.Added)
		r.Generation = int64(i)
		many = append(many, r)
	}
	tests = append(tests, struct {
		name string
		rep  renderReport
	}{"blocks", renderReport{Source: "s", Changed: len(many), Installs: many}},
		struct {
			name string
			rep  renderReport
		}{"one block exactly", renderReport{Source: "s", Installs: many[:reportBlock]}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetIndent("", "  ")
			if err := enc.Encode(tc.rep); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := writeReport(&got, tc.rep); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.String(), got.String()); diff != "" {
				t.Errorf("streamed report differs from json.Encoder's (-want +got):\n%s", diff)
			}
		})
	}
}
