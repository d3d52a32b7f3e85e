package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// TestPushTooLarge: git pushing a status over the server's bound is told
// why, nothing moves, and the refusal is logged and counted.
func TestPushTooLarge(t *testing.T) {
	e := newEnv(t)
	acme := e.proxy("acme", e.keys["acme"])
	local := localRepo(t)
	status := schemas.StatusRef("acme")
	noise := make([]byte, 10<<20) // in hex, 20 MB that deflate to about 11
	rand.Read(noise)
	blob := e.mustGitIn(local, hex.EncodeToString(noise), "hash-object", "-w", "--stdin")
	tree := e.mustGitIn(local, "100644 blob "+blob+"\tstatus.json\n", "mktree")
	c := e.mustGit(local, "-c", "gpg.format=ssh", "-c", "user.signingkey="+e.keyFiles["acme"],
		"commit-tree", "-S", tree, "-m", "status\n\n"+schemas.TrailerInstall+": acme")
	out, err := git(local, "push", acme, c+":"+status)
	if err == nil {
		t.Fatalf("push succeeded:\n%s", out)
	}
	t.Logf("git push:\n%s", out)
	if !strings.Contains(out, "push too large") {
		t.Errorf("git output lacks the reason:\n%s", out)
	}
	if got := e.serverRef(status); got != "" {
		t.Fatalf("%s moved to %s", status, got)
	}
	if !strings.Contains(e.log.String(), "push too large") {
		t.Errorf("refusal not logged:\n%s", e.log.String())
	}
	if n := scrape(t, e.http.URL+"/metrics")[`nuon_server_refusals_total{reason="push_too_large"}`]; n != 1 {
		t.Errorf("%v refusals counted, want 1", n)
	}
}

// TestPushThinAndRestart pushes with git a status whose large file changed
// by one line (git sends it as a delta of what the server holds) beside a
// directory it did not change (a tree the push names but does not send);
// then a new server on the same repository, as after a crash, serves the
// accepted status and takes the next one; git fsck finds the repository
// whole.
func TestPushThinAndRestart(t *testing.T) {
	e := newEnv(t)
	acme := e.proxy("acme", e.keys["acme"])
	status := schemas.StatusRef("acme")
	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "init", "--quiet", work)
	var text strings.Builder
	for i := range 3000 {
		text.WriteString("component " + strings.Repeat("x", i%40) + " applied\n")
	}
	write := func(name, content string) {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		e.mustGit(work, "add", ".")
		e.mustGit(work, "-c", "gpg.format=ssh", "-c", "user.signingkey="+e.keyFiles["acme"],
			"commit", "--quiet", "-S", "-m", msg+"\n\n"+schemas.TrailerInstall+": acme")
		return e.mustGit(work, "rev-parse", "HEAD")
	}
	write("status.json", text.String())
	write("components/web/status.json", `{"phase":"applied"}`)
	first := commit("first")
	e.mustGit(work, "push", "--quiet", acme, first+":"+status)
	write("status.json", strings.Replace(text.String(), "component  applied", "component  drifted", 1))
	second := commit("second")
	out := e.mustGit(work, "push", "--verbose", acme, second+":"+status)
	t.Logf("git push:\n%s", out)
	if got := e.serverRef(status); got != second {
		t.Fatalf("status ref %q, want %s", got, second)
	}

	// A new server on the same repository: what was answered "ok" is there.
	e.srv.Close()
	srv, err := server.New(context.Background(), server.Config{Dir: e.dir, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	target, _ := url.Parse(hs.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = (&request.Signer{Install: "acme", Key: e.keys["acme"]}).Transport(nil)
	p := httptest.NewServer(rp)
	t.Cleanup(p.Close)
	acme = p.URL + "/tenant.git"
	if out := e.mustGit(work, "ls-remote", acme, status); !strings.HasPrefix(out, second) {
		t.Fatalf("after restart the server lists %q, want %s", out, second)
	}
	write("components/web/status.json", `{"phase":"failed"}`)
	third := commit("third")
	e.mustGit(work, "push", "--quiet", acme, third+":"+status)
	if got := e.serverRef(status); got != third {
		t.Fatalf("status ref %q, want %s", got, third)
	}
	gittest.Git(t, e.dir, "fsck", "--strict", "--no-dangling")
}

// TestConcurrentInstalls: installs pushing at the same time do not get in
// each other's way; every push is accepted and every ref ends on its last
// commit.
func TestConcurrentInstalls(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	agents := map[string]*statusAgent{}
	errs := make(chan error, 100)
	for _, id := range []string{"acme", "globex", "initech"} {
		a := newStatusAgent(id, e.http.URL+"/tenant.git", e.keys[id], plumbing.ZeroHash)
		agents[id] = a
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				if err := a.push(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for id, a := range agents {
		if got := e.serverRef(schemas.StatusRef(id)); got != a.head.String() {
			t.Errorf("%s: status ref %q, want %s", id, got, a.head)
		}
	}
}

// TestPushReportPlain pushes with a bare command list that asks for
// report-status without the side-band: the answer is plain pkt-lines, as
// git receive-pack writes them.
func TestPushReportPlain(t *testing.T) {
	e := newEnv(t)
	a := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	h, err := a.commit()
	if err != nil {
		t.Fatal(err)
	}
	bt := gitobj.NewBatch()
	objs, err := a.st.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		t.Fatal(err)
	}
	if err := objs.ForEach(func(o plumbing.EncodedObject) error { _, err := bt.AddEncoded(o); return err }); err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	line := plumbing.ZeroHash.String() + " " + h.String() + " " + schemas.StatusRef("acme") + "\x00report-status\n"
	fmt.Fprintf(&body, "%04x%s0000", len(line)+4, line)
	if err := bt.WritePack(&body); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/tenant.git/git-receive-pack", &body)
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	if err := (&request.Signer{Install: "acme", Key: e.keys["acme"]}).Sign(req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	want := "000eunpack ok\n" + fmt.Sprintf("%04x", len("ok "+schemas.StatusRef("acme")+"\n")+4) + "ok " + schemas.StatusRef("acme") + "\n0000"
	if string(got) != want {
		t.Fatalf("report %q, want %q", got, want)
	}
	if ref := e.serverRef(schemas.StatusRef("acme")); ref != h.String() {
		t.Fatalf("status ref %q, want %s", ref, h)
	}
}
