package signature_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
)

const keys = "../../fixtures/keys"

func signer(tb testing.TB, name string) *signature.Signer {
	tb.Helper()
	s, err := signature.LoadSigner(filepath.Join(keys, name))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// trust parses an allowed_signers file made of lines.
func trust(tb testing.TB, lines ...string) *signature.AllowedSigners {
	tb.Helper()
	as, err := signature.ParseAllowedSigners([]byte(strings.Join(lines, "\n")))
	if err != nil {
		tb.Fatal(err)
	}
	return as
}

// commit returns an unsigned commit of the empty tree.
func commit(msg string) *object.Commit {
	who := object.Signature{Name: "nuon test", Email: "test@nuon.invalid", When: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	return &object.Commit{
		Author: who, Committer: who, Message: msg,
		TreeHash: plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
	}
}

func TestSignAndVerify(t *testing.T) {
	render := signer(t, "render")
	as := trust(t, "# the tenant renderer", "nuon-render "+render.AuthorizedKey())
	msg := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nhello\n")
	sig, err := render.Sign(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sig, []byte("-----BEGIN SSH SIGNATURE-----\n")) {
		t.Fatalf("not an armored SSH signature:\n%s", sig)
	}
	v, err := as.Verify(msg, sig)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if v.Principal != "nuon-render" || v.Fingerprint == "" {
		t.Errorf("verified %+v", v)
	}
	again, err := render.Sign(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sig, again) {
		t.Error("ed25519 signed the same message twice differently")
	}

	tampered := append(bytes.Clone(msg), 'x')
	if _, err := as.Verify(tampered, sig); !errors.Is(err, signature.ErrInvalid) {
		t.Errorf("tampered message: %v, want ErrInvalid", err)
	}
	acme := signer(t, "acme")
	byAcme, err := acme.Sign(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.Verify(msg, byAcme); !errors.Is(err, signature.ErrUntrusted) {
		t.Errorf("signed by an unknown key: %v, want ErrUntrusted", err)
	}
	if _, err := as.Verify(msg, []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n")); !errors.Is(err, signature.ErrInvalid) {
		t.Errorf("garbage signature: %v, want ErrInvalid", err)
	}
}

func TestVerifyCommit(t *testing.T) {
	render := signer(t, "render")
	as := trust(t, "nuon-render "+render.AuthorizedKey())
	c := commit("signed\n")
	if err := gitobj.Sign(c, render); err != nil {
		t.Fatal(err)
	}
	if _, err := as.VerifyCommit(c); err != nil {
		t.Fatalf("verify: %v", err)
	}
	c.Message = "changed after signing\n"
	if _, err := as.VerifyCommit(c); !errors.Is(err, signature.ErrInvalid) {
		t.Errorf("changed commit: %v, want ErrInvalid", err)
	}
	if _, err := as.VerifyCommit(commit("unsigned\n")); !errors.Is(err, signature.ErrUnsigned) {
		t.Errorf("unsigned commit: %v, want ErrUnsigned", err)
	}
	pgp := commit("pgp\n")
	pgp.PGPSignature = "-----BEGIN PGP SIGNATURE-----\n\nxx\n-----END PGP SIGNATURE-----\n"
	if _, err := as.VerifyCommit(pgp); !errors.Is(err, signature.ErrInvalid) {
		t.Errorf("PGP-signed commit: %v, want ErrInvalid", err)
	}
	byAcme := commit("by acme\n")
	if err := gitobj.Sign(byAcme, signer(t, "acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := as.VerifyCommit(byAcme); !errors.Is(err, signature.ErrUntrusted) {
		t.Errorf("commit by an untrusted key: %v, want ErrUntrusted", err)
	}
}

// repo is a bare repository and its go-git handle.
func repo(t *testing.T) (string, *git.Repository) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, dir)
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, dir, "hash-object", "-w", "-t", "tree", "/dev/null")
	return dir, r
}

// store writes a commit into the repository and returns its id.
func store(t *testing.T, r *git.Repository, c *object.Commit) plumbing.Hash {
	t.Helper()
	o := r.Storer.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// writeFile writes content into a new file of the test and returns its
// path.
func writeFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// verifyWithGit runs stock `git verify-commit` against an allowed_signers
// file.
func verifyWithGit(t *testing.T, dir, allowed string, h plumbing.Hash) error {
	t.Helper()
	f := writeFile(t, "allowed_signers", allowed, 0o644)
	_, err := gittest.Run(dir, nil, "-c", "gpg.ssh.allowedSignersFile="+f, "verify-commit", h.String())
	return err
}

// TestGitVerifiesOurCommits writes a commit signed by SignCommit into a
// repository and has stock git verify it; and the other way round, this
// package verifies a commit stock git signed with ssh-keygen.
func TestGitVerifiesOurCommits(t *testing.T) {
	dir, r := repo(t)
	render := signer(t, "render")
	c := commit("signed by nuon\n\nNuon-Install: acme\n")
	if err := gitobj.Sign(c, render); err != nil {
		t.Fatal(err)
	}
	h := store(t, r, c)
	if err := verifyWithGit(t, dir, "nuon-render "+render.AuthorizedKey()+"\n", h); err != nil {
		t.Errorf("git verify-commit: %v", err)
	}
	if err := verifyWithGit(t, dir, "nuon-render "+signer(t, "acme").AuthorizedKey()+"\n", h); err == nil {
		t.Error("git verify-commit accepts the commit with another key trusted")
	}
}

func TestWeVerifyGitsCommits(t *testing.T) {
	dir, r := repo(t)
	pem, err := os.ReadFile(filepath.Join(keys, "render"))
	if err != nil {
		t.Fatal(err)
	}
	key := writeFile(t, "render", string(pem), 0o600)
	out, err := gittest.Run(dir, nil, "-c", "gpg.format=ssh", "-c", "user.signingkey="+key,
		"commit-tree", "-S", "-m", "signed by git", "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
	if err != nil {
		t.Fatalf("git commit-tree -S: %v", err)
	}
	c, err := r.CommitObject(plumbing.NewHash(out))
	if err != nil {
		t.Fatal(err)
	}
	render := signer(t, "render")
	v, err := trust(t, "nuon-render "+render.AuthorizedKey()).VerifyCommit(c)
	if err != nil {
		t.Fatalf("verify a commit git signed: %v", err)
	}
	if v.Principal != "nuon-render" {
		t.Errorf("principal %q", v.Principal)
	}
	if _, err := trust(t, "acme "+signer(t, "acme").AuthorizedKey()).VerifyCommit(c); !errors.Is(err, signature.ErrUntrusted) {
		t.Errorf("with another key trusted: %v, want ErrUntrusted", err)
	}
}

// TestAllowedSignersAgreeWithGit checks one signed commit against several
// allowed_signers files, with this package and with git, which must agree.
func TestAllowedSignersAgreeWithGit(t *testing.T) {
	dir, r := repo(t)
	render := signer(t, "render")
	c := commit("which signers\n")
	if err := gitobj.Sign(c, render); err != nil {
		t.Fatal(err)
	}
	h := store(t, r, c)
	key, acme := render.AuthorizedKey(), signer(t, "acme").AuthorizedKey()
	for _, tc := range []struct {
		name, file string
		ok         bool
	}{
		{"plain", "nuon-render " + key + "\n", true},
		{"comments and blank lines", "# renderers\n\n   # indented comment\nnuon-render " + key + " a comment\n", true},
		{"several principals", "ci@example.com,nuon-render " + key + "\n", true},
		{"quoted principal", `"nuon render" ` + key + "\n", true},
		{"namespace git", `nuon-render namespaces="git" ` + key + "\n", true},
		{"namespaces with git", `nuon-render namespaces="file,git" ` + key + "\n", true},
		{"namespace file only", `nuon-render namespaces="file" ` + key + "\n", false},
		{"another key", "nuon-render " + acme + "\n", false},
		{"the key second", "acme " + acme + "\nnuon-render " + key + "\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as, err := signature.ParseAllowedSigners([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = as.VerifyCommit(c)
			if (err == nil) != tc.ok {
				t.Errorf("VerifyCommit: %v, want ok %t", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, signature.ErrUntrusted) {
				t.Errorf("VerifyCommit: %v, want ErrUntrusted", err)
			}
			gitErr := verifyWithGit(t, dir, tc.file, h)
			if (gitErr == nil) != tc.ok {
				t.Errorf("git verify-commit: %v, want ok %t", gitErr, tc.ok)
			}
		})
	}
}
