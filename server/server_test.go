package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

const (
	fixtureKeys   = "../fixtures/keys"
	fixtureTenant = "../fixtures/tenant"
)

// syncBuffer is a log sink tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a tenant upstream, the server's repository and the server on
// loopback.
type env struct {
	t        *testing.T
	upstream string // bare repository on "the git host"
	dir      string // the server's repository
	srv      *server.Server
	http     *httptest.Server
	log      *syncBuffer
	keys     map[string]*signature.Signer
	keyFiles map[string]string
	cancel   context.CancelFunc
}

func loadKey(t testing.TB, name string) (*signature.Signer, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureKeys, name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := signature.ParseSigner(b)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, log: &syncBuffer{}, keys: map[string]*signature.Signer{}, keyFiles: map[string]string{}}
	for _, n := range []string{"acme", "globex", "initech", "render"} {
		e.keys[n], e.keyFiles[n] = loadKey(t, n)
	}
	root := t.TempDir()
	e.upstream = filepath.Join(root, "upstream.git")
	gittest.InitBare(t, e.upstream)
	src := filepath.Join(root, "src")
	gittest.Git(t, "", "init", "--quiet", src)
	if err := os.CopyFS(src, os.DirFS(fixtureTenant)); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, e.upstream, "main", src, "tenant")
	e.dir = filepath.Join(root, "served.git")
	gittest.InitBare(t, e.dir)

	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	srv, err := server.New(ctx, server.Config{
		Dir:          e.dir,
		RenderKey:    e.keys["render"],
		Upstream:     e.upstream,
		PollInterval: time.Hour,
		MirrorDelay:  10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(e.log, nil)),
		HookSecret:   testHookSecret,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	if err := srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	e.http = httptest.NewServer(srv)
	t.Cleanup(func() {
		e.http.Close()
		cancel()
		<-done
		srv.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", e.log.String())
		}
	})
	return e
}

