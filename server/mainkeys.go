package server

import (
	"errors"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
)

// mainKeys are the keys one allowed_signers file on main lists, by key id
// (requests.KeyID): trust/requests for operators, trust/builds and
// trust/build-agents for builds. They are read again when main moves.
type mainKeys struct {
	s    *Server
	file string

	mu    sync.Mutex
	main  plumbing.Hash
	trust *signature.AllowedSigners
	byID  map[string]signature.AllowedSigner
}

// current returns the file's keys in the main the server follows now;
// none when main lacks the file or it does not parse (logged).
func (k *mainKeys) current() (*signature.AllowedSigners, map[string]signature.AllowedSigner) {
	main := k.s.keys.mainCommit()
	k.mu.Lock()
	defer k.mu.Unlock()
	if main == k.main && k.byID != nil {
		return k.trust, k.byID
	}
	k.main, k.trust, k.byID = main, nil, map[string]signature.AllowedSigner{}
	data, err := readMainFile(k.s.cfg.Dir, main, k.file)
	if err != nil {
		if !errors.Is(err, object.ErrFileNotFound) {
			k.s.log.Error("read trusted keys", "file", k.file, "commit", main.String(), "error", err)
		}
		return nil, k.byID
	}
	trust, err := signature.ParseAllowedSigners(data)
	if err != nil {
		k.s.log.Error("read trusted keys", "file", k.file, "commit", main.String(), "error", err)
		return nil, k.byID
	}
	k.trust = trust
	for _, s := range trust.Signers {
		k.byID[requests.KeyID(s.Key)] = s
	}
	return k.trust, k.byID
}
