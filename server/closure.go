package server

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// maxClosureObjects bounds the objects one request may make the server
// find in an install's closure: a year of an install's history is some
// tens of thousands. A request that needs more is refused rather than
// allowed to walk without end.
const maxClosureObjects = 2_000_000

// maxTreeOrCommit bounds a commit or tree read while walking a closure;
// an install's trees are a few kilobytes.
const maxTreeOrCommit = 16 << 20

// errClosureTooLarge is a closure over maxClosureObjects.
var errClosureTooLarge = errors.New("install history too large to serve")

// closure is what one install may read: the objects reachable from its
// refs' tips, and nothing else. Every answer the server gives an install
// about objects (a fetch's ACKs, shallow lines and pack; the objects a
// push may name without bringing) is computed from it, so no request line
// can widen it: an object outside it is, to that install, an object that
// does not exist.
//
// It is found lazily from the tips, breadth first, and only as far as a
// question needs: the commits first (hasCommit: an agent's have is
// usually the parent of a tip, found at the second read), then the trees
// of those commits in the order found (has). A question about an object
// outside it reads the whole closure once and answers from memory after.
type closure struct {
	src objectSource

	commits map[plumbing.Hash]*commitInfo
	// pending are commits found whose parents are not yet looked at.
	pending []plumbing.Hash
	// objects are the trees and blobs found, with their type.
	objects map[plumbing.Hash]plumbing.ObjectType
	// unwalked are commits found whose trees are not yet walked.
	unwalked []plumbing.Hash
	found    int   // commits and objects found, bounded by maxClosureObjects
	err      error // the first read that failed in parents
}

// commitInfo is what the server reads of a commit: its tree, parents and
// committer time.
type commitInfo struct {
	tree    plumbing.Hash
	parents []plumbing.Hash
	time    int64
}

// newClosure starts the closure of tips (an install's desired and status
// ref tips): each must be a commit.
func newClosure(src objectSource, tips []plumbing.Hash) (*closure, error) {
	c := &closure{src: src, commits: map[plumbing.Hash]*commitInfo{}, objects: map[plumbing.Hash]plumbing.ObjectType{}}
	for _, h := range tips {
		if _, ok := c.commits[h]; ok {
			continue
		}
		ci, err := readCommitInfo(src, h)
		if err != nil {
			return nil, fmt.Errorf("ref tip %s: %w", h, err)
		}
		c.add(h, ci)
	}
	return c, nil
}

func (c *closure) add(h plumbing.Hash, ci *commitInfo) {
	c.commits[h] = ci
	c.pending = append(c.pending, h)
	c.unwalked = append(c.unwalked, h)
	c.found++
}

// commit returns a commit of the closure found so far.
func (c *closure) commit(h plumbing.Hash) (*commitInfo, bool) {
	ci, ok := c.commits[h]
	return ci, ok
}

// parents returns the parents of h, a commit of the closure, that the
// repository holds, finding each: a parent of a commit of the closure is
// in it. This and the tips are the only ways into the closure. A read
// that fails is kept in c.err and ends the walk there.
func (c *closure) parents(h plumbing.Hash) []plumbing.Hash {
	ci, ok := c.commits[h]
	if !ok {
		return nil
	}
	out := ci.parents[:0:0]
	for _, p := range ci.parents {
		if _, ok := c.commits[p]; !ok {
			if c.err != nil {
				return out
			}
			if c.found >= maxClosureObjects {
				c.err = errClosureTooLarge
				return out
			}
			pi, err := readCommitInfo(c.src, p)
			if errors.Is(err, errNoObject) {
				continue
			}
			if err != nil {
				c.err = err
				return out
			}
			c.add(p, pi)
		}
		out = append(out, p)
	}
	return out
}

// hasCommit reports whether h is a commit of the closure, finding
// commits until it is found or there are no more.
func (c *closure) hasCommit(h plumbing.Hash) (bool, error) {
	for {
		if _, ok := c.commits[h]; ok {
			return true, nil
		}
		more, err := c.nextCommit()
		if !more || err != nil {
			return false, err
		}
	}
}

// nextCommit reads the parents of the next pending commit; false when
// every commit is found. A parent the repository lacks (a shallow
// repository's boundary) is not part of the closure.
func (c *closure) nextCommit() (bool, error) {
	if len(c.pending) == 0 {
		return false, nil
	}
	h := c.pending[0]
	c.pending = c.pending[1:]
	c.parents(h)
	return c.err == nil, c.err
}

// has reports whether h is an object of the closure, and its type.
func (c *closure) has(h plumbing.Hash) (plumbing.ObjectType, bool, error) {
	for {
		if _, ok := c.commits[h]; ok {
			return plumbing.CommitObject, true, nil
		}
		if t, ok := c.objects[h]; ok {
			return t, true, nil
		}
		if len(c.unwalked) > 0 {
			commit := c.unwalked[0]
			c.unwalked = c.unwalked[1:]
			if err := c.walkTree(c.commits[commit].tree); err != nil {
				return plumbing.InvalidObject, false, err
			}
			continue
		}
		more, err := c.nextCommit()
		if !more || err != nil {
			return plumbing.InvalidObject, false, err
		}
	}
}

