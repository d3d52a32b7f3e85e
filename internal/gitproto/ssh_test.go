package gitproto

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"nuon.dev/nuon/internal/gittest"
)

// sshClient is a Client for the fixture's repository through srv, logged
// in with the server's client key and known_hosts.
func sshClient(t *testing.T, srv *gittest.SSHServer, log *slog.Logger) *Client {
	t.Helper()
	hk, err := knownhosts.New(srv.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{URL: srv.URL("tenant.git"), SSH: &SSHAuth{Signer: srv.ClientSigner, HostKeyCallback: hk}, Log: log}
	t.Cleanup(func() { c.Close() })
	return c
}

// newCommit writes a commit of one file on top of parent into st.
func newCommit(t testing.TB, st storer.EncodedObjectStorer, parent plumbing.Hash, content string) plumbing.Hash {
	t.Helper()
	put := func(o interface {
		Encode(plumbing.EncodedObject) error
	}, typ plumbing.ObjectType) plumbing.Hash {
		obj := st.NewEncodedObject()
		obj.SetType(typ)
		if err := o.Encode(obj); err != nil {
			t.Fatal(err)
		}
		h, err := st.SetEncodedObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	blob := st.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	w, _ := blob.Writer()
	w.Write([]byte(content))
	w.Close()
	bh, err := st.SetEncodedObject(blob)
	if err != nil {
		t.Fatal(err)
	}
	th := put(&object.Tree{Entries: []object.TreeEntry{{Name: "status.yaml", Mode: filemode.Regular, Hash: bh}}}, plumbing.TreeObject)
	sig := object.Signature{Name: "agent", Email: "agent@nuon.invalid", When: time.Unix(1767225600, 0).UTC()}
	c := &object.Commit{Author: sig, Committer: sig, Message: "status\n", TreeHash: th}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	return put(c, plumbing.CommitObject)
}

func TestSSH(t *testing.T) {
	f := newFixture(t, 100)
	srv := gittest.NewSSHServer(t, f.srv.Root)
	var logs bytes.Buffer
	c := sshClient(t, srv, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()

	refs, err := c.LsRefs(ctx, installRef(7).String())
	if err != nil {
		t.Fatal(err)
	}
	if got := refs[installRef(7)]; got != f.commits[1] || len(refs) != 1 {
		t.Fatalf("LsRefs = %v, want %s at %s", refs, installRef(7), f.commits[1])
	}
	// A second poll reuses the connection: one session, one small
	// exchange, at protocol version 2.
	c.ResetStats()
	srv.ResetWire()
	if _, err := c.LsRefs(ctx, installRef(7).String()); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Version != 2 || st.Exchanges != 1 || st.Received > 400 {
		t.Errorf("poll stats = %+v, want version 2, 1 exchange, under 400 bytes received", st)
	}
	if _, recv, _ := srv.Wire(); recv > 2000 {
		t.Errorf("poll received %d bytes on the wire, want under 2000", recv)
	}
	if logs.Len() != 0 {
		t.Errorf("logged on a version 2 server:\n%s", logs.String())
	}

	local := memory.NewStorage()
	if _, err := c.Fetch(ctx, local, []plumbing.Hash{f.commits[1]}, nil); err != nil {
		t.Fatal(err)
	}
	checkTree(t, local, f.commits[1], map[string]string{"README.md": "tenant\n"})

	testPush(t, c, f.dir, local, f.commits[1])
}

// testPush pushes status commits with c to the repository dir, whose main
// is at base (held by local), and checks what the server refuses.
func testPush(t *testing.T, c *Client, dir string, local storer.EncodedObjectStorer, base plumbing.Hash) {
	ctx := context.Background()
	ref := plumbing.ReferenceName("refs/heads/nuon/status/acme")
	first := newCommit(t, local, base, "phase: ready\n")
	if err := c.Push(ctx, local, RefUpdate{Name: ref, New: first}); err != nil {
		t.Fatal(err)
	}
	if got := gittest.Git(t, dir, "rev-parse", ref.String()); got != first.String() {
		t.Fatalf("%s = %s after the push, want %s", ref, got, first)
	}
	gittest.Git(t, dir, "fsck", "--strict", "--no-dangling")
	second := newCommit(t, local, first, "phase: failed\n")
	if err := c.Push(ctx, local, RefUpdate{Name: ref, Old: first, New: second}); err != nil {
		t.Fatal(err)
	}

	// Someone else moved the ref: the push is refused as stale.
	other := newCommit(t, local, second, "phase: other\n")
	err := c.Push(ctx, local, RefUpdate{Name: ref, Old: first, New: other})
	if !errors.Is(err, ErrStale) {
		t.Errorf("push from a stale old value: %v, want ErrStale", err)
	}
	if got := gittest.Git(t, dir, "rev-parse", ref.String()); got != second.String() {
		t.Errorf("%s = %s after a refused push, want %s", ref, got, second)
	}

	// A hook says no: its message is in the error.
	hook := filepath.Join(dir, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'status pushes are frozen today' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hook)
	err = c.Push(ctx, local, RefUpdate{Name: ref, Old: second, New: other})
	pe, ok := errors.AsType[*PushError](err)
	if !ok || len(pe.Refs) != 1 || pe.Refs[0].Name != ref || !strings.Contains(pe.Refs[0].Reason, "hook declined") {
		t.Fatalf("push refused by a hook: %v, want a PushError for %s", err, ref)
	}
	if !strings.Contains(err.Error(), "status pushes are frozen today") || errors.Is(err, ErrStale) {
		t.Errorf("push refused by a hook: %v, want the hook's message and not ErrStale", err)
	}
	os.Remove(hook)

	// A non-fast-forward where the server forbids them.
	gittest.Git(t, dir, "config", "receive.denyNonFastForwards", "true")
	defer gittest.Git(t, dir, "config", "--unset", "receive.denyNonFastForwards")
	sideways := newCommit(t, local, first, "phase: sideways\n")
	err = c.Push(ctx, local, RefUpdate{Name: ref, Old: second, New: sideways})
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "non-fast-forward") {
		t.Errorf("non-fast-forward push: %v, want ErrStale saying non-fast-forward", err)
	}

	testDelete(t, c, dir, local, ref, second, first)
}

// testDelete archives ref (at cur) as an install's delete does: one atomic
// push copies it under an archive name and deletes it, with the checks a
// deletion needs. stale is a commit the server has that ref is not at.
func testDelete(t *testing.T, c *Client, dir string, local storer.EncodedObjectStorer, ref plumbing.ReferenceName, cur, stale plumbing.Hash) {
	ctx := context.Background()
	archive := plumbing.ReferenceName("refs/nuon/archive/acme/status")
	exists := func(name plumbing.ReferenceName) bool {
		_, err := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", name.String())
		return err == nil
	}

	// A deletion from a stale read is refused, and, atomic, so is the copy.
	err := c.Push(ctx, local, RefUpdate{Name: archive, New: cur}, RefUpdate{Name: ref, Old: stale, New: plumbing.ZeroHash})
	if !errors.Is(err, ErrStale) {
		t.Errorf("delete from a stale read: %v, want ErrStale", err)
	}
	if exists(archive) || !exists(ref) {
		t.Fatalf("a refused atomic push moved a ref: archive %v, %s %v", exists(archive), ref, exists(ref))
	}

	// A server that forbids deletions says so, and nothing moves.
	gittest.Git(t, dir, "config", "receive.denyDeletes", "true")
	err = c.Push(ctx, local, RefUpdate{Name: archive, New: cur}, RefUpdate{Name: ref, Old: cur, New: plumbing.ZeroHash})
	gittest.Git(t, dir, "config", "--unset", "receive.denyDeletes")
	if pe, ok := errors.AsType[*PushError](err); !ok || errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "deletion prohibited") {
		t.Errorf("delete where deletions are denied: %v (%T), want a PushError saying deletion prohibited", err, pe)
	}
	if exists(archive) || !exists(ref) {
		t.Fatalf("a refused atomic push moved a ref: archive %v, %s %v", exists(archive), ref, exists(ref))
	}

	// The archive: copied and deleted in one push.
	if err := c.Push(ctx, local, RefUpdate{Name: archive, New: cur}, RefUpdate{Name: ref, Old: cur, New: plumbing.ZeroHash}); err != nil {
		t.Fatal(err)
	}
	if exists(ref) {
		t.Errorf("%s still exists after its deletion", ref)
	}
	if got := gittest.Git(t, dir, "rev-parse", archive.String()); got != cur.String() {
		t.Errorf("%s = %s, want %s", archive, got, cur)
	}
	// Deleting what is gone is stale; a push of deletions only sends no pack.
	if err := c.Push(ctx, local, RefUpdate{Name: ref, Old: cur, New: plumbing.ZeroHash}); !errors.Is(err, ErrStale) {
		t.Errorf("deleting a deleted ref: %v, want ErrStale", err)
	}
	if err := c.Push(ctx, local, RefUpdate{Name: archive, Old: cur, New: plumbing.ZeroHash}); err != nil {
		t.Fatalf("push of a deletion alone: %v", err)
	}
	if exists(archive) {
		t.Errorf("%s still exists after its deletion", archive)
	}
	gittest.Git(t, dir, "fsck", "--strict", "--no-dangling")
}

func TestSSHVersion0(t *testing.T) {
	f := newFixture(t, 100)
	srv := gittest.NewSSHServer(t, f.srv.Root, gittest.WithoutGitProtocolEnv())
	var logs bytes.Buffer
	c := sshClient(t, srv, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	for range 2 {
		refs, err := c.LsRefs(ctx, installRef(8).String())
		if err != nil {
			t.Fatal(err)
		}
		if got := refs[installRef(8)]; got != f.commits[0] || len(refs) != 1 {
			t.Fatalf("LsRefs = %v, want %s at %s", refs, installRef(8), f.commits[0])
		}
	}
	if st := c.Stats(); st.Version != 0 || st.Received < 100*50 {
		t.Errorf("stats = %+v, want version 0 and every ref received", st)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "host="+srv.Addr) {
		t.Errorf("want one warning naming host %s, got:\n%s", srv.Addr, logs.String())
	}
	local := memory.NewStorage()
	if _, err := c.Fetch(ctx, local, []plumbing.Hash{f.commits[0]}, nil); err != nil {
		t.Fatal(err)
	}
	// An incremental fetch: the have is acknowledged.
	if _, err := c.Fetch(ctx, local, []plumbing.Hash{f.commits[1]}, []plumbing.Hash{f.commits[0]}); err != nil {
		t.Fatal(err)
	}
	checkTree(t, local, f.commits[1], map[string]string{"README.md": "tenant\n"})
}

func TestSSHRefused(t *testing.T) {
	f := newFixture(t, 1)
	srv := gittest.NewSSHServer(t, f.srv.Root)
	ctx := context.Background()
	otherHost, _ := gittest.NewSSHKey(t)
	dir := t.TempDir()
	writeKnownHosts := func(name, host string, key ssh.PublicKey) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(knownhosts.Line([]string{knownhosts.Normalize(host)}, key)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wrongClient, _ := gittest.NewSSHKey(t)
	tests := []struct {
		name   string
		known  string
		signer ssh.Signer
		is     error
		say    string
	}{
		{"unknown host", writeKnownHosts("unknown", "127.0.0.2:22", otherHost.PublicKey()), srv.ClientSigner, ErrHostKey, "not in known_hosts"},
		{"changed host key", writeKnownHosts("changed", srv.Addr, otherHost.PublicKey()), srv.ClientSigner, ErrHostKey, "CHANGED"},
		{"wrong client key", srv.KnownHosts, wrongClient, ErrUnauthorized, "refused the key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hk, err := knownhosts.New(tt.known)
			if err != nil {
				t.Fatal(err)
			}
			c := &Client{URL: srv.URL("tenant.git"), SSH: &SSHAuth{Signer: tt.signer, HostKeyCallback: hk}}
			defer c.Close()
			_, err = c.LsRefs(ctx, "refs/heads/main")
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.say) {
				t.Errorf("LsRefs: %v, want %v saying %q", err, tt.is, tt.say)
			}
			if Temporary(err) {
				t.Errorf("Temporary(%v) = true", err)
			}
			if strings.Contains(err.Error(), srv.User+"@") {
				t.Errorf("error shows the user information: %v", err)
			}
		})
	}
}

func TestPushHTTP(t *testing.T) {
	f := newFixture(t, 10)
	c := &Client{URL: f.url}
	local := memory.NewStorage()
	if _, err := c.Fetch(context.Background(), local, []plumbing.Hash{f.commits[1]}, nil); err != nil {
		t.Fatal(err)
	}
	testPush(t, c, f.dir, local, f.commits[1])
}

// TestSSHHostKeyAlgorithms: a server with two host keys is accepted when
// known_hosts lists either one: the client asks for a key type known_hosts
// has instead of reporting a changed key.
func TestSSHHostKeyAlgorithms(t *testing.T) {
	f := newFixture(t, 1)
	srv := gittest.NewSSHServer(t, f.srv.Root, gittest.WithECDSAHostKey())
	for name, key := range map[string]ssh.PublicKey{"ed25519": srv.HostKey, "ecdsa": srv.HostKeyECDSA} {
		t.Run(name, func(t *testing.T) {
			known := filepath.Join(t.TempDir(), "known_hosts")
			line := "# a comment\n" + knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, key) + "\n"
			if err := os.WriteFile(known, []byte(line), 0o600); err != nil {
				t.Fatal(err)
			}
			hk, err := knownhosts.New(known)
			if err != nil {
				t.Fatal(err)
			}
			c := &Client{URL: srv.URL("tenant.git"), SSH: &SSHAuth{Signer: srv.ClientSigner, HostKeyCallback: hk}}
			defer c.Close()
			if _, err := c.LsRefs(context.Background(), "refs/heads/main"); err != nil {
				t.Fatalf("known_hosts with the %s key only: %v", name, err)
			}
		})
	}
}

