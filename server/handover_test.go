package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// newSigner is a fresh ed25519 key, as the agent makes one to rotate.
func newSigner(t testing.TB) *signature.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := signature.ParseSigner(pem.EncodeToMemory(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pubOf(s *signature.Signer) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
}

// chainPack makes status commits of install on parent, one per step (the
// key that signs it and extra trailer lines), and one pack of them all.
type statusStep struct {
	key      *signature.Signer
	trailers string
}

func chainPack(t testing.TB, install string, parent plumbing.Hash, steps ...statusStep) (plumbing.Hash, []byte) {
	t.Helper()
	b := gitobj.NewBatch()
	h := parent
	for i, s := range steps {
		blob := b.Add(plumbing.BlobObject, []byte(`{"step":`+string(rune('0'+i))+`,"at":"`+time.Now().String()+`"}`))
		var parents []plumbing.Hash
		if !h.IsZero() {
			parents = []plumbing.Hash{h}
		}
		c, err := b.Commit(gitobj.Commit{Tree: b.Tree([]gitobj.Entry{{Name: "status.json", Mode: filemode.Regular, Hash: blob}}), Parents: parents,
			Author:  object.Signature{Name: "agent", Email: install + "@nuon.invalid", When: time.Now()},
			Message: "status\n\n" + schemas.TrailerInstall + ": " + install + "\n" + s.trailers}, s.key)
		if err != nil {
			t.Fatal(err)
		}
		h = c
	}
	var pack bytes.Buffer
	if err := b.WritePack(&pack); err != nil {
		t.Fatal(err)
	}
	return h, pack.Bytes()
}

func handoverTrailers(from, to *signature.Signer) string {
	return server.TrailerKeyHandover + ": " + pubOf(to) + "\n" + server.TrailerKeyRetired + ": " + pubOf(from) + "\n"
}

// TestKeyHandover: an install's agent key rotates through its status ref:
// a commit signed by the old key names the new one; from then on the
// server takes only the new key, for requests and pushes, also after a
// restart, and every forged or replayed hand-over is refused with nothing
// written.
func TestKeyHandover(t *testing.T) {
	e := newEnv(t)
	old, next := e.keys["acme"], newSigner(t)
	status := schemas.StatusRef("acme")
	ref := func() plumbing.Hash {
		if h := e.serverRef(status); h != "" {
			return plumbing.NewHash(h)
		}
		return plumbing.ZeroHash
	}
	push := func(w *wire, want string, steps ...statusStep) plumbing.Hash {
		t.Helper()
		before := ref()
		c, pack := chainPack(t, "acme", before, steps...)
		got := string(w.push(before, c, status, pack))
		if !strings.Contains(got, want) {
			t.Fatalf("push: %q, want %q", got, want)
		}
		if want != "ok "+status && ref() != before {
			t.Fatalf("refused push moved %s", status)
		}
		return c
	}
	oldWire := newWire(t, e.http.URL, "acme", old)
	push(oldWire, "ok "+status, statusStep{old, ""})

	// Attacks before the hand-over.
	other := newSigner(t)
	push(oldWire, "not trusted", statusStep{e.keys["globex"], handoverTrailers(old, other)})
	push(oldWire, "not install acme's key in force", statusStep{old, handoverTrailers(e.keys["globex"], other)})
	push(oldWire, "key of install globex", statusStep{old, handoverTrailers(old, e.keys["globex"])})
	push(oldWire, "used before", statusStep{old, handoverTrailers(old, old)})
	push(oldWire, "without a Nuon-Key-Retired", statusStep{old, server.TrailerKeyHandover + ": " + pubOf(other) + "\n"})
	// The hand-over and a commit of the new key after it, signed by the
	// old key: refused as a whole.
	push(oldWire, "not trusted", statusStep{old, handoverTrailers(old, next)}, statusStep{old, ""})

	// The hand-over, and the first status of the new key, in one push.
	push(oldWire, "ok "+status, statusStep{old, handoverTrailers(old, next)}, statusStep{next, ""})
	if !strings.Contains(e.log.String(), "install key handed over") {
		t.Fatal("hand-over not logged")
	}

	check := func(url string) {
		t.Helper()
		nw := newWire(t, url, "acme", next)
		ow := newWire(t, url, "acme", old)
		// Requests: the old key is refused, the new one served.
		if got := string(ow.post("git-upload-pack", []byte("0000"))); !strings.HasPrefix(got, "HTTP 401") {
			t.Fatalf("old key's request: %.200q", got)
		}
		if got := string(nw.post("git-upload-pack", []byte("0014command=ls-refs\n0000"))); !strings.HasPrefix(got, "HTTP 200") {
			t.Fatalf("new key's request: %.200q", got)
		}
		// Pushes: a status or a hand-over replayed with the old key
		// is refused; a hand-over back to the old key is refused.
		for _, tc := range []struct {
			name  string
			steps []statusStep
			want  string
		}{
			{"old key's status", []statusStep{{old, ""}}, "HTTP 401"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := ref()
				c, pack := chainPack(t, "acme", before, tc.steps...)
				if got := string(ow.push(before, c, status, pack)); !strings.Contains(got, tc.want) {
					t.Fatalf("push: %q, want %q", got, tc.want)
				}
				if ref() != before {
					t.Fatal("status ref moved")
				}
			})
		}
		for _, tc := range []struct {
			name  string
			steps []statusStep
			want  string
		}{
			{"status signed by the old key", []statusStep{{old, ""}}, "not trusted"},
			{"hand-over replayed with the old key", []statusStep{{old, handoverTrailers(old, next)}}, "not trusted"},
			{"hand-over from the old key to a third", []statusStep{{old, handoverTrailers(old, other)}}, "not trusted"},
			{"hand-over back to the old key", []statusStep{{next, handoverTrailers(next, old)}}, "used before"},
			{"hand-over to another install's key", []statusStep{{next, handoverTrailers(next, e.keys["globex"])}}, "key of install globex"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := ref()
				c, pack := chainPack(t, "acme", before, tc.steps...)
				if got := string(nw.push(before, c, status, pack)); !strings.Contains(got, tc.want) {
					t.Fatalf("push: %q, want %q", got, tc.want)
				}
				if ref() != before {
					t.Fatal("status ref moved")
				}
			})
		}
		before := ref()
		c, pack := chainPack(t, "acme", before, statusStep{next, ""})
		if got := string(nw.push(before, c, status, pack)); !strings.Contains(got, "ok "+status) {
			t.Fatalf("new key's status: %q", got)
		}
	}
	check(e.http.URL)

	// A new server on the same repository reads the hand-over back from
	// the status history: main still names the old key, and it stays
	// retired.
	e.srv.Close()
	srv, err := server.New(context.Background(), server.Config{Dir: e.dir, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	check(hs.URL)
}

// setAgentKey commits install's agentKey on upstream main and waits until
// the server serves key's requests for install.
func (e *env) setAgentKey(install string, key *signature.Signer) {
	t := e.t
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	p := filepath.Join(work, "installs", install+".yaml")
	b, err := os.ReadFile(p)
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
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "commit", "--quiet", "-am", "rotate "+install+"'s agent key")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	e.hook()
	w := newWire(t, e.http.URL, install, key)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(string(w.post("git-upload-pack", []byte("0014command=ls-refs\n0000"))), "HTTP 200") {
		if time.Now().After(deadline) {
			t.Fatalf("%s's new key not taken from main", install)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKeyHandoverThenMain: main catching up with the hand-over changes
// nothing (the old key stays refused); an operator re-keying the install on
// main to a key outside the hand-over chain overrides it (the way out when
// the handed-over key leaks), and the handed-over key stops.
func TestKeyHandoverThenMain(t *testing.T) {
	e := newEnv(t)
	old, next, third := e.keys["acme"], newSigner(t), newSigner(t)
	status := schemas.StatusRef("acme")
	c1, pack := chainPack(t, "acme", plumbing.ZeroHash, statusStep{old, ""}, statusStep{old, handoverTrailers(old, next)}, statusStep{next, ""})
	if got := string(newWire(t, e.http.URL, "acme", old).push(plumbing.ZeroHash, c1, status, pack)); !strings.Contains(got, "ok "+status) {
		t.Fatalf("hand-over push: %q", got)
	}
	served := func(key *signature.Signer) bool {
		return strings.HasPrefix(string(newWire(t, e.http.URL, "acme", key).post("git-upload-pack", []byte("0014command=ls-refs\n0000"))), "HTTP 200")
	}
	if served(old) || !served(next) {
		t.Fatalf("after the hand-over: old served %v, new served %v", served(old), served(next))
	}
	e.setAgentKey("acme", next)
	if served(old) || !served(next) {
		t.Fatalf("main names the new key: old served %v, new served %v", served(old), served(next))
	}
	e.setAgentKey("acme", third)
	if served(old) || served(next) || !served(third) {
		t.Fatalf("operator re-keyed: old %v, handed-over %v, main's %v", served(old), served(next), served(third))
	}
	// The re-keyed install pushes with main's key.
	c2, pack := chainPack(t, "acme", c1, statusStep{third, ""})
	if got := string(newWire(t, e.http.URL, "acme", third).push(c1, c2, status, pack)); !strings.Contains(got, "ok "+status) {
		t.Fatalf("push with main's key: %q", got)
	}
}

// TestAgentRotatesItsKey: the agent's RotateKey against the real server:
// the hand-over and the new key's first status land in one push, keep the
// status (generation, desired, phase), and afterwards the old key can
// neither read nor hand over again, while the agent's VerifyStatus with the
// new key takes the tip as its own.
func TestAgentRotatesItsKey(t *testing.T) {
	if agent.TrailerKeyHandover != server.TrailerKeyHandover || agent.TrailerKeyRetired != server.TrailerKeyRetired {
		t.Fatal("agent and server name the hand-over trailers differently")
	}
	e := newEnv(t)
	old, next := e.keys["acme"], newSigner(t)
	status := schemas.StatusRef("acme")
	c, pack := chainPack(t, "acme", plumbing.ZeroHash, statusStep{old, schemas.TrailerGeneration + ": 3\n" + schemas.TrailerDesired + ": none\n" + schemas.TrailerPhase + ": applied\n"})
	if got := string(newWire(t, e.http.URL, "acme", old).push(plumbing.ZeroHash, c, status, pack)); !strings.Contains(got, "ok "+status) {
		t.Fatalf("first status: %q", got)
	}
	remote := func(key *signature.Signer) agent.Remote {
		return agent.NewRemote(e.http.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: key}))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		old, new *signature.Signer
		want     string
	}{
		{"to the same key", old, old, "the new key is the old key"},
		{"by a key that is not acme's", e.keys["globex"], next, "401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agent.RotateKey(ctx, agent.Rotation{Install: "acme", Workdir: t.TempDir(), Remote: remote(tc.old), Old: tc.old, New: tc.new})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RotateKey: %v, want %q", err, tc.want)
			}
			if e.serverRef(status) != c.String() {
				t.Fatal("status ref moved")
			}
		})
	}
	work := t.TempDir()
	tip, err := agent.RotateKey(ctx, agent.Rotation{Install: "acme", Workdir: work, Remote: remote(old), Old: old, New: next})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.serverRef(status); got != tip.String() {
		t.Fatalf("status ref %s, want %s", got, tip)
	}
	st := memory.NewStorage()
	if err := remote(next).Fetch(ctx, st, tip); err != nil {
		t.Fatalf("new key cannot fetch: %v", err)
	}
	v, err := agent.VerifyStatus(st, tip, "acme", next.PublicKey())
	if err != nil || v.Forged != nil || v.Generation != 3 {
		t.Fatalf("the new key's tip: %+v %v", v, err)
	}
	if v, _ := agent.VerifyStatus(st, tip, "acme", old.PublicKey()); v.Forged == nil {
		t.Fatal("the tip verifies with the old key")
	}
	// The old key, stolen and used again: it can read nothing and hand
	// over nothing.
	if _, err := remote(old).Heads(ctx, plumbing.ReferenceName(status)); err == nil {
		t.Fatal("the old key still reads")
	}
	third := newSigner(t)
	if _, err := agent.RotateKey(ctx, agent.Rotation{Install: "acme", Workdir: work, Remote: remote(old), Old: old, New: third}); err == nil {
		t.Fatal("the old key handed over again")
	}
	// The new key rotates again; the old one stays refused.
	tip2, err := agent.RotateKey(ctx, agent.Rotation{Install: "acme", Workdir: work, Remote: remote(next), Old: next, New: third})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.serverRef(status); got != tip2.String() {
		t.Fatalf("status ref %s, want %s", got, tip2)
	}
	for _, k := range []*signature.Signer{old, next} {
		if _, err := remote(k).Heads(ctx, plumbing.ReferenceName(status)); err == nil {
			t.Fatalf("retired key %s still reads", k.AuthorizedKey())
		}
	}
}
