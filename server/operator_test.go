package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
	"nuon.dev/nuon/trust"
)

// operatorSigner signs HTTP requests as an operator's key does.
func operatorSigner(key *signature.Signer) *request.Signer {
	return &request.Signer{Install: requests.KeyID(key.PublicKey()), Key: key}
}

// operatorProxy is a signing proxy for the real git client, as an
// operator's CLI signs; it returns the operator endpoint's URL.
func (e *env) operatorProxy(key *signature.Signer) string {
	target, _ := url.Parse(e.http.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = operatorSigner(key).Transport(nil)
	p := httptest.NewServer(rp)
	e.t.Cleanup(p.Close)
	return p.URL + server.OperatorPath
}

// newRequest builds a signed request commit on parent, signed by key as
// requester, in a batch of its own; it returns the submission.
func newRequest(t *testing.T, key *signature.Signer, requester, install, id string, parent plumbing.Hash) (schemas.SignedRequest, plumbing.Hash) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	b := gitobj.NewBatch()
	r := &schemas.Request{APIVersion: schemas.APIVersion, Kind: schemas.KindRequest, ID: id, Install: install,
		Type: schemas.RequestLogs, Component: "network", Requester: requester, Created: now, Deadline: now.Add(time.Hour)}
	h, err := requests.File(b, r, parent, key)
	if err != nil {
		t.Fatal(err)
	}
	_, raw, ok := b.Get(h)
	if !ok {
		t.Fatal("no commit in the batch")
	}
	data, _ := json.MarshalIndent(r, "", "  ")
	return schemas.SignedRequest{File: string(data) + "\n", Commit: string(raw)}, h
}

// postRequest files sub at the server signed with key; it returns the
// status and the answer.
func (e *env) postRequest(key *signature.Signer, sub schemas.SignedRequest) (int, string) {
	e.t.Helper()
	body, _ := json.Marshal(sub)
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+server.OperatorPath+"/requests", bytes.NewReader(body))
	if err := operatorSigner(key).Sign(req); err != nil {
		e.t.Fatal(err)
	}
	return send(e.t, req.Method, req.URL.String(), req.Header, body)
}

