package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// recorder is a transport that keeps a copy of every request it sends:
// what someone who can read the agent's traffic (a log, a proxy) holds.
type recorder struct {
	mu   sync.Mutex
	reqs []captured
}

type captured struct {
	method, url string
	header      http.Header
	body        []byte
}

func (rec *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, captured{r.Method, r.URL.String(), r.Header.Clone(), body})
	rec.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// last is the last request captured to an endpoint.
func (rec *recorder) last(t *testing.T, suffix string) captured {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := len(rec.reqs) - 1; i >= 0; i-- {
		if strings.HasSuffix(strings.SplitN(rec.reqs[i].url, "?", 2)[0], suffix) {
			return rec.reqs[i]
		}
	}
	t.Fatalf("no request to %s captured", suffix)
	return captured{}
}

// send sends method url with header and body as they are, and returns
// the status and the answer.
func send(t *testing.T, method, url string, header http.Header, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// pushBody is a receive-pack request moving acme's status ref from old
// to new, with a pack of every object a holds.
func pushBody(t *testing.T, a *statusAgent, old, new plumbing.Hash) []byte {
	t.Helper()
	bt := gitobj.NewBatch()
	objs, err := a.st.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		t.Fatal(err)
	}
	if err := objs.ForEach(func(o plumbing.EncodedObject) error { _, err := bt.AddEncoded(o); return err }); err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	line := old.String() + " " + new.String() + " " + schemas.StatusRef(a.id) + "\x00report-status\n"
	fmt.Fprintf(&body, "%04x%s0000", len(line)+4, line)
	if err := bt.WritePack(&body); err != nil {
		t.Fatal(err)
	}
	return body.Bytes()
}

// signedHeader is the header of a push of body to url signed by a's key.
func signedHeader(t *testing.T, a *statusAgent, url string, body []byte) http.Header {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	if err := (&request.Signer{Install: a.id, Key: a.key}).Sign(req); err != nil {
		t.Fatal(err)
	}
	return req.Header
}

// hasObject says whether the server's repository holds h.
func hasObject(dir string, h plumbing.Hash) bool {
	_, err := gittest.Run(dir, nil, "cat-file", "-e", h.String())
	return err == nil
}

// TestSignatureAttacks replays what the agent's real client sent, as
// someone who reads its traffic but holds no key would: the request
// unchanged, its signature with another body, a push whose body was
// swapped on the way for another push the install signed, its digest
// stripped or replaced. Every one is refused and the server writes
// nothing; the same install's next real push is accepted, and two
// identical polls in one second both pass.
func TestSignatureAttacks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	base := e.http.URL + "/tenant.git"
	rec := &recorder{}
	a := newStatusAgent("acme", base, e.keys["acme"], plumbing.ZeroHash)
	a.remote = agent.NewRemote(base, agent.WithRequestSigner(&request.Signer{Install: "acme", Key: e.keys["acme"]}),
		agent.WithHTTPClient(&http.Client{Transport: rec}))
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	first := a.head
	push := rec.last(t, "/git-receive-pack")
	status := schemas.StatusRef("acme")

	// Two status commits on first, both signed by acme: the agent meant
	// to push h2; the attacker would rather the server took h3.
	h2, err := a.commit()
	if err != nil {
		t.Fatal(err)
	}
	h3, err := a.commit()
	if err != nil {
		t.Fatal(err)
	}
	body2, body3 := pushBody(t, a, first, h2), pushBody(t, a, first, h3)
	url := base + "/git-receive-pack"
	digest := func(b []byte) string {
		s := sha256.Sum256(b)
		return "sha-256=:" + base64.StdEncoding.EncodeToString(s[:]) + ":"
	}
	without := func(h http.Header, name string) http.Header { h = h.Clone(); h.Del(name); return h }
	with := func(h http.Header, name, v string) http.Header { h = h.Clone(); h.Set(name, v); return h }

	for _, tc := range []struct {
		name   string
		header func() http.Header
		body   []byte
		status int
		says   string // in the answer
	}{
		{"replayed unchanged", func() http.Header { return push.header }, push.body, 401, "already used"},
		{"replayed with another body", func() http.Header { return push.header }, body3, 401, "already used"},
		{"body swapped on the way", func() http.Header { return signedHeader(t, a, url, body2) }, body3, 200, "does not match its signed digest"},
		{"body cut short", func() http.Header { return signedHeader(t, a, url, body2) }, body2[:len(body2)-20], 200, "does not match its signed digest"},
		{"digest stripped", func() http.Header { return without(signedHeader(t, a, url, body2), "Content-Digest") }, body3, 401, "malformed"},
		{"digest replaced by the new body's", func() http.Header {
			return with(signedHeader(t, a, url, body2), "Content-Digest", digest(body3))
		}, body3, 401, "does not match"},
		{"the first format", func() http.Header {
			h := http.Header{}
			h.Set("Authorization", `Nuon-SSHSIG install="acme", time="1800000000", sig="c2ln"`)
			return h
		}, body3, 401, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, answer := send(t, http.MethodPost, url, tc.header(), tc.body)
			if code != tc.status || !strings.Contains(answer, tc.says) {
				t.Fatalf("answered %d %q, want %d and %q", code, answer, tc.status, tc.says)
			}
			if strings.Contains(answer, "ok "+status) {
				t.Fatalf("push accepted: %q", answer)
			}
			if got := e.serverRef(status); got != first.String() {
				t.Fatalf("status ref moved to %s", got)
			}
			for _, h := range []plumbing.Hash{h2, h3} {
				if hasObject(e.dir, h) {
					t.Fatalf("the server wrote %s", h)
				}
			}
		})
	}
	if !strings.Contains(e.log.String(), "body does not match its signed digest") {
		t.Errorf("swapped bodies not logged:\n%s", e.log.String())
	}

	// The install's own push of h2, signed once and sent once: accepted.
	code, answer := send(t, http.MethodPost, url, signedHeader(t, a, url, body2), body2)
	if code != 200 || !strings.Contains(answer, "ok "+status) || e.serverRef(status) != h2.String() {
		t.Fatalf("the real push: %d %q, status ref %s", code, answer, e.serverRef(status))
	}

	// Two identical polls in the same second, each signed: both answered.
	at := time.Now()
	s := &request.Signer{Install: "acme", Key: e.keys["acme"], Now: func() time.Time { return at }}
	poll := lsRefsBody(schemas.InstallRef("acme"), status)
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPost, base+"/git-upload-pack", bytes.NewReader(poll))
		req.Header.Set("Git-Protocol", "version=2")
		req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
		if err := s.Sign(req); err != nil {
			t.Fatal(err)
		}
		code, answer := send(t, http.MethodPost, req.URL.String(), req.Header, poll)
		if code != 200 || !strings.Contains(answer, status) {
			t.Fatalf("poll %d: %d %q", i, code, answer)
		}
	}
}

