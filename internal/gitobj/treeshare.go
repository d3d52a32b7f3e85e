package gitobj

import (
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// shareAbove is the size from which ReadTreeShared shares a tree: main's
// installs/ tree is 48 MB at a million installs, 4.8 MB at 100,000; the
// trees below are read again, which costs little.
const shareAbove = 1 << 20

// shared are the large trees read last, and those being read.
var shared struct {
	mu    sync.Mutex
	calls map[plumbing.Hash]*treeCall
	// order is the ids of calls, oldest first; at most keepShared done.
	order []plumbing.Hash
}

// keepShared is how many large trees are kept: the one main had and the
// one it has.
const keepShared = 2

type treeCall struct {
	done chan struct{}
	raw  []byte
	err  error
}

// ReadTreeShared returns the content of the tree object h as ReadObject
// does (checked against h; a positive limit bounds its size), sharing one
// read among the readers of the same large tree in the process: when main
// moves, the render, the server's key table and its rollout controller
// each compare main's new installs/ tree with the one before, and it is
// read, inflated and hashed once. A tree is found by its id, so what is
// kept is never stale; a reader asking while another reads it waits for
// that read. The content is shared: not to be changed.
func ReadTreeShared(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) ([]byte, error) {
	shared.mu.Lock()
	if c, ok := shared.calls[h]; ok {
		shared.mu.Unlock()
		<-c.done
		if c.err == nil && (limit <= 0 || int64(len(c.raw)) <= limit) {
			return c.raw, nil
		}
		// Failed for that reader, or over this one's limit: read as
		// this reader asks.
		_, raw, err := ReadObject(st, plumbing.TreeObject, h, limit)
		return raw, err
	}
	c := &treeCall{done: make(chan struct{})}
	if shared.calls == nil {
		shared.calls = map[plumbing.Hash]*treeCall{}
	}
	shared.calls[h] = c
	shared.mu.Unlock()

	_, c.raw, c.err = ReadObject(st, plumbing.TreeObject, h, limit)
	close(c.done)

	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c.err != nil || len(c.raw) < shareAbove {
		delete(shared.calls, h)
		return c.raw, c.err
	}
	shared.order = append(shared.order, h)
	for len(shared.order) > keepShared {
		delete(shared.calls, shared.order[0])
		shared.order = shared.order[1:]
	}
	return c.raw, nil
}
