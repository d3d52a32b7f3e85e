package trust

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Reasons a key is not authorized. Each wraps ErrNotAuthorized too, so a
// caller may branch on the family or on the reason. They are final.
var (
	// ErrNotAuthorized is the family of every reason below.
	ErrNotAuthorized = errors.New("key not authorized")
	// ErrUnknownRole: the root defines no such role.
	ErrUnknownRole = errors.New("role not in the root")
	// ErrUnknownKey: the key is not one of the role's.
	ErrUnknownKey = errors.New("key not in the role")
	// ErrNotYetValid: the time is before the key's notBefore.
	ErrNotYetValid = errors.New("key not yet valid")
	// ErrKeyExpired: the time is at or after the key's notAfter.
	ErrKeyExpired = errors.New("key window has ended")
	// ErrRevoked: the key was revoked at or before the time.
	ErrRevoked = errors.New("key revoked")
	// ErrOutOfScope: the key does not apply to the target.
	ErrOutOfScope = errors.New("key out of scope")
	// ErrRoleThreshold: too few distinct authorized keys of a role signed.
	ErrRoleThreshold = errors.New("too few authorized signatures")
)

// Target is what a signature is about, for scope checks: the install's
// labels and channel, and the kind of request when it is one.
type Target struct {
	Labels      map[string]string
	Channel     string
	RequestKind string
}

// Authorize reports whether the key with fingerprint may sign for role at
// time at, for target: it is one of the role's keys, at is inside its
// window [notBefore, notAfter), it was not revoked at or before at, and
// both the role's scope and the key's own match target. It returns the
// key, or an error wrapping ErrNotAuthorized and one reason.
//
// Which root and which time: for a signature that lives in git, r is the
// root in force where the signature sits in history and at is the time
// SignedAt gives (see the package doc, "Signatures in git").
func (r *Root) Authorize(role Role, fingerprint string, at time.Time, t Target) (Key, error) {
	deny := func(reason error, format string, args ...any) (Key, error) {
		return Key{}, fmt.Errorf("%s key %s: %w: %w: %s", role, fingerprint, ErrNotAuthorized, reason, fmt.Sprintf(format, args...))
	}
	rk := r.Roles[role]
	if rk == nil {
		return deny(ErrUnknownRole, "%s defines no role %q", r, role)
	}
	i := slices.IndexFunc(rk.Keys, func(k Key) bool { return k.Fingerprint == fingerprint })
	if i < 0 {
		return deny(ErrUnknownKey, "not one of the %d keys of %s", len(rk.Keys), r)
	}
	k := rk.Keys[i]
	for _, rv := range r.Revocations {
		if rv.Fingerprint == fingerprint && !at.Before(rv.At) {
			return deny(ErrRevoked, "%q revoked at %s (%s), signed at %s", k.Name, stamp(rv.At), rv.Reason, stamp(at))
		}
	}
	if !k.NotBefore.IsZero() && at.Before(k.NotBefore) {
		return deny(ErrNotYetValid, "%q valid from %s, signed at %s", k.Name, stamp(k.NotBefore), stamp(at))
	}
	if !k.NotAfter.IsZero() && !at.Before(k.NotAfter) {
		return deny(ErrKeyExpired, "%q valid until %s, signed at %s", k.Name, stamp(k.NotAfter), stamp(at))
	}
	for _, s := range []struct {
		whose string
		scope Scope
	}{{"role", rk.Scope}, {"key", k.Scope}} {
		if why := s.scope.mismatch(t); why != "" {
			return deny(ErrOutOfScope, "%q: %s scope: %s", k.Name, s.whose, why)
		}
	}
	return k, nil
}

// Meets reports whether the distinct keys among fingerprints that
// Authorize accepts reach role's threshold. Each key counts once, however
// often it is given. The error wraps ErrRoleThreshold and says why each
// key that did not count was refused.
func (r *Root) Meets(role Role, fingerprints []string, at time.Time, t Target) error {
	rk := r.Roles[role]
	if rk == nil {
		_, err := r.Authorize(role, "", at, t)
		return err
	}
	good := map[string]bool{}
	var refused []error
	for _, fp := range fingerprints {
		if good[fp] {
			continue
		}
		if _, err := r.Authorize(role, fp, at, t); err != nil {
			refused = append(refused, err)
			continue
		}
		good[fp] = true
	}
	if len(good) >= rk.Threshold {
		return nil
	}
	return fmt.Errorf("%s: %w: %d distinct keys authorized, %d needed%s", role, ErrRoleThreshold, len(good), rk.Threshold, joinReasons(refused))
}

func joinReasons(errs []error) string {
	s := ""
	for _, e := range errs {
		s += "; " + e.Error()
	}
	return s
}

// SignedAt is the time at which to judge a signature found in git: the
// time its commit claims, but never earlier than floor, the latest time
// the verifier has already accepted on that line of history (the commit
// it applied last, or the parent the new commit builds on). A signer
// chooses its commit's time, so a leaked key can backdate; the floor
// stops it from backdating below anything already accepted, which after
// a revocation and a re-render (the compromise drill) is later than the
// revocation.
func SignedAt(claimed, floor time.Time) time.Time {
	if claimed.Before(floor) {
		return floor
	}
	return claimed
}

// mismatch says why t is outside s, or "" when it is inside.
func (s Scope) mismatch(t Target) string {
	for _, k := range slices.Sorted(maps.Keys(s.InstallLabels)) {
		v := s.InstallLabels[k]
		if got, ok := t.Labels[k]; !ok || got != v {
			return fmt.Sprintf("install label %s=%s required, install has %s", k, v, labelValue(t.Labels, k))
		}
	}
	if len(s.Channels) > 0 && !slices.Contains(s.Channels, t.Channel) {
		return fmt.Sprintf("channel %q is not one of %v", t.Channel, s.Channels)
	}
	if len(s.RequestKinds) > 0 && !slices.Contains(s.RequestKinds, t.RequestKind) {
		return fmt.Sprintf("request kind %q is not one of %v", t.RequestKind, s.RequestKinds)
	}
	return ""
}

func labelValue(labels map[string]string, k string) string {
	if v, ok := labels[k]; ok {
		return k + "=" + v
	}
	return "no " + k
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
