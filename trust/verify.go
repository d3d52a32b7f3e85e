package trust

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hiddeco/sshsig"
)

// Reasons a version of the root is refused. They are final: the same
// files give the same answer, so retrying will not help.
var (
	// ErrRollback: the next version is not newer than the one held.
	ErrRollback = errors.New("version goes backwards")
	// ErrSkip: the next version is more than one ahead; every step of
	// the chain must be verified.
	ErrSkip = errors.New("version skips ahead")
	// ErrFork: two different files claim the same version.
	ErrFork = errors.New("two different roots claim the same version")
	// ErrThreshold: too few distinct root keys signed.
	ErrThreshold = errors.New("too few root signatures")
	// ErrBadSignature: a signature by a root key does not verify: the
	// content, the namespace or the signature was changed.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrExpired: the newest version's expiry has passed; a newer one is
	// needed (freeze protection).
	ErrExpired = errors.New("root has expired")
)

// StepError is a refused step of the chain: the version held (From) did
// not accept the next one (To). Err is one of the Err… reasons.
type StepError struct {
	From, To int64
	// File is the refused version's file.
	File string
	Err  error
}

func (e *StepError) Error() string {
	if e.From == e.To {
		return fmt.Sprintf("trust root %d (%s): %v", e.To, e.File, e.Err)
	}
	return fmt.Sprintf("trust root %d -> %d (%s): %v", e.From, e.To, e.File, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Verify checks that next may follow prev, the version already trusted,
// and be the newest at now: next.Version is exactly prev.Version+1, a
// threshold of prev's root keys signed next (the keys trusted so far
// agree to the change) and so did a threshold of next's own root keys
// (the new keys accept their role), and next has not expired. Each key
// counts once, however many of its signatures the file carries. A
// signature by a root key that does not verify refuses the version
// outright; a signature by a key that is neither prev's nor next's root
// key is ignored. The error is a *StepError.
func Verify(prev, next *Root, now time.Time) error {
	if err := step(prev, next); err != nil {
		return err
	}
	return fresh(prev, next, now)
}

// SelfSigned checks that r is signed by a threshold of its own root keys:
// the check a version pinned at install creation gets, since nothing older
// vouches for it.
func SelfSigned(r *Root) error {
	n, err := count(r, r.RootKeys, r.Revocations)
	if err != nil {
		return &StepError{From: r.Version, To: r.Version, File: r.File, Err: err}
	}
	if n < r.RootThreshold {
		return &StepError{From: r.Version, To: r.Version, File: r.File,
			Err: fmt.Errorf("%w: %d of its own root keys signed, %d needed", ErrThreshold, n, r.RootThreshold)}
	}
	return nil
}

// Chain walks from pinned, the version an install was given (checked with
// SelfSigned), through versions (in any order; versions not newer than
// pinned are ignored, as long as they are the same as the ones the walk
// would pass) to the newest, verifying each step as Verify does. Expiry is
// checked on the newest only, as TUF does: an install that was offline
// for a year must still walk through versions that have expired since.
// It returns the newest version, or a *StepError at the first step
// refused, and then nothing newer is trusted.
func Chain(pinned *Root, versions []*Root, now time.Time) (*Root, error) {
	if err := SelfSigned(pinned); err != nil {
		return nil, err
	}
	vs := slices.Clone(versions)
	slices.SortStableFunc(vs, func(a, b *Root) int { return cmp.Compare(a.Version, b.Version) })
	for i := 1; i < len(vs); i++ {
		a, b := vs[i-1], vs[i]
		if a.Version == b.Version && a.Version > pinned.Version && !bytes.Equal(a.signed, b.signed) {
			return nil, &StepError{From: b.Version - 1, To: b.Version, File: b.File,
				Err: fmt.Errorf("%w: %s and %s", ErrFork, a.File, b.File)}
		}
	}
	cur := pinned
	for _, next := range vs {
		if next.Version <= cur.Version {
			continue
		}
		if err := step(cur, next); err != nil {
			return nil, err
		}
		cur = next
	}
	if err := fresh(pinned, cur, now); err != nil {
		return nil, err
	}
	return cur, nil
}

// step checks the version number and both thresholds.
func step(prev, next *Root) error {
	fail := func(err error) error {
		return &StepError{From: prev.Version, To: next.Version, File: next.File, Err: err}
	}
	switch {
	case next.Version <= prev.Version:
		return fail(fmt.Errorf("%w: %d is not newer than %d", ErrRollback, next.Version, prev.Version))
	case next.Version != prev.Version+1:
		return fail(fmt.Errorf("%w: %d follows %d, want %d", ErrSkip, next.Version, prev.Version, prev.Version+1))
	}
	n, err := count(next, prev.RootKeys, prev.Revocations)
	if err != nil {
		return fail(err)
	}
	if n < prev.RootThreshold {
		return fail(fmt.Errorf("%w: %d of version %d's root keys signed, %d needed", ErrThreshold, n, prev.Version, prev.RootThreshold))
	}
	if n, err = count(next, next.RootKeys, next.Revocations); err != nil {
		return fail(err)
	}
	if n < next.RootThreshold {
		return fail(fmt.Errorf("%w: %d of its own root keys signed, %d needed", ErrThreshold, n, next.RootThreshold))
	}
	return nil
}

// fresh refuses cur when it has expired at now.
func fresh(prev, cur *Root, now time.Time) error {
	if !now.Before(cur.Expires) {
		return &StepError{From: prev.Version, To: cur.Version, File: cur.File,
			Err: fmt.Errorf("%w: expired %s, now is %s", ErrExpired, cur.Expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	}
	return nil
}

// count returns how many distinct keys of keys, none of them revoked, made
// a good signature over r's signed content. Revocation of a root key
// takes effect whatever its time: root signatures carry no time of their
// own.
func count(r *Root, keys []Key, revoked []Revocation) (int, error) {
	good := map[string]bool{}
	for _, s := range r.Signatures {
		i := slices.IndexFunc(keys, func(k Key) bool { return k.Fingerprint == s.Fingerprint })
		if i < 0 || good[s.Fingerprint] {
			continue
		}
		if slices.ContainsFunc(revoked, func(rv Revocation) bool { return rv.Fingerprint == s.Fingerprint }) {
			continue
		}
		if err := sshsig.Verify(bytes.NewReader(r.signed), s.sig, keys[i].PublicKey, s.sig.HashAlgorithm, Namespace); err != nil {
			return 0, fmt.Errorf("%w: root key %q (%s): %v", ErrBadSignature, keys[i].Name, s.Fingerprint, err)
		}
		good[s.Fingerprint] = true
	}
	return len(good), nil
}