// proxy is a signing proxy for the real git client: every request it
// forwards to the server is signed with install's key, as the agent signs
// its own.
func (e *env) proxy(install string, key *signature.Signer) string {
	target, _ := url.Parse(e.http.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = (&request.Signer{Install: install, Key: key}).Transport(nil)
	p := httptest.NewServer(rp)
	e.t.Cleanup(p.Close)
	return p.URL + "/tenant.git"
}

// git runs the git client; it returns combined output and error.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "protocol.version=2"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@nuon.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@nuon.invalid")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *env) mustGit(dir string, args ...string) string {
	e.t.Helper()
	out, err := git(dir, args...)
	if err != nil {
		e.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// statusCommit makes a status commit in the local repository dir on top of
// parent ("" for none), signed with keyFile ("" for unsigned), naming
// install.
func (e *env) statusCommit(dir, install, parent, keyFile, note string) string {
	e.t.Helper()
	tree := e.mustGit(dir, "mktree") // the empty tree
	if note != "" {
		blob := e.mustGitIn(dir, note, "hash-object", "-w", "--stdin")
		tree = e.mustGitIn(dir, "100644 blob "+blob+"\tstatus.json\n", "mktree")
	}
	args := []string{}
	if keyFile != "" {
		args = append(args, "-c", "gpg.format=ssh", "-c", "user.signingkey="+keyFile)
	}
	args = append(args, "commit-tree", tree, "-m", "status "+note+"\n\n"+schemas.TrailerInstall+": "+install)
	if keyFile != "" {
		args = append(args, "-S")
	}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	return e.mustGit(dir, args...)
}

func (e *env) mustGitIn(dir, stdin string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (e *env) serverRef(name string) string {
	out, _ := gittest.Run(e.dir, nil, "rev-parse", "--verify", "--quiet", name)
	return out
}

func localRepo(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "local.git")
	gittest.InitBare(t, d)
	return d
}

func TestReadScopedToInstall(t *testing.T) {
	e := newEnv(t)
	acme := e.proxy("acme", e.keys["acme"])
	acmeRef, globexRef := schemas.InstallRef("acme"), schemas.InstallRef("globex")
	globexTip := e.serverRef(globexRef)
	if globexTip == "" || e.serverRef(acmeRef) == "" {
		t.Fatal("render made no install refs")
	}
	local := localRepo(t)

	out := e.mustGit(local, "ls-remote", acme)
	if !strings.Contains(out, acmeRef) || strings.Contains(out, "globex") || strings.Contains(out, "main") || strings.Contains(out, globexTip) {
		t.Fatalf("ls-remote as acme:\n%s", out)
	}
	e.mustGit(local, "fetch", "--quiet", acme, acmeRef+":"+acmeRef)
	if got, want := e.mustGit(local, "rev-parse", acmeRef), e.serverRef(acmeRef); got != want {
		t.Fatalf("fetched %s, server has %s", got, want)
	}

	for _, tc := range []struct{ name, spec string }{
		{"another install's commit by hash", globexTip},
		{"another install's ref", globexRef + ":refs/x"},
		{"main", "refs/heads/main:refs/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := git(local, "fetch", acme, tc.spec)
			if err == nil {
				t.Fatalf("fetch %s succeeded:\n%s", tc.spec, out)
			}
			if strings.Contains(out, "globex") && !strings.Contains(tc.spec, "globex") {
				t.Fatalf("error names another install:\n%s", out)
			}
			if _, err := gittest.Run(local, nil, "cat-file", "-e", globexTip); err == nil {
				t.Fatal("globex's commit reached acme")
			}
		})
	}
	if !strings.Contains(e.log.String(), "not our ref") {
		t.Fatalf("refused want not logged:\n%s", e.log.String())
	}
}

func TestPushScopedToInstall(t *testing.T) {
	e := newEnv(t)
	acme := e.proxy("acme", e.keys["acme"])
	local := localRepo(t)
	status := schemas.StatusRef("acme")

	first := e.statusCommit(local, "acme", "", e.keyFiles["acme"], "one")
	e.mustGit(local, "push", "--quiet", acme, first+":"+status)
	if got := e.serverRef(status); got != first {
		t.Fatalf("status ref %q, want %q", got, first)
	}
	second := e.statusCommit(local, "acme", first, e.keyFiles["acme"], "two")
	e.mustGit(local, "push", "--quiet", acme, second+":"+status)

	for _, tc := range []struct {
		name, commit, ref string
		force             bool
		reason            string
	}{
		{"another install's status ref", e.statusCommit(local, "globex", "", e.keyFiles["acme"], "x"), schemas.StatusRef("globex"), false, "only its own status ref"},
		{"its own desired ref", e.statusCommit(local, "acme", "", e.keyFiles["acme"], "x"), schemas.InstallRef("acme"), true, "only its own status ref"},
		{"main", e.statusCommit(local, "acme", "", e.keyFiles["acme"], "x"), "refs/heads/main", true, "only its own status ref"},
		{"signed by another install's key", e.statusCommit(local, "acme", second, e.keyFiles["globex"], "x"), status, false, "not trusted"},
		{"unsigned", e.statusCommit(local, "acme", second, "", "x"), status, false, "not signed"},
		{"naming another install", e.statusCommit(local, "globex", second, e.keyFiles["acme"], "x"), status, false, "trailer"},
		{"not a fast-forward", e.statusCommit(local, "acme", first, e.keyFiles["acme"], "y"), status, true, "fast-forward"},
		{"signed chain with an unsigned commit inside", e.statusCommit(local, "acme", e.statusCommit(local, "acme", second, "", "u"), e.keyFiles["acme"], "z"), status, false, "not signed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.serverRef(tc.ref)
			args := []string{"push", acme, tc.commit + ":" + tc.ref}
			if tc.force {
				args = append(args, "--force")
			}
			out, err := git(local, args...)
			if err == nil {
				t.Fatalf("push succeeded:\n%s", out)
			}
			if !strings.Contains(out, tc.reason) {
				t.Errorf("git output lacks %q:\n%s", tc.reason, out)
			}
			if after := e.serverRef(tc.ref); after != before {
				t.Fatalf("%s moved from %q to %q", tc.ref, before, after)
			}
		})
	}
	if got := e.serverRef(status); got != second {
		t.Fatalf("status ref %q, want %q", got, second)
	}
	// The accepted status is mirrored upstream.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := gittest.Run(e.upstream, nil, "rev-parse", "--verify", "--quiet", status)
		if got == second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream status ref %q, want %q", got, second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(e.log.String(), "git request refused") {
		t.Fatal("refusals not logged")
	}
}

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	for _, tc := range []struct {
		name   string
		sign   *request.Signer
		reason string
	}{
		{"missing", nil, "not signed"},
		{"expired", &request.Signer{Install: "acme", Key: e.keys["acme"], Now: func() time.Time { return now.Add(-time.Hour) }}, "expired"},
		{"another install's key", &request.Signer{Install: "acme", Key: e.keys["globex"]}, "does not match"},
		{"unknown install", &request.Signer{Install: "umbrella", Key: e.keys["acme"]}, "unknown install"},
		{"render key", &request.Signer{Install: "acme", Key: e.keys["render"]}, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.http.URL+"/tenant.git/info/refs?service=git-upload-pack", nil)
			req.Header.Set("Git-Protocol", "version=2")
			if tc.sign != nil {
				if err := tc.sign.Sign(req); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", resp.StatusCode)
			}
			if !strings.Contains(e.log.String(), tc.reason) {
				t.Fatalf("log lacks %q:\n%s", tc.reason, e.log.String())
			}
		})
	}
}