// walkTree adds a tree and everything it names to the closure.
func (c *closure) walkTree(h plumbing.Hash) error {
	if _, ok := c.objects[h]; ok {
		return nil
	}
	data, err := readTyped(c.src, h, plumbing.TreeObject)
	if errors.Is(err, errNoObject) {
		return nil // missing here: nothing to serve or to name
	}
	if err != nil {
		return err
	}
	c.objects[h] = plumbing.TreeObject
	c.found++
	return eachEntry(data, func(mode filemode.FileMode, _ []byte, e plumbing.Hash) error {
		if c.found >= maxClosureObjects {
			return errClosureTooLarge
		}
		switch mode {
		case filemode.Submodule:
			return nil
		case filemode.Dir:
			return c.walkTree(e)
		}
		if _, ok := c.objects[e]; !ok {
			c.objects[e] = plumbing.BlobObject
			c.found++
		}
		return nil
	})
}

// readTyped reads an object that must be of type t.
func readTyped(src objectSource, h plumbing.Hash, t plumbing.ObjectType) ([]byte, error) {
	got, data, err := src.read(h, maxTreeOrCommit)
	if err != nil {
		return nil, err
	}
	if got != t {
		return nil, fmt.Errorf("object %s is a %s, not a %s", h, got, t)
	}
	return data, nil
}

// readCommitInfo reads and parses a commit.
func readCommitInfo(src objectSource, h plumbing.Hash) (*commitInfo, error) {
	data, err := readTyped(src, h, plumbing.CommitObject)
	if err != nil {
		return nil, err
	}
	ci, err := parseCommit(data)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", h, err)
	}
	return ci, nil
}

// parseCommit reads a commit's tree, parents and committer time from its
// headers; the rest (message, signature) is not needed to walk history.
func parseCommit(data []byte) (*commitInfo, error) {
	ci := &commitInfo{}
	seenTree, seenCommitter := false, false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) == 0 {
			break // the message follows
		}
		key, val, _ := bytes.Cut(line, []byte(" "))
		switch string(key) {
		case "tree":
			if seenTree {
				return nil, errors.New("two trees")
			}
			h, ok := parseHex(val)
			if !ok {
				return nil, fmt.Errorf("bad tree %q", truncate(string(val)))
			}
			ci.tree, seenTree = h, true
		case "parent":
			h, ok := parseHex(val)
			if !ok {
				return nil, fmt.Errorf("bad parent %q", truncate(string(val)))
			}
			ci.parents = append(ci.parents, h)
		case "committer":
			// "Name <email> TIME ZONE"
			end := bytes.LastIndexByte(val, '>')
			if end < 0 {
				return nil, errors.New("bad committer")
			}
			f := bytes.Fields(val[end+1:])
			if len(f) < 1 {
				return nil, errors.New("committer without time")
			}
			t, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return nil, errors.New("bad committer time")
			}
			ci.time, seenCommitter = t, true
		}
	}
	if !seenTree {
		return nil, errors.New("no tree")
	}
	if !seenCommitter {
		return nil, errors.New("no committer")
	}
	return ci, nil
}

// parseHex parses a lower-case hex SHA-1 object id.
func parseHex(b []byte) (plumbing.Hash, bool) {
	if !isHash(string(b)) {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(string(b)), true
}

// eachEntry calls fn for every entry of a tree object's content, in
// order: "MODE NAME\0" and 20 bytes of object id each.
func eachEntry(data []byte, fn func(mode filemode.FileMode, name []byte, h plumbing.Hash) error) error {
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp <= 0 || sp > 7 {
			return errors.New("bad tree entry mode")
		}
		mode, err := filemode.New(string(data[:sp]))
		if err != nil {
			return fmt.Errorf("bad tree entry mode %q", data[:sp])
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul <= 0 || len(data) < nul+1+hashSize {
			return errors.New("bad tree entry")
		}
		name := data[:nul]
		var h plumbing.Hash
		copy(h[:], data[nul+1:nul+1+hashSize])
		data = data[nul+1+hashSize:]
		if err := fn(mode, name, h); err != nil {
			return err
		}
	}
	return nil
}

// closureSource is an objectSource that holds only an install's closure:
// what a push may name without bringing, or base a thin pack's deltas on.
// An object outside it reads as missing, the same answer as one the
// repository lacks. The closure is found on the first read: a push from
// the agent brings everything but its parent and reads nothing.
type closureSource struct {
	src  objectSource
	tips []plumbing.Hash
	cl   *closure
}

var _ objectSource = (*closureSource)(nil)

// in reports whether h is in the closure.
func (c *closureSource) in(h plumbing.Hash) error {
	if c.cl == nil {
		cl, err := newClosure(c.src, c.tips)
		if err != nil {
			return err
		}
		c.cl = cl
	}
	_, ok, err := c.cl.has(h)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: %w", h, errNoObject)
	}
	return nil
}

func (c *closureSource) info(h plumbing.Hash) (plumbing.ObjectType, int64, error) {
	if err := c.in(h); err != nil {
		return plumbing.InvalidObject, 0, err
	}
	return c.src.info(h)
}

func (c *closureSource) read(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	if err := c.in(h); err != nil {
		return plumbing.InvalidObject, nil, err
	}
	return c.src.read(h, limit)
}