// TestReplicaSignatures: a push through a read replica is verified by the
// replica and again by the writer, each with its own cache of signatures
// seen, and accepted; replayed to the replica or straight to the writer it
// is refused, and a swapped body through the replica moves nothing.
func TestReplicaSignatures(t *testing.T) {
	e := newEnv(t)
	w := writer(t, e)
	_, r := replica(t, e, w.URL, time.Hour)
	waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, r.URL+"/readyz"); return c == 200 })
	ctx := context.Background()
	rec := &recorder{}
	a := newStatusAgent("acme", r.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	a.remote = agent.NewRemote(r.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: e.keys["acme"]}),
		agent.WithHTTPClient(&http.Client{Transport: rec}))
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	status := schemas.StatusRef("acme")
	if got := e.serverRef(status); got != a.head.String() {
		t.Fatalf("the writer's status ref %q, want %s", got, a.head)
	}
	push := rec.last(t, "/git-receive-pack")
	for _, target := range []string{r.URL, w.URL} {
		if code, answer := send(t, http.MethodPost, target+"/tenant.git/git-receive-pack", push.header, push.body); code != 401 || !strings.Contains(answer, "already used") {
			t.Fatalf("replayed to %s: %d %q", target, code, answer)
		}
	}
	first := a.head
	h2, err := a.commit()
	if err != nil {
		t.Fatal(err)
	}
	h3, err := a.commit()
	if err != nil {
		t.Fatal(err)
	}
	url := r.URL + "/tenant.git/git-receive-pack"
	code, answer := send(t, http.MethodPost, url, signedHeader(t, a, url, pushBody(t, a, first, h2)), pushBody(t, a, first, h3))
	if strings.Contains(answer, "ok "+status) || e.serverRef(status) != first.String() || hasObject(e.dir, h3) {
		t.Fatalf("a swapped body through the replica: %d %q, status ref %s", code, answer, e.serverRef(status))
	}
}

// TestSignatureLargeBodies: an upload-pack request is read whole before it
// is parsed, up to its 8 MiB bound. A swapped body of exactly the bound,
// or longer than it, is refused: the body is read to its end, where its
// digest is checked, and never cut at the bound and parsed as if whole.
func TestSignatureLargeBodies(t *testing.T) {
	e := newEnv(t)
	url := e.http.URL + "/tenant.git/git-upload-pack"
	s := &request.Signer{Install: "acme", Key: e.keys["acme"]}
	// An ls-refs request, then padding that git's parser never reads
	// (it stops at the flush), to size bytes.
	body := func(ref string, pad byte, size int) []byte {
		b := lsRefsBody(ref)
		return append(b, bytes.Repeat([]byte{pad}, size-len(b))...)
	}
	const bound = 8 << 20
	for _, tc := range []struct {
		name         string
		signed, sent []byte
		status       int
	}{
		{"the bound, as signed", body(schemas.InstallRef("acme"), 'a', bound), body(schemas.InstallRef("acme"), 'a', bound), 200},
		{"the bound, swapped", body(schemas.InstallRef("acme"), 'a', bound), body(schemas.StatusRef("acme"), 'b', bound), 400},
		{"past the bound, swapped", body(schemas.InstallRef("acme"), 'a', bound+1), body(schemas.StatusRef("acme"), 'b', bound+1), 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(tc.signed))
			req.Header.Set("Git-Protocol", "version=2")
			req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
			if err := s.Sign(req); err != nil {
				t.Fatal(err)
			}
			code, answer := send(t, http.MethodPost, url, req.Header, tc.sent)
			if code != tc.status {
				t.Fatalf("answered %d %q, want %d", code, answer, tc.status)
			}
		})
	}
}