// TestAgentRemote reads through the agent's own client with its request
// signer: one small request per poll, fetch of its own state only.
func TestAgentRemote(t *testing.T) {
	e := newEnv(t)
	s := &request.Signer{Install: "acme", Key: e.keys["acme"]}
	r := agent.NewRemote(e.http.URL+"/tenant.git", agent.WithRequestSigner(s))
	ctx := context.Background()
	own := plumbing.ReferenceName(schemas.InstallRef("acme"))
	heads, err := r.Heads(ctx, own, plumbing.ReferenceName(schemas.InstallRef("globex")))
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != 1 || heads[own].String() != e.serverRef(own.String()) {
		t.Fatalf("heads %v", heads)
	}
	st := memory.NewStorage()
	if err := r.Fetch(ctx, st, heads[own]); err != nil {
		t.Fatal(err)
	}
	if err := r.Fetch(ctx, memory.NewStorage(), plumbing.NewHash(e.serverRef(schemas.InstallRef("globex")))); err == nil {
		t.Fatal("fetched globex's state as acme")
	}

	// Pushes with the agent's go-git client: accepted, then a refusal it
	// understands (a second agent that missed the first push is stale).
	a := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.serverRef(schemas.StatusRef("acme")); got != a.head.String() {
		t.Fatalf("status ref %q, want %s", got, a.head)
	}
	stale := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	stale.n = 100 // another status than a's
	err = stale.push(ctx)
	if err == nil {
		t.Fatal("a push from a stale parent was accepted")
	}
	t.Logf("refused: %v", err)
	if got := e.serverRef(schemas.StatusRef("acme")); got != a.head.String() {
		t.Fatalf("status ref moved to %q", got)
	}
	// acme pushing globex's status ref: refused by the server, and go-git
	// reads the refusal.
	other := plumbing.ReferenceName(schemas.StatusRef("globex"))
	if err := a.st.SetReference(plumbing.NewHashReference(other, a.head)); err != nil {
		t.Fatal(err)
	}
	err = a.remote.Push(ctx, a.st, other, plumbing.ZeroHash, a.head)
	if err == nil || !strings.Contains(err.Error(), "only its own status ref") {
		t.Fatalf("push to globex's ref: %v", err)
	}
	if got := e.serverRef(other.String()); got != "" {
		t.Fatalf("globex's status ref is %s", got)
	}
}

