package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// maxNewCommits bounds how many new commits one push may bring.
const maxNewCommits = 10000

// ErrRefused is the pre-receive check's refusal of a push.
var ErrRefused = errors.New("push refused")

func authorizedKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// RunPreReceive is the pre-receive hook git receive-pack runs for a push to
// the server (as `nuon server pre-receive`), in the repository, with the
// pushed objects in quarantine and the install and its key in the
// environment (NUON_INSTALL, NUON_AGENT_KEY). It reads "old new ref" lines
// from stdin and refuses, before any ref moves, unless each names the
// install's status ref, moves it forward, and every new commit (from new
// back to old, one parent each) is signed by the install's key and names
// the install in its Nuon-Install trailer. Messages go to stderr, which git
// relays to the client as "remote: …".
func RunPreReceive(ctx context.Context, stdin io.Reader, stderr io.Writer, getenv func(string) string) error {
	err := preReceive(ctx, stdin, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "nuon: refused: %v\n", err)
	}
	return err
}

func preReceive(ctx context.Context, stdin io.Reader, getenv func(string) string) error {
	install := getenv(envInstall)
	keyText := getenv(envAgentKey)
	if install == "" || keyText == "" {
		return fmt.Errorf("%w: no install or key in the environment", ErrRefused)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(keyText))
	if err != nil {
		return fmt.Errorf("%w: agent key: %v", ErrRefused, err)
	}
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{install}, Key: key}}}
	var cmds []pushCommand
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return fmt.Errorf("%w: bad hook input", ErrRefused)
		}
		cmds = append(cmds, pushCommand{old: plumbing.NewHash(f[0]), new: plumbing.NewHash(f[1]), ref: f[2]})
	}
	if err := sc.Err(); err != nil {
		return err
	}
	cat, err := newCatFile(ctx)
	if err != nil {
		return err
	}
	defer cat.close()
	for _, c := range cmds {
		if c.ref != schemas.StatusRef(install) {
			return fmt.Errorf("%w: %s: an install may push only its own status ref", ErrRefused, c.ref)
		}
		if c.new.IsZero() {
			return fmt.Errorf("%w: %s: deleting is not allowed", ErrRefused, c.ref)
		}
		if err := checkChain(cat, trust, install, c); err != nil {
			return err
		}
	}
	return nil
}

// checkChain walks from c.new back to c.old; every commit on the way must
// be signed by the install and have one parent (the first may have none
// when the ref is new).
func checkChain(cat *catFile, trust *signature.AllowedSigners, install string, c pushCommand) error {
	h := c.new
	for n := 0; h != c.old; n++ {
		if n == maxNewCommits {
			return fmt.Errorf("%w: more than %d new commits", ErrRefused, maxNewCommits)
		}
		commit, err := cat.commit(h)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrRefused, h, err)
		}
		if _, err := trust.VerifyCommit(commit); err != nil {
			return fmt.Errorf("%w: commit %s: %v", ErrRefused, h, err)
		}
		if v, _ := schemas.Trailer(commit.Message, schemas.TrailerInstall); v != install {
			return fmt.Errorf("%w: commit %s: %s trailer is %q, not %q", ErrRefused, h, schemas.TrailerInstall, v, install)
		}
		switch len(commit.ParentHashes) {
		case 0:
			if !c.old.IsZero() {
				return fmt.Errorf("%w: %s: not a fast-forward of %s", ErrRefused, c.ref, c.old)
			}
			return nil
		case 1:
			h = commit.ParentHashes[0]
		default:
			return fmt.Errorf("%w: commit %s: a status commit has one parent", ErrRefused, h)
		}
	}
	return nil
}

// catFile reads objects through one git cat-file --batch, which sees the
// push's quarantined objects.
type catFile struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func newCatFile(ctx context.Context) (*catFile, error) {
	cmd := exec.CommandContext(ctx, "git", "cat-file", "--batch")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	return &catFile{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

func (c *catFile) close() {
	c.in.Close()
	_ = c.cmd.Wait()
}

// commit reads and decodes one commit.
func (c *catFile) commit(h plumbing.Hash) (*object.Commit, error) {
	if _, err := fmt.Fprintln(c.in, h.String()); err != nil {
		return nil, err
	}
	hdr, err := c.out.ReadString('\n')
	if err != nil {
		return nil, err
	}
	f := strings.Fields(hdr)
	if len(f) != 3 {
		return nil, errors.New("object not found")
	}
	if f[1] != "commit" {
		return nil, fmt.Errorf("is a %s, not a commit", f[1])
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size > 64<<20 {
		return nil, errors.New("bad object size")
	}
	data := make([]byte, size+1) // and the trailing newline
	if _, err := io.ReadFull(c.out, data); err != nil {
		return nil, err
	}
	obj := &plumbing.MemoryObject{}
	obj.SetType(plumbing.CommitObject)
	obj.Write(data[:size])
	commit := &object.Commit{}
	if err := commit.Decode(obj); err != nil {
		return nil, err
	}
	if commit.Hash != h {
		return nil, errors.New("hash mismatch")
	}
	return commit, nil
}

var _ = bytes.MinRead