// TestSSHErrors: a missing repository is the server's message, not a
// temporary hang-up; a stale push and a fetch the server refuses end with
// errors that say so, within the deadline.
func TestSSHErrors(t *testing.T) {
	f := newFixture(t, 3000)
	srv := gittest.NewSSHServer(t, f.srv.Root, gittest.WithoutGitProtocolEnv())
	c := sshClient(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	missing := &Client{URL: srv.URL("missing.git"), SSH: c.SSH}
	defer missing.Close()
	_, err := missing.LsRefs(ctx, "refs/heads/")
	if _, ok := errors.AsType[*RemoteError](err); !ok || !strings.Contains(err.Error(), "does not appear to be a git repository") || Temporary(err) {
		t.Errorf("LsRefs on a missing repository: %v, want the server's message, not temporary", err)
	}

	// A push whose old value is stale stops after the advertisement.
	local := memory.NewStorage()
	if _, err := c.Fetch(ctx, local, []plumbing.Hash{f.commits[0]}, nil); err != nil {
		t.Fatal(err)
	}
	err = c.Push(ctx, local, RefUpdate{Name: installRef(3), Old: f.commits[0], New: f.commits[0]})
	if !errors.Is(err, ErrStale) {
		t.Errorf("stale push: %v, want ErrStale", err)
	}
	// A fetch of an object the server does not have, in version 0.
	_, err = c.Fetch(ctx, memory.NewStorage(), []plumbing.Hash{plumbing.NewHash(strings.Repeat("1", 40))}, nil)
	if err == nil || ctx.Err() != nil {
		t.Errorf("fetch of an unknown object: %v (context: %v)", err, ctx.Err())
	}
}