// TestRenderOnChange changes main upstream, posts the webhook and waits for
// the affected install's ref to move, in the server and upstream.
func TestRenderOnChange(t *testing.T) {
	e := newEnv(t)
	acmeRef, globexRef := schemas.InstallRef("acme"), schemas.InstallRef("globex")
	acmeBefore, globexBefore := e.serverRef(acmeRef), e.serverRef(globexRef)

	work := filepath.Join(t.TempDir(), "work")
	// --no-local: the server may be mirroring into upstream while it is cloned.
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	p := filepath.Join(work, "installs", "acme.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("acme.shop.example"), []byte("acme.store.example"), 1)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "commit", "--quiet", "-am", "acme: new domain")
	e.mustGit(work, "push", "--quiet", "origin", "main")

	start := time.Now()
	e.hook()
	acme := e.proxy("acme", e.keys["acme"])
	for {
		out, _ := git(t.TempDir(), "ls-remote", acme, acmeRef)
		if out != "" && !strings.HasPrefix(out, acmeBefore) {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("acme's ref did not move: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("render on change: %s", time.Since(start))
	if got := e.serverRef(globexRef); got != globexBefore {
		t.Fatalf("globex moved: %s → %s", globexBefore, got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := gittest.Run(e.upstream, nil, "rev-parse", "--verify", "--quiet", acmeRef)
		if got == e.serverRef(acmeRef) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream %s = %q, server %q", acmeRef, got, e.serverRef(acmeRef))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInstallAddedOnMain adds an install on main upstream; after the
// webhook its agent authenticates and reads its new ref, without a restart.
func TestInstallAddedOnMain(t *testing.T) {
	e := newEnv(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "umbrella")
	if err != nil {
		t.Fatal(err)
	}
	key, err := signature.ParseSigner(pem.EncodeToMemory(block))
	if err != nil {
		t.Fatal(err)
	}
	url := e.proxy("umbrella", key)
	if out, err := git(t.TempDir(), "ls-remote", url); err == nil {
		t.Fatalf("an install main does not know was served:\n%s", out)
	}

	work := filepath.Join(t.TempDir(), "work")
	// --no-local: the server may be mirroring into upstream while it is cloned.
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	b, err := os.ReadFile(filepath.Join(work, "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "agentKey:") {
			l = "agentKey: " + key.AuthorizedKey()
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(filepath.Join(work, "installs", "umbrella.yaml"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "add", ".")
	e.mustGit(work, "commit", "--quiet", "-m", "add umbrella")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	e.hook()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := git(t.TempDir(), "ls-remote", url)
		if err == nil && strings.Contains(out, schemas.InstallRef("umbrella")) {
			if strings.Contains(out, "acme") {
				t.Fatalf("umbrella sees acme:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("umbrella not served after the webhook: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMirrorAfterRestart: a status accepted but not yet mirrored when the
// server stopped reaches upstream when a new server starts.
func TestMirrorAfterRestart(t *testing.T) {
	e := newEnv(t)
	local := localRepo(t)
	status := schemas.StatusRef("acme")
	c := e.statusCommit(local, "acme", "", e.keyFiles["acme"], "offline")
	// Let the running server's first mirror push finish.
	for deadline := time.Now().Add(20 * time.Second); ; {
		got, _ := gittest.Run(e.upstream, nil, "rev-parse", "--verify", "--quiet", schemas.RenderedRef)
		if got != "" && got == e.serverRef(schemas.RenderedRef) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first mirror did not happen")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// As if accepted just before a crash: in the repository, not upstream.
	e.mustGit(local, "push", "--quiet", e.dir, c+":"+status)
	if got, _ := gittest.Run(e.upstream, nil, "rev-parse", "--verify", "--quiet", status); got != "" {
		t.Fatalf("upstream already has %s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{Dir: e.dir, Upstream: e.upstream, PollInterval: time.Hour, MirrorDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; srv.Close() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, _ := gittest.Run(e.upstream, nil, "rev-parse", "--verify", "--quiet", status)
		if got == c {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream %s = %q, want %q", status, got, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRepoConfig: a rendering server stores main's loose objects
// uncompressed in its repository (what it fetched is read back as a
// copy), unless the operator set the key; a server that does not render
// leaves the configuration alone.
func TestRepoConfig(t *testing.T) {
	e := newEnv(t)
	if got := strings.TrimSpace(e.mustGit(e.dir, "config", "--local", "core.looseCompression")); got != "0" {
		t.Errorf("core.looseCompression = %q, want 0", got)
	}
	// main's installs/ tree, fetched from upstream: stored, its loose
	// file is larger than its content.
	tree := strings.TrimSpace(e.mustGit(e.dir, "rev-parse", "main:installs"))
	size, _ := strconv.Atoi(strings.TrimSpace(e.mustGit(e.dir, "cat-file", "-s", tree)))
	fi, err := os.Stat(filepath.Join(e.dir, "objects", tree[:2], tree[2:]))
	if err != nil {
		t.Fatalf("installs/ tree is not loose: %v", err)
	}
	if fi.Size() <= int64(size) {
		t.Errorf("installs/ tree: %d bytes on disk for %d of content: compressed", fi.Size(), size)
	}

	render, _ := loadKey(t, "render")
	for _, tc := range []struct {
		name string
		set  string
		key  *signature.Signer
		want string
	}{
		{"operator's value", "1", render, "1"},
		{"not rendering", "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "served.git")
			gittest.InitBare(t, dir)
			if tc.set != "" {
				gittest.Git(t, dir, "config", "core.looseCompression", tc.set)
			}
			srv, err := server.New(context.Background(), server.Config{Dir: dir, RenderKey: tc.key, PollInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			got, _ := git(dir, "config", "--local", "core.looseCompression")
			if strings.TrimSpace(got) != tc.want {
				t.Errorf("core.looseCompression = %q, want %q", strings.TrimSpace(got), tc.want)
			}
		})
	}
}
