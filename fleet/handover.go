package fleet

import (
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// The trailers of an install's key hand-over record (see the server
// package's "Install key rotation").
const (
	trailerKeyHandover = "Nuon-Key-Handover"
	trailerKeyRetired  = "Nuon-Key-Retired"
)

// maxKeyWalk bounds how far back StatusKeys reads a status history.
const maxKeyWalk = 10000

// StatusKeys says which key each commit of an install's status history
// (first parents from tip) must be signed by, given main's agentKey:
// each commit is judged by the key in force where it sits.
//
// The history's hand-overs form a chain k0 → k1 → … → kn. When main names
// none of its keys, every commit is judged by main's key (an operator
// re-keyed the install, or nothing was handed over). When main names k_m,
// the commits after hand-over i (i ≥ m) are judged by k_i: each hand-over
// by the key it retires, so a hand-over that key did not sign verifies
// nothing after it. Older keys (i < m) are taken only when k_m endorsed
// the hand-over to it by signing a commit after it (the agent's first
// status with its new key); then each earlier hand-over is endorsed by
// the next, which its successor signed. A commit signed by an old key
// after its hand-over is judged by the newer key and fails.
func StatusKeys(st storer.EncodedObjectStorer, tip plumbing.Hash, main string) func(plumbing.Hash) string {
	var commits []*object.Commit // newest first
	for h := tip; !h.IsZero() && len(commits) < maxKeyWalk; {
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			break
		}
		commits = append(commits, c)
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	type hand struct {
		at       int // index in commits
		from, to string
	}
	var hands []hand // oldest first
	for i := len(commits) - 1; i >= 0; i-- {
		to, ok1 := schemas.Trailer(commits[i].Message, trailerKeyHandover)
		from, ok2 := schemas.Trailer(commits[i].Message, trailerKeyRetired)
		if !ok1 || !ok2 {
			continue
		}
		f, t := normKey(from), normKey(to)
		if f == "" || t == "" {
			continue
		}
		if len(hands) > 0 && hands[len(hands)-1].to != f {
			hands = nil // a broken chain: only what follows the break counts
		}
		hands = append(hands, hand{i, f, t})
	}
	m := normKey(main)
	pos := -1 // main's key is k_pos: the key in force after hand-over pos-1
	for i, h := range hands {
		if h.from == m {
			pos = i
			break
		}
	}
	if pos < 0 && len(hands) > 0 && hands[len(hands)-1].to == m {
		pos = len(hands)
	}
	keyOf := map[plumbing.Hash]string{}
	if pos < 0 {
		return func(plumbing.Hash) string { return main }
	}
	// segment s (0..n): commits after hand-over s-1 up to hand-over s
	// (included: a hand-over is signed by the key it retires).
	segKey := func(s int) string {
		if s < len(hands) {
			return hands[s].from
		}
		return hands[len(hands)-1].to
	}
	first := 0
	if pos > 0 {
		// k_pos must have signed a commit after hand-over pos-1.
		endorsed := false
		end := -1
		if pos < len(hands) {
			end = hands[pos].at
		}
		for i := hands[pos-1].at - 1; i >= 0 && i >= end; i-- {
			if ok, _ := Verify(commits[i], installOf(commits[i]), segKey(pos)); ok {
				endorsed = true
				break
			}
		}
		if !endorsed {
			first = pos
		}
	}
	for i := len(commits) - 1; i >= 0; i-- {
		s := 0
		for s < len(hands) && hands[s].at > i {
			s++
		}
		if s < first {
			// Before a hand-over the key main names never endorsed:
			// judged by main's key, as without a rotation.
			keyOf[commits[i].Hash] = main
			continue
		}
		keyOf[commits[i].Hash] = segKey(s)
	}
	return func(h plumbing.Hash) string {
		if k, ok := keyOf[h]; ok {
			return k
		}
		return main
	}
}

func installOf(c *object.Commit) string {
	id, _ := schemas.Trailer(c.Message, schemas.TrailerInstall)
	return id
}

// normKey is an authorized key without its comment, or "" when it does not
// parse.
func normKey(s string) string {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return ""
	}
	b := ssh.MarshalAuthorizedKey(k)
	return string(b[:len(b)-1])
}

// keyAt is the key status commit c (the tip) of an install must be signed
// by: the key in force there by the history's hand-overs (StatusKeys).
func keyAt(st storer.EncodedObjectStorer, c *object.Commit, main string) string {
	if main == "" {
		return main
	}
	return StatusKeys(st, c.Hash, main)(c.Hash)
}
