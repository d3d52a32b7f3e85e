package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// pushStatus pushes a signed status commit for install id on top of
// parent (zero for none; st holds it), reporting desired applied with
// components (a JSON object), to the nuon server at base, with the
// agent's own client and request signature, as nuon-agent does; it
// returns the commit or the server's refusal.
func pushStatus(t *testing.T, st *memory.Storage, base, id string, key *signature.Signer, parent plumbing.Hash, desired, components string) (plumbing.Hash, error) {
	t.Helper()
	b := gitobj.NewBatch()
	blob := b.Add(plumbing.BlobObject, fmt.Appendf(nil, "{\"install\":%q,\"desired\":%q,\"applied\":%q,\"phase\":\"Ready\",\"components\":%s}\n", id, desired, desired, components))
	tree := b.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = []plumbing.Hash{parent}
	}
	who := object.Signature{Name: "nuon agent " + id, Email: id + "@nuon.invalid", When: time.Now()}
	h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who,
		Message: "status: " + desired + " applied\n\n" + schemas.TrailerInstall + ": " + id + "\n"}, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	ref := plumbing.ReferenceName(schemas.StatusRef(id))
	if err := st.SetReference(plumbing.NewHashReference(ref, h)); err != nil {
		t.Fatal(err)
	}
	r := agent.NewRemote(base+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))
	return h, r.Push(context.Background(), st, ref, parent, h)
}

// pollAs polls install id's refs at the nuon server at base as its agent
// does.
func pollAs(base, id string, key *signature.Signer) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	r := agent.NewRemote(base+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))
	return r.Heads(context.Background(), plumbing.ReferenceName(schemas.InstallRef(id)), plumbing.ReferenceName(schemas.StatusRef(id)))
}

