package server

import (
	"bytes"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// TrailerKeyHandover, in a status commit, names the install's next agent
// key (authorized_keys form, no comment). The commit is signed by the key
// in force; every commit after it on the status ref must be signed by the
// named key, and the server takes the named key for the install's requests
// and pushes from then on.
const TrailerKeyHandover = "Nuon-Key-Handover"

// TrailerKeyRetired, beside TrailerKeyHandover, names the key that signs
// the hand-over and stops with it: the record says both ends, so the
// server reading history back after a restart knows which key is retired
// without trying keys.
const TrailerKeyRetired = "Nuon-Key-Retired"

// rotation is what an install's status history says of its key: the key
// handed over to last and every key that handed over before it, oldest
// first. The zero rotation says nothing (main's agentKey stands).
type rotation struct {
	current ssh.PublicKey
	retired []string // authorized form of every key that handed over
}

// unreadRotation stands for a status history that could not be read.
var unreadRotation = &rotation{}

// inForce is the install's key given main's agentKey. A hand-over stands
// while main still names a key of the chain (the old key, or the new key
// once main caught up); main naming a key outside the chain is an
// operator's re-keying and overrides the hand-overs (the way out of a
// hand-over to a key that leaked).
func (r *rotation) inForce(main ssh.PublicKey) ssh.PublicKey {
	if main == nil || r == nil || r.current == nil {
		return main
	}
	m := authorizedKey(main)
	if m == authorizedKey(r.current) {
		return r.current
	}
	for _, old := range r.retired {
		if old == m {
			return r.current
		}
	}
	return main
}

// used reports whether key has been one of the install's keys in the
// chain: a hand-over back to it is a replay.
func (r *rotation) used(key string) bool {
	if r == nil {
		return false
	}
	if r.current != nil && authorizedKey(r.current) == key {
		return true
	}
	for _, old := range r.retired {
		if old == key {
			return true
		}
	}
	return false
}

// step is a hand-over: the rotation with key in force after it.
func (r *rotation) step(from, to ssh.PublicKey) *rotation {
	n := &rotation{current: to}
	if r != nil {
		n.retired = append(n.retired, r.retired...)
	}
	n.retired = append(n.retired, authorizedKey(from))
	return n
}

// parseHandover reads a commit's hand-over trailer; ok is false when the
// commit hands nothing over.
func parseHandover(msg string) (from, to ssh.PublicKey, ok bool, err error) {
	v, ok := schemas.Trailer(msg, TrailerKeyHandover)
	if !ok {
		return nil, nil, false, nil
	}
	if to, err = trailerKey(TrailerKeyHandover, v); err != nil {
		return nil, nil, true, err
	}
	v, ok = schemas.Trailer(msg, TrailerKeyRetired)
	if !ok {
		return nil, nil, true, fmt.Errorf("a key hand-over without a %s trailer", TrailerKeyRetired)
	}
	if from, err = trailerKey(TrailerKeyRetired, v); err != nil {
		return nil, nil, true, err
	}
	return from, to, true, nil
}

func trailerKey(name, v string) (ssh.PublicKey, error) {
	key, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("%s trailer: %v", name, err)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%s trailer names more than one key", name)
	}
	if key.Type() != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("%s trailer: key type %s, want %s", name, key.Type(), ssh.KeyAlgoED25519)
	}
	return key, nil
}

