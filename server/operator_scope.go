package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
	"nuon.dev/nuon/trust/maingit"
)

// ErrOutOfScope marks a request for an install, or of a kind, that the
// operator's key may not ask for.
var ErrOutOfScope = errors.New("request outside the key's scope")

// inScope judges req against the trust root on main, when main has one
// (trust/root/): the key that signed it must be one of the operators
// role's keys, valid now, and both the role's scope and the key's own
// must match the install's labels and channel and the request's kind.
// Without a root, trust/requests is the whole of an operator's trust and
// names no scope: every install on main.
func (o *operator) inScope(req *schemas.Request, who signature.AllowedSigner) error {
	main := o.s.keys.mainCommit()
	root, err := mainRoot(o.s.cfg.Dir, main, o.s.cfg.Now)
	if err != nil {
		return fmt.Errorf("%w: the trust root on main does not verify, so no scope can be checked: %w", ErrOutOfScope, err)
	}
	if root == nil {
		return nil
	}
	in, err := installOnMainOf(o.s.cfg.Dir, main, req.Install)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrOutOfScope, err)
	}
	t := trust.Target{Labels: in.Labels, Channel: in.Channel, RequestKind: req.Type}
	if _, err := root.Authorize(trust.RoleOperators, ssh.FingerprintSHA256(who.Key), o.s.cfg.Now(), t); err != nil {
		return fmt.Errorf("%w: %s to %s: %w", ErrOutOfScope, req.Type, req.Install, err)
	}
	return nil
}

// mainRoot is the newest version of the trust root on main that the
// chain from version 1 reaches, nil when main has no trust/root/.
func mainRoot(dir string, main plumbing.Hash, now func() time.Time) (*trust.Root, error) {
	if main.IsZero() {
		return nil, nil
	}
	repo, err := gitrepo.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := maingit.Open(repo.Storer(), main)
	if err != nil {
		return nil, err
	}
	return trust.MainRoot(m, now())
}
