package request

import (
	"crypto/sha256"
	"sync"
)

// Bounds of the signatures a Verifier remembers; see the package doc for
// what they cost and cover.
const (
	// DefaultMaxSeen is how many signatures a Verifier remembers, all
	// installs together: about 40 MiB at its fullest, and five minutes
	// of 1,700 requests/s.
	DefaultMaxSeen = 1 << 19
	// DefaultMaxSeenPerInstall is how many one install's key can make
	// it remember: an agent polling every 30 s makes about 30 requests
	// in a ten-minute window, so only a flood reaches it, and a flood
	// evicts its own install's signatures, not another's.
	DefaultMaxSeenPerInstall = 1024
)

// replayCache remembers the signatures a verifier accepted until they
// expire (their created time plus the allowed skew: past that, the clock
// check refuses them anyway), within a bound in total and per install.
// When a bound is reached the oldest signature goes first: the oldest of
// the install when its own bound is reached, the oldest of all when the
// total is. A signature is known by (install, nonce), hashed to 16 bytes;
// the nonce is signed, so a replay cannot change it.
type replayCache struct {
	mu              sync.Mutex
	max, perInstall int
	entries         map[replayKey]*replayEntry
	installs        map[string]*replayInstall
	head, tail      *replayEntry // all entries, oldest first
}

type replayKey [16]byte

// replayEntry is one remembered signature: 64 bytes, beside its 16-byte
// key and pointer in the map.
type replayEntry struct {
	key          replayKey
	expires      int64 // Unix seconds
	install      *replayInstall
	prev, next   *replayEntry // in the cache, by age
	iprev, inext *replayEntry // in the install, by age
}

type replayInstall struct {
	id         string
	n          int
	head, tail *replayEntry
}

func newReplayCache(max, perInstall int) *replayCache {
	if max <= 0 {
		max = DefaultMaxSeen
	}
	if perInstall <= 0 {
		perInstall = DefaultMaxSeenPerInstall
	}
	return &replayCache{
		max:        max,
		perInstall: perInstall,
		entries:    map[replayKey]*replayEntry{},
		installs:   map[string]*replayInstall{},
	}
}

// seen reports whether the signature (install, nonce) was seen and has
// not expired; if not, it remembers it until expires. now and expires are
// Unix seconds.
func (c *replayCache) seen(install, nonce string, expires, now int64) bool {
	var buf [64 + 1 + maxNonce]byte // an install id, a NUL, a nonce
	sum := sha256.Sum256(append(append(append(buf[:0], install...), 0), nonce...))
	k := replayKey(sum[:16])

	c.mu.Lock()
	defer c.mu.Unlock()
	// Entries come in roughly in time order: those at the front that
	// have expired go now, so the cache holds about one skew window of
	// traffic, not its bound.
	for c.head != nil && c.head.expires <= now {
		c.remove(c.head)
	}
	if e, ok := c.entries[k]; ok {
		if e.expires > now {
			return true
		}
		c.remove(e)
	}
	in := c.installs[install]
	if in == nil {
		in = &replayInstall{id: install}
		c.installs[install] = in
	}
	if in.n >= c.perInstall {
		c.remove(in.head)
	}
	if len(c.entries) >= c.max {
		c.remove(c.head)
	}
	e := &replayEntry{key: k, expires: expires, install: in}
	c.entries[k] = e
	e.prev = c.tail
	if c.tail != nil {
		c.tail.next = e
	} else {
		c.head = e
	}
	c.tail = e
	e.iprev = in.tail
	if in.tail != nil {
		in.tail.inext = e
	} else {
		in.head = e
	}
	in.tail = e
	in.n++
	// The install may have lost its last entry to the total bound just
	// above, and come back: it is in the map again with this entry.
	c.installs[install] = in
	return false
}

// remove forgets e.
func (c *replayCache) remove(e *replayEntry) {
	delete(c.entries, e.key)
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	in := e.install
	if e.iprev != nil {
		e.iprev.inext = e.inext
	} else {
		in.head = e.inext
	}
	if e.inext != nil {
		e.inext.iprev = e.iprev
	} else {
		in.tail = e.iprev
	}
	in.n--
	if in.n == 0 {
		delete(c.installs, in.id)
	}
	*e = replayEntry{}
}

// len is the number of signatures remembered, and of installs with any.
func (c *replayCache) len() (entries, installs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), len(c.installs)
}