// checkPushRotating is checkPush for an install whose key may be handed
// over inside the push. key is the key in force at c.old, rot what the
// history before c.old handed over, and taken reports the install that
// uses a key already (main or a hand-over), if another. It returns the
// rotation after the push (nil when the push hands nothing over).
func checkPushRotating(q *quarantine, key ssh.PublicKey, rot *rotation, install string, c pushCommand, taken func(string) string) (*rotation, error) {
	if c.ref != schemas.StatusRef(install) {
		return nil, fmt.Errorf("%w: %s: an install may push only its own status ref", ErrRefused, c.ref)
	}
	if c.new.IsZero() {
		return nil, fmt.Errorf("%w: %s: deleting is not allowed", ErrRefused, c.ref)
	}
	// Walk back to c.old, then judge forwards: which key must sign a
	// commit depends on the hand-overs before it.
	var chain []*object.Commit
	var pushed []*object.Commit
	h := c.new
	for n := 0; h != c.old; n++ {
		if n == maxNewCommits {
			return nil, fmt.Errorf("%w: more than %d new commits", ErrRefused, maxNewCommits)
		}
		commit, err := q.commit(h)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrRefused, h, err)
		}
		chain = append(chain, commit)
		if q.HasEncodedObject(h) == nil {
			pushed = append(pushed, commit)
		}
		if len(commit.ParentHashes) == 0 {
			if !c.old.IsZero() {
				return nil, fmt.Errorf("%w: %s: not a fast-forward of %s", ErrRefused, c.ref, c.old)
			}
			break
		}
		if len(commit.ParentHashes) > 1 {
			return nil, fmt.Errorf("%w: commit %s: a status commit has one parent", ErrRefused, h)
		}
		h = commit.ParentHashes[0]
	}
	var after *rotation
	for i := len(chain) - 1; i >= 0; i-- {
		commit := chain[i]
		trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{install}, Key: key}}}
		if _, err := trust.VerifyCommit(commit); err != nil {
			return nil, fmt.Errorf("%w: commit %s: %v", ErrRefused, commit.Hash, err)
		}
		if v, _ := schemas.Trailer(commit.Message, schemas.TrailerInstall); v != install {
			return nil, fmt.Errorf("%w: commit %s: %s trailer is %q, not %q", ErrRefused, commit.Hash, schemas.TrailerInstall, v, install)
		}
		from, next, ok, err := parseHandover(commit.Message)
		if err != nil {
			return nil, fmt.Errorf("%w: commit %s: %v", ErrRefused, commit.Hash, err)
		}
		if !ok {
			continue
		}
		n := authorizedKey(next)
		switch {
		case authorizedKey(from) != authorizedKey(key):
			return nil, fmt.Errorf("%w: commit %s: %s names a key that is not install %s's key in force", ErrRefused, commit.Hash, TrailerKeyRetired, install)
		case rot.used(n) || n == authorizedKey(key):
			return nil, fmt.Errorf("%w: commit %s: key hand-over to a key install %s has used before", ErrRefused, commit.Hash, install)
		case taken != nil && taken(n) != "" && taken(n) != install:
			return nil, fmt.Errorf("%w: commit %s: key hand-over to the key of install %s", ErrRefused, commit.Hash, taken(n))
		}
		rot = rot.step(key, next)
		after, key = rot, next
	}
	if err := q.connected(pushed); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return after, nil
}

// scanRotation reads an install's status history from tip back to its
// first commit and replays its hand-overs. Only checked pushes reach a
// status ref, so each hand-over there was signed by the key in force when
// it was pushed.
func scanRotation(read func(plumbing.Hash, int64) (plumbing.ObjectType, []byte, error), tip plumbing.Hash) (*rotation, error) {
	type hand struct{ from, to ssh.PublicKey }
	var hands []hand
	for h := tip; !h.IsZero(); {
		typ, data, err := read(h, schemas.DefaultMaxFileSize)
		if err != nil {
			return nil, err
		}
		if typ != plumbing.CommitObject {
			return nil, fmt.Errorf("%s is a %s, not a commit", h, typ)
		}
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.CommitObject)
		o.Write(data)
		var c object.Commit
		if err := c.Decode(o); err != nil {
			return nil, err
		}
		if from, to, ok, err := parseHandover(c.Message); err == nil && ok {
			hands = append(hands, hand{from, to})
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	var r *rotation
	for i := len(hands) - 1; i >= 0; i-- {
		r = r.step(hands[i].from, hands[i].to)
	}
	return r, nil
}

// installsUsing is a reverse index of agent keys: main's agentKey of every
// install and every install's key in force by hand-over. Read only on a
// hand-over, which is rare.
func (k *keyTable) installUsing(key string, skip string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.load() != nil {
		return ""
	}
	for id := range k.entries {
		if id == skip {
			continue
		}
		if m := k.read(id); m != nil && authorizedKey(m) == key {
			return id
		}
	}
	for id, r := range k.rot {
		if id != skip && r.used(key) {
			return id
		}
	}
	return ""
}

// fingerprint is the key in force, as ssh-keygen -l prints it.
func (r *rotation) fingerprint() string { return ssh.FingerprintSHA256(r.current) }