// TestOperatorRead: an operator's key from trust/requests reads every
// branch through the server (main, installs', status, requests), none of
// the server's other refs; the same client with an install's key, or an
// untrusted key, reads nothing there.
func TestOperatorRead(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	out := e.mustGit("", "ls-remote", e.operatorProxy(op))
	for _, want := range []string{"refs/heads/main", schemas.InstallRef("acme"), schemas.InstallRef("globex")} {
		if !strings.Contains(out, want) {
			t.Errorf("ls-remote lacks %s:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] != "HEAD" && !strings.HasPrefix(f[1], "refs/heads/") {
			t.Errorf("an operator sees %s", f[1])
		}
	}
	clone := filepath.Join(t.TempDir(), "c.git")
	e.mustGit("", "clone", "--quiet", "--mirror", e.operatorProxy(op), clone)
	if got, want := e.mustGit(clone, "rev-parse", schemas.InstallRef("acme")), e.serverRef(schemas.InstallRef("acme")); got != want {
		t.Errorf("acme's ref through the operator endpoint %s, server %s", got, want)
	}

	for name, key := range map[string]*signature.Signer{"install key": e.keys["acme"], "untrusted": e.keys["render"]} {
		if out, err := git("", "ls-remote", e.operatorProxy(key)); err == nil {
			t.Errorf("%s: ls-remote read:\n%s", name, out)
		}
		req, _ := http.NewRequest(http.MethodGet, e.http.URL+server.OperatorPath+"/info/refs?service=git-upload-pack", nil)
		if err := operatorSigner(key).Sign(req); err != nil {
			t.Fatal(err)
		}
		if code, out := send(t, req.Method, req.URL.String(), req.Header, nil); code != http.StatusUnauthorized || !strings.Contains(out, "not trusted for requests") {
			t.Errorf("%s: %d %s", name, code, out)
		}
	}
}

// TestOperatorFile: a request filed through the server is on the requests
// ref here and upstream, and in its install's desired state when the
// answer comes: no poll interval, no webhook.
func TestOperatorFile(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	before := e.serverRef(schemas.InstallRef("acme"))
	sub, h := newRequest(t, op, "support", "acme", "r-1", plumbing.ZeroHash)
	code, body := e.postRequest(op, sub)
	if code != http.StatusOK {
		t.Fatalf("file: %d %s", code, body)
	}
	var res server.Filed
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	if res.Commit != h.String() || res.ID != "r-1" || res.Install != "acme" {
		t.Errorf("answer %+v, want commit %s", res, h)
	}
	if got := e.serverRef(requests.Ref); got != h.String() {
		t.Errorf("server's %s = %s, want %s", requests.Ref, got, h)
	}
	if got := gittest.Git(t, e.upstream, "rev-parse", requests.Ref); strings.TrimSpace(got) != h.String() {
		t.Errorf("upstream's %s = %s, want %s", requests.Ref, got, h)
	}
	after := e.serverRef(schemas.InstallRef("acme"))
	if after == before || res.Desired != after {
		t.Errorf("acme's desired ref %s → %s, answer says %s", before, after, res.Desired)
	}
	out, err := gittest.Run(e.dir, nil, "show", schemas.InstallRef("acme")+":"+schemas.RequestsFile)
	if err != nil || !strings.Contains(string(out), `\"id\": \"r-1\"`) {
		t.Errorf("acme's requests.json: %v\n%s", err, out)
	}
	// The next builds on it.
	sub2, h2 := newRequest(t, op, "support", "acme", "r-2", h)
	if code, body := e.postRequest(op, sub2); code != http.StatusOK {
		t.Fatalf("second request: %d %s", code, body)
	}
	if got := e.serverRef(requests.Ref); got != h2.String() {
		t.Errorf("server's %s = %s, want %s", requests.Ref, got, h2)
	}
}

// TestOperatorAttacks: what an operator's key may not do, and what other
// keys may not do with the operator endpoint. Each is refused and leaves
// the requests ref where it was.
func TestOperatorAttacks(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	acme := e.keys["acme"]
	first, h := newRequest(t, op, "support", "acme", "r-1", plumbing.ZeroHash)
	if code, body := e.postRequest(op, first); code != http.StatusOK {
		t.Fatalf("file: %d %s", code, body)
	}
	post := func(key *signature.Signer, sub schemas.SignedRequest) (int, string) { return e.postRequest(key, sub) }

	t.Run("untrusted operator key", func(t *testing.T) {
		sub, _ := newRequest(t, e.keys["render"], "support", "acme", "r-x", h)
		code, body := post(e.keys["render"], sub)
		if code != http.StatusUnauthorized || !strings.Contains(body, "not trusted for requests") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("install key as an operator", func(t *testing.T) {
		sub, _ := newRequest(t, acme, "support", "acme", "r-x", h)
		if code, body := post(acme, sub); code != http.StatusUnauthorized {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("operator's request signed by another key", func(t *testing.T) {
		sub, _ := newRequest(t, acme, "support", "acme", "r-x", h)
		code, body := post(op, sub)
		if code != http.StatusForbidden || !strings.Contains(body, "not signed by a trusted operator key") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("requester is not the key's principal", func(t *testing.T) {
		sub, _ := newRequest(t, op, "alice", "acme", "r-x", h)
		if code, body := post(op, sub); code != http.StatusForbidden || !strings.Contains(body, `requester "alice"`) {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("file swapped under the signed commit", func(t *testing.T) {
		sub, _ := newRequest(t, op, "support", "acme", "r-x", h)
		sub.File = strings.Replace(sub.File, `"tail"`, `"tails"`, 1) + " "
		if code, body := post(op, sub); code != http.StatusBadRequest {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("replayed request", func(t *testing.T) {
		code, body := post(op, first)
		if code != http.StatusConflict || !strings.Contains(body, "already filed") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("replayed HTTP request", func(t *testing.T) {
		sub, _ := newRequest(t, op, "support", "acme", "r-3", h)
		body, _ := json.Marshal(sub)
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+server.OperatorPath+"/requests", bytes.NewReader(body))
		if err := operatorSigner(op).Sign(req); err != nil {
			t.Fatal(err)
		}
		// A bad parent makes the first one fail after its signature
		// was accepted; the second copy must not even be looked at.
		if code, out := send(t, req.Method, req.URL.String(), req.Header, body); code != http.StatusConflict && code != http.StatusOK {
			t.Fatalf("first: %d %s", code, out)
		}
		if code, out := send(t, req.Method, req.URL.String(), req.Header, body); code != http.StatusUnauthorized || !strings.Contains(out, request.ErrReplay.Error()) {
			t.Errorf("replay: %d %s", code, out)
		}
	})
	t.Run("not on top of the requests ref", func(t *testing.T) {
		sub, _ := newRequest(t, op, "support", "acme", "r-4", plumbing.ZeroHash)
		if code, body := post(op, sub); code != http.StatusConflict || !strings.Contains(body, "file on top") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("no such install", func(t *testing.T) {
		head, _ := gitrepo.Open(e.dir)
		tip, _ := head.Ref(plumbing.ReferenceName(requests.Ref))
		sub, _ := newRequest(t, op, "support", "nobody", "r-5", tip)
		if code, body := post(op, sub); code != http.StatusNotFound {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("operator key pushes a status ref", func(t *testing.T) {
		tip := plumbing.NewHash(e.serverRef(schemas.StatusRef("acme")))
		c, pack := statusPack(t, op, "acme", tip, time.Now(), map[string]string{"note": "forged"})
		for _, keyid := range []string{"acme", requests.KeyID(op.PublicKey())} {
			var body bytes.Buffer
			line := tip.String() + " " + c.String() + " " + schemas.StatusRef("acme") + "\x00report-status\n"
			body.WriteString(pktLine(line) + "0000")
			body.Write(pack)
			for _, u := range []string{e.http.URL + "/tenant.git/git-receive-pack", e.http.URL + server.OperatorPath + "/git-receive-pack"} {
				req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body.Bytes()))
				req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
				if err := (&request.Signer{Install: keyid, Key: op}).Sign(req); err != nil {
					t.Fatal(err)
				}
				code, out := send(t, req.Method, u, req.Header, body.Bytes())
				if code == http.StatusOK {
					t.Errorf("keyid %s at %s: %d %s", keyid, u, code, out)
				}
			}
		}
		if hasObject(e.dir, c) {
			t.Error("the forged status commit was written")
		}
	})
	if got := e.serverRef(requests.Ref); got == "" {
		t.Fatal("no requests ref")
	}
}

func pktLine(s string) string {
	const hex = "0123456789abcdef"
	n := len(s) + 4
	return string([]byte{hex[n>>12&15], hex[n>>8&15], hex[n>>4&15], hex[n&15]}) + s
}

// commitScopedRoot commits a signed trust root to main whose roles are
// the render key's and what roles adds, labels globex tier=gold (acme
// has no tier), and has the server follow it.
func (e *env) commitScopedRoot(t *testing.T, roles func(rs *schemas.TrustRoles, auth func(ssh.PublicKey) string)) {
	t.Helper()
	_, rootPriv, _ := ed25519.GenerateKey(rand.Reader)
	rootKey, err := ssh.NewSignerFromKey(rootPriv)
	if err != nil {
		t.Fatal(err)
	}
	auth := func(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }
	tr := schemas.TrustRoot{
		APIVersion: schemas.APIVersion, Kind: schemas.KindTrustRoot, Version: 1,
		Expires: time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
		Root:    schemas.TrustRootRole{Threshold: 1, Keys: []schemas.TrustRootKey{{Name: "root-1", Key: auth(rootKey.PublicKey())}}},
		Roles: schemas.TrustRoles{
			Render: schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "render", Key: auth(e.keys["render"].PublicKey())}}},
		},
	}
	roles(&tr.Roles, auth)
	raw, err := trust.Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := trust.Parse(trust.FileName(1), raw)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = trust.Sign(r, rootKey); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	if err := os.MkdirAll(filepath.Join(work, trust.Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, trust.FileName(1)), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// globex is gold, acme is not.
	y, err := os.ReadFile(filepath.Join(work, "installs", "globex.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), "labels:") {
		t.Fatal("the fixture's globex has labels: merge tier into them")
	}
	y = append(y, []byte("labels:\n  tier: gold\n")...)
	if err := os.WriteFile(filepath.Join(work, "installs", "globex.yaml"), y, 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "add", ".")
	e.mustGit(work, "commit", "--quiet", "-m", "trust root with a scoped key")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	if err := e.srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}

}

// goldOnly scopes a key to installs labelled tier=gold.
var goldOnly = &schemas.TrustScope{InstallLabels: map[string]string{"tier": "gold"}}

// TestOperatorScope: with a trust root on main, an operator's key may
// file only for the installs its scope names.
func TestOperatorScope(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	e.commitScopedRoot(t, func(rs *schemas.TrustRoles, auth func(ssh.PublicKey) string) {
		rs.Operators = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "support", Key: auth(op.PublicKey()), Scope: goldOnly}}}
	})

	out, _ := newRequest(t, op, "support", "acme", "r-1", plumbing.ZeroHash)
	code, body := e.postRequest(op, out)
	if code != http.StatusForbidden || !strings.Contains(body, "outside the key's scope") || !strings.Contains(body, "tier=gold") {
		t.Errorf("acme: %d %s", code, body)
	}
	if got := e.serverRef(requests.Ref); got != "" {
		t.Errorf("requests ref moved to %s", got)
	}
	in, _ := newRequest(t, op, "support", "globex", "r-2", plumbing.ZeroHash)
	if code, body := e.postRequest(op, in); code != http.StatusOK {
		t.Errorf("globex: %d %s", code, body)
	}
}

// TestOperatorThroughReplica: an operator reads through a read replica
// and files through it: the replica checks the signature and forwards the
// request unchanged to the writer, which checks it again and files it;
// the same HTTP request replayed to either is refused.
func TestOperatorThroughReplica(t *testing.T) {
	e := newEnv(t)
	w := writer(t, e)
	_, r := replica(t, e, w.URL, time.Hour)
	waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, r.URL+"/readyz"); return c == 200 })
	op, _ := loadKey(t, "operator")
	sub, h := newRequest(t, op, "support", "acme", "r-1", plumbing.ZeroHash)
	body, _ := json.Marshal(sub)
	u := r.URL + server.OperatorPath + "/requests"
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err := operatorSigner(op).Sign(req); err != nil {
		t.Fatal(err)
	}
	if code, out := send(t, req.Method, u, req.Header, body); code != http.StatusOK {
		t.Fatalf("file through the replica: %d %s", code, out)
	}
	if got := e.serverRef(requests.Ref); got != h.String() {
		t.Errorf("the writer's %s = %q, want %s", requests.Ref, got, h)
	}
	for _, target := range []string{u, w.URL + server.OperatorPath + "/requests"} {
		if code, out := send(t, req.Method, target, req.Header, body); code != http.StatusUnauthorized {
			t.Errorf("replayed to %s: %d %s", target, code, out)
		}
	}
}

// TestOperatorFileRaceUpstream: a request filed on the upstream directly
// (nuon logs --repo) that the server has not fetched yet: the server's
// push is refused by its lease, it fetches, and says to file on top; the
// next try on the new tip is filed, and neither request is lost.
func TestOperatorFileRaceUpstream(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	direct, h1 := newRequest(t, op, "support", "acme", "r-1", plumbing.ZeroHash)
	up, err := gitrepo.Open(e.upstream)
	if err != nil {
		t.Fatal(err)
	}
	o, err := requests.Rebuild(direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Batch.Flush(up.Storer()); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.upstream, "update-ref", requests.Ref, h1.String())

	stale, _ := newRequest(t, op, "support", "acme", "r-2", plumbing.ZeroHash)
	if code, body := e.postRequest(op, stale); code != http.StatusConflict || !strings.Contains(body, "file on top") {
		t.Fatalf("on a stale tip: %d %s", code, body)
	}
	if got := e.serverRef(requests.Ref); got != h1.String() {
		t.Fatalf("the server did not fetch the upstream's request: %q", got)
	}
	again, h2 := newRequest(t, op, "support", "acme", "r-2", h1)
	if code, body := e.postRequest(op, again); code != http.StatusOK {
		t.Fatalf("on the new tip: %d %s", code, body)
	}
	if got := strings.TrimSpace(gittest.Git(t, e.upstream, "rev-parse", requests.Ref)); got != h2.String() {
		t.Errorf("upstream's %s = %s, want %s", requests.Ref, got, h2)
	}
}

// TestOperatorLiveness: an operator's key reads every install's last
// signed contact; after acme's agent polls (a request signed by its own
// key), acme is there and globex, which did not poll, is not; an
// install's key and an untrusted key read nothing.
func TestOperatorLiveness(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	read := func(key *signature.Signer, query string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, e.http.URL+server.OperatorPath+"/liveness"+query, nil)
		if err := operatorSigner(key).Sign(req); err != nil {
			t.Fatal(err)
		}
		return send(t, req.Method, req.URL.String(), req.Header, nil)
	}
	// acme's agent polls its desired ref, signed by acme's key.
	poll, _ := http.NewRequest(http.MethodGet, e.http.URL+"/tenant.git/info/refs?service=git-upload-pack", nil)
	poll.Header.Set("Git-Protocol", "version=2")
	if err := (&request.Signer{Install: "acme", Key: e.keys["acme"]}).Sign(poll); err != nil {
		t.Fatal(err)
	}
	if code, out := send(t, poll.Method, poll.URL.String(), poll.Header, nil); code != http.StatusOK {
		t.Fatalf("acme's poll: %d %s", code, out)
	}
	code, out := read(op, "")
	if code != http.StatusOK {
		t.Fatalf("operator's read: %d %s", code, out)
	}
	var rep struct {
		Now      time.Time
		Contacts []struct{ Install, Kind string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, c := range rep.Contacts {
		got[c.Install] = c.Kind
	}
	if got["acme"] != "poll" || got["globex"] != "" {
		t.Errorf("contacts %v, want acme's poll and nothing of globex", got)
	}
	if code, out := read(op, "?install=globex"); code != http.StatusOK || strings.Contains(out, `"install"`) {
		t.Errorf("globex alone: %d %s, want no contact", code, out)
	}
	for name, key := range map[string]*signature.Signer{"install key": e.keys["acme"], "untrusted": e.keys["render"]} {
		if code, out := read(key, ""); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, code, out)
		}
	}
}
