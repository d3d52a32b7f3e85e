package server

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/trust"
	"nuon.dev/nuon/trust/maingit"
)

// rootKeysTTL is how long keys read from the trust root are kept while
// main does not move: a key's window may open or close, or a revocation
// take effect, with no new commit.
const rootKeysTTL = time.Minute

// mainKeys are the keys of one trust role on main, by key id
// (requests.KeyID), read through trust.MainKeys: the root's role when
// main's root defines it, else the role's legacy allowed_signers file
// (deprecated), named by file: trust/requests for operators, trust/builds
// and trust/build-agents for builds. They are read again when main moves,
// and from the root every rootKeysTTL too.
type mainKeys struct {
	s    *Server
	file string

	mu     sync.Mutex
	main   plumbing.Hash
	read   time.Time
	ttl    time.Duration
	trust  *signature.AllowedSigners
	byID   map[string]signature.AllowedSigner
	warned []string
}

// roleKeysAt returns the keys of role on the commit main, at the server's
// clock.
func (s *Server) roleKeysAt(main plumbing.Hash, role trust.Role) (*trust.Keys, error) {
	if main.IsZero() {
		return &trust.Keys{Role: role}, nil
	}
	repo, err := gitrepo.Open(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	return maingit.Keys(repo.Storer(), main, role, s.cfg.Now())
}

// role is the role whose legacy file is k.file.
func (k *mainKeys) role() (trust.Role, error) {
	for role, file := range trust.LegacyFiles {
		if file == k.file {
			return role, nil
		}
	}
	return "", fmt.Errorf("%s is not a key file of a trust role", k.file)
}

// current returns the role's keys in the main the server follows now;
// none when main names none or they cannot be read (logged).
func (k *mainKeys) current() (*signature.AllowedSigners, map[string]signature.AllowedSigner) {
	main := k.s.keys.mainCommit()
	now := k.s.cfg.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if main == k.main && k.byID != nil && (k.ttl == 0 || now.Sub(k.read) < k.ttl && !now.Before(k.read)) {
		return k.trust, k.byID
	}
	k.main, k.read, k.ttl, k.trust, k.byID = main, now, 0, nil, map[string]signature.AllowedSigner{}
	role, err := k.role()
	if err != nil {
		k.s.log.Error("read trusted keys", "file", k.file, "error", err)
		return nil, k.byID
	}
	keys, err := k.s.roleKeysAt(main, role)
	if err != nil {
		k.s.log.Error("read trusted keys", "role", string(role), "commit", main.String(), "error", err)
		return nil, k.byID
	}
	if keys.FromRoot() {
		k.ttl = rootKeysTTL
	}
	for _, w := range append(slices.Clone(keys.Warnings), keys.Deprecated) {
		if w == "" {
			continue
		}
		if !slices.Contains(k.warned, w) {
			k.warned = append(k.warned, w)
			k.s.log.Warn("trusted keys", "role", string(role), "commit", main.String(), "warning", w)
		}
	}
	if keys.Data == nil {
		return nil, k.byID
	}
	trust, err := signature.ParseAllowedSigners(keys.Data)
	if err != nil {
		k.s.log.Error("read trusted keys", "file", keys.From, "commit", main.String(), "error", err)
		return nil, k.byID
	}
	k.trust = trust
	for _, s := range trust.Signers {
		k.byID[requests.KeyID(s.Key)] = s
	}
	return k.trust, k.byID
}
