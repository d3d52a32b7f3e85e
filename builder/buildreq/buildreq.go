// Package buildreq signs and verifies build requests: the signed records
// vendor CI files with the tenant server (nuon build --remote) and the
// build agent builds (nuon build-agent). It is small on purpose: the
// server checks requests with it without linking the builder.
package buildreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// ErrRefused marks a build request the build agent will not build: bad
// signature, untrusted key, unknown component, missing commit, replay,
// expiry. It is final; filing it again will not help.
var ErrRefused = errors.New("build request refused")

// ErrReplayed marks a build request whose ID was built already.
var ErrReplayed = errors.New("build request already taken (replay)")

// SignRequest encodes r and signs the bytes with s.
func SignRequest(r schemas.BuildRequest, s *signature.Signer) (schemas.SignedBuildRequest, error) {
	if err := r.Validate(); err != nil {
		return schemas.SignedBuildRequest{}, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return schemas.SignedBuildRequest{}, err
	}
	sig, err := s.Sign(bytes.NewReader(data))
	if err != nil {
		return schemas.SignedBuildRequest{}, err
	}
	return schemas.SignedBuildRequest{Request: data, Signature: string(sig)}, nil
}

// VerifyRequest checks a signed build request: signed by a key of trusted
// over exactly its bytes, well formed, filed by that key's principal, and
// valid at now. Every error wraps ErrRefused.
func VerifyRequest(sub schemas.SignedBuildRequest, trusted *signature.AllowedSigners, now time.Time) (*schemas.BuildRequest, error) {
	if len(sub.Request) > schemas.MaxBuildRequest {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrRefused, schemas.MaxBuildRequest)
	}
	if trusted == nil || len(trusted.Signers) == 0 {
		return nil, fmt.Errorf("%w: no key is trusted for builds: list the keys in %s on main", ErrRefused, schemas.BuildTrustFile)
	}
	v, err := trusted.Verify(sub.Request, []byte(sub.Signature))
	if err != nil {
		return nil, fmt.Errorf("%w: %w (keys trusted for builds are listed in %s on main)", ErrRefused, err, schemas.BuildTrustFile)
	}
	var r schemas.BuildRequest
	dec := json.NewDecoder(bytes.NewReader(sub.Request))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: not a build request: %v", ErrRefused, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if r.Requester != v.Principal {
		return nil, fmt.Errorf("%w: build request %s names requester %q but is signed by %q (%s)", ErrRefused, r.ID, r.Requester, v.Principal, v.Fingerprint)
	}
	if now.After(r.Expires) {
		return nil, fmt.Errorf("%w: %w: build request %s expired at %s", ErrRefused, schemas.ErrBuildRequestExpired, r.ID, r.Expires.UTC().Format(time.RFC3339))
	}
	if r.Created.After(now.Add(5 * time.Minute)) {
		return nil, fmt.Errorf("%w: build request %s is created %s, in the future", ErrRefused, r.ID, r.Created.UTC().Format(time.RFC3339))
	}
	return &r, nil
}

// KeyID is the key id a build requester's or a build agent's HTTP
// requests are signed under (as an operator's: requests.KeyID).
func KeyID(pub ssh.PublicKey) string { return requests.KeyID(pub) }

// Ledger remembers the build request IDs a build agent took, one file per
// ID in a directory, so that a request replayed after it failed builds
// nothing even after a restart. A take that never finished (the agent
// died, or lost its lease) may be taken again: the server queued it again
// and the release on main, not the ledger, keeps it from being released
// twice (builder.FindRelease).
type Ledger struct {
	Dir string
}

// ledgerFailed is what a failed request's file holds.
const ledgerFailed = "failed\n"

// Take records id; resumed is set when an earlier take of it never
// finished. It fails with ErrReplayed when id failed before.
func (l Ledger) Take(id string) (resumed bool, err error) {
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return false, err
	}
	file := filepath.Join(l.Dir, id)
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		data, rerr := os.ReadFile(file)
		if rerr != nil {
			return false, fmt.Errorf("ledger: %w", rerr)
		}
		if string(data) == ledgerFailed {
			return false, fmt.Errorf("%w: %w: %s failed before: file a new request", ErrRefused, ErrReplayed, id)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("ledger: %w", err)
	}
	return false, f.Close()
}

// Fail records that id failed: a replay of it is refused.
func (l Ledger) Fail(id string) error {
	return os.WriteFile(filepath.Join(l.Dir, id), []byte(ledgerFailed), 0o600)
}