// TestServerFollowsArchive runs the real binaries: `nuon server` in front
// of the tenant repository, and `nuon install delete acme` against it,
// the server rendering acme deleted and an agent (its client, here)
// reporting no component left. The server drops acme's refs once they are
// archived, keeps the last status acme pushed under the archive, refuses
// acme's agent as archived, and neither it nor a server started again on
// its repository pushes acme's refs back upstream. Twice: following a git
// host (smart HTTP) where the operator runs install delete, and with no
// upstream, install delete run on the server's own repository.
func TestServerFollowsArchive(t *testing.T) {
	root := repoRoot()
	keys := filepath.Join(root, "fixtures", "keys")
	bin := nuonBinary(t)
	acmeKey, err := signature.LoadSigner(filepath.Join(keys, "acme"))
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	ref := func(dir, name string) string {
		out, _ := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", name)
		return out
	}
	live := []string{schemas.InstallRef("acme"), schemas.StatusRef("acme")}
	archived := func(dir, desired, status string) error {
		for _, r := range live {
			if got := ref(dir, r); got != "" {
				return fmt.Errorf("%s: %s is %s", dir, r, got)
			}
		}
		for r, want := range map[string]string{schemas.ArchiveGenRef("acme", 1, live[0]): desired, schemas.ArchiveGenRef("acme", 1, live[1]): status} {
			if got := ref(dir, r); got != want {
				return fmt.Errorf("%s: %s is %q, want %s", dir, r, got, want)
			}
		}
		return nil
	}
	serve := func(repo string, flags ...string) *nuonServer {
		srv := startServer(t, bin, nil, append([]string{"--repo", repo, "--render-key", filepath.Join(keys, "render"), "--poll-interval", "200ms"}, flags...)...)
		srv.waitReady(t, time.Minute)
		return srv
	}
	// deleteAcme runs nuon install delete acme against repo (the git
	// host, or the server's own repository) while acme's "agent" answers
	// the deleted desired state through the server at base; it returns
	// the last desired state and status.
	st := memory.NewStorage() // acme's agent's
	deleteAcme := func(t *testing.T, base, repo, dir string, log func() string) (string, string) {
		t.Helper()
		first := ref(dir, live[0])
		applied, err := pushStatus(t, st, base, "acme", acmeKey, plumbing.ZeroHash, first, `{"web":{"phase":"Ready"}}`)
		if err != nil {
			t.Fatal(err)
		}
		// The agent has reported before anyone deletes the install.
		waitFor(t, "acme's status in "+dir, time.Minute, log, func() bool { return ref(dir, live[1]) == applied.String() })
		cmd, out := startProcess(t, nil, bin, "install", "delete", "acme", "--repo", repo, "--dir", t.TempDir(), "--timeout", "2m")
		var deleted string
		waitFor(t, "acme rendered deleted", time.Minute, func() string { return log() + "\ninstall delete:\n" + out.String() }, func() bool {
			deleted = ref(dir, live[0])
			return deleted != "" && deleted != first
		})
		last, err := pushStatus(t, st, base, "acme", acmeKey, applied, deleted, "{}")
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("nuon install delete: %v\n%s\nserver:\n%s", err, out.String(), log())
		}
		t.Logf("nuon install delete:\n%s", out.String())
		return deleted, last.String()
	}
	refusedArchived := func(base string) error {
		heads, err := pollAs(base, "acme", acmeKey)
		if err == nil || !strings.Contains(err.Error(), "install archived") {
			return fmt.Errorf("acme's poll at %s: %v, %v; want it refused as archived", base, heads, err)
		}
		return nil
	}

	t.Run("upstream", func(t *testing.T) {
		host := gittest.NewServer(t)
		upstreamDir := host.InitBare(t, "upstream.git")
		gittest.Git(t, upstreamDir, "config", "http.receivepack", "true")
		gittest.CommitDir(t, upstreamDir, "main", src, "shop")
		upstream := host.URL("upstream.git")
		repo := filepath.Join(t.TempDir(), "served.git")
		gittest.InitBare(t, repo)
		srv := serve(repo, "--upstream", upstream)
		base, log := srv.url, srv.log.String
		waitFor(t, "acme's desired state upstream", time.Minute, log, func() bool { return ref(upstreamDir, live[0]) != "" })
		globex := ref(upstreamDir, schemas.InstallRef("globex"))

		desired, status := deleteAcme(t, base, upstream, upstreamDir, log)
		if err := archived(upstreamDir, desired, status); err != nil {
			t.Fatalf("install delete: %v", err)
		}
		waitFor(t, "the server to drop acme's refs", time.Minute, log, func() bool { return archived(repo, desired, status) == nil })
		if err := refusedArchived(base); err != nil {
			t.Error(err)
		}
		if _, err := pushStatus(t, st, base, "acme", acmeKey, plumbing.NewHash(status), desired, "{}"); err == nil || !strings.Contains(err.Error(), "install archived") {
			t.Errorf("acme's push after the archive: %v; want it refused as archived", err)
		}

		// Started again on the same repository: the whole namespace goes
		// upstream, acme's refs not among them.
		srv.stop()
		again := srv.restart(t)
		again.waitReady(t, time.Minute)
		log = again.log.String
		waitFor(t, "the restarted server's first mirror push", time.Minute, log, func() bool { return strings.Contains(log(), "mirrored upstream") })
		for _, dir := range []string{upstreamDir, repo} {
			if err := archived(dir, desired, status); err != nil {
				t.Errorf("after a restart: %v", err)
			}
		}
		if got := ref(upstreamDir, schemas.InstallRef("globex")); got != globex {
			t.Errorf("globex's desired ref upstream %s, want %s", got, globex)
		}
	})

	t.Run("own repository", func(t *testing.T) {
		repo := filepath.Join(t.TempDir(), "tenant.git")
		gittest.InitBare(t, repo)
		gittest.CommitDir(t, repo, "main", src, "shop")
		srv := serve(repo)
		base, log := srv.url, srv.log.String
		waitFor(t, "acme's desired state", time.Minute, log, func() bool { return ref(repo, live[0]) != "" })
		desired, status := deleteAcme(t, base, repo, repo, log)
		waitFor(t, "the server to refuse acme as archived", time.Minute, log, func() bool { return refusedArchived(base) == nil })
		if err := archived(repo, desired, status); err != nil {
			t.Error(err)
		}
		if _, err := pushStatus(t, st, base, "acme", acmeKey, plumbing.NewHash(status), desired, "{}"); err == nil || !strings.Contains(err.Error(), "install archived") {
			t.Errorf("acme's push after the archive: %v; want it refused as archived", err)
		}
		if err := archived(repo, desired, status); err != nil {
			t.Error(err)
		}
	})
}
