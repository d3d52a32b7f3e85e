package renderer

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// shardedDir is a folder of the previous rendered tree, installs/ or
// issued/, read only as far as a render asks: a render that changes one
// install of 100,000 reads the top folder and one shard
// (schemas.Shard), some 400 entries, not 100,000. A rendered commit of an
// older format holds the folder flat (schemas.FlatLayout); it is read
// whole.
type shardedDir struct {
	st   storer.EncodedObjectStorer
	name string
	// top are the shards' trees, by shard name; nil when flat.
	top map[string]plumbing.Hash

	mu sync.Mutex
	// shards are the entries read so far, by shard, then by id; a flat
	// folder's are all under "".
	shards map[string]map[string]plumbing.Hash
}

// emptyDir is a folder that holds nothing.
func emptyDir(name string) *shardedDir {
	return &shardedDir{name: name, top: map[string]plumbing.Hash{}, shards: map[string]map[string]plumbing.Hash{}}
}

// openDir opens the folder name of the rendered tree root, flat or
// sharded as the commit's format says. An absent folder is empty.
func openDir(st storer.EncodedObjectStorer, root *object.Tree, name string, flat bool) (*shardedDir, error) {
	d := emptyDir(name)
	d.st = st
	if flat {
		entries, err := subtreeList(st, root, name)
		if err != nil {
			return nil, fmt.Errorf("read rendered %s: %w", name, err)
		}
		m := make(map[string]plumbing.Hash, len(entries))
		for _, e := range entries {
			m[e.name] = e.hash
		}
		d.top, d.shards[""] = nil, m
		return d, nil
	}
	entries, err := subtreeList(st, root, name)
	if err != nil {
		return nil, fmt.Errorf("read rendered %s: %w", name, err)
	}
	for _, e := range entries {
		if e.mode != filemode.Dir || len(e.name) != 2 {
			return nil, fmt.Errorf("read rendered %s: %q is not a shard", name, e.name)
		}
		d.top[e.name] = e.hash
	}
	return d, nil
}

// flat reports whether the folder is of the older, flat layout.
func (d *shardedDir) flat() bool { return d.top == nil }

// shard returns the entries of shard s, reading them once.
func (d *shardedDir) shard(s string) (map[string]plumbing.Hash, error) {
	if d.flat() {
		s = ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.shards[s]; ok {
		return m, nil
	}
	h, ok := d.top[s]
	if !ok {
		m := map[string]plumbing.Hash{}
		d.shards[s] = m
		return m, nil
	}
	entries, err := parseTree(d.st, h, 0)
	if err != nil {
		return nil, fmt.Errorf("read rendered %s/%s: %w", d.name, s, err)
	}
	m := make(map[string]plumbing.Hash, len(entries))
	for _, e := range entries {
		if schemas.Shard(e.name) != s {
			return nil, fmt.Errorf("read rendered %s/%s: %q belongs in shard %s", d.name, s, e.name, schemas.Shard(e.name))
		}
		m[e.name] = e.hash
	}
	d.shards[s] = m
	return m, nil
}

// get returns the entry of install id.
func (d *shardedDir) get(id string) (plumbing.Hash, bool, error) {
	m, err := d.shard(schemas.Shard(id))
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	h, ok := m[id]
	return h, ok, nil
}

// all returns every entry, reading every shard.
func (d *shardedDir) all() (map[string]plumbing.Hash, error) {
	if d.flat() {
		return d.shard("")
	}
	out := map[string]plumbing.Hash{}
	for _, s := range slices.Sorted(maps.Keys(d.top)) {
		m, err := d.shard(s)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, m)
	}
	return out, nil
}

// writeDir adds the sharded folder of entries (id to object, each of
// mode) to b and returns its tree, zero when there are none. ids are the
// entries' ids, sorted, or nil: then writeDir sorts them. In order, each
// shard's entries come to gitobj.EncodeTree nearly sorted as git sorts
// them, which it then sorts in one pass: in a 100,000-install render,
// sorting tree entries took 0.10 s of CPU from the map's order, 0.03 s
// so.
func writeDir(b *gitobj.Batch, entries map[string]plumbing.Hash, ids []string, mode filemode.FileMode) plumbing.Hash {
	if len(entries) == 0 {
		return plumbing.ZeroHash
	}
	if ids == nil {
		ids = slices.Sorted(maps.Keys(entries))
	}
	dir := newShardedEntries(len(entries))
	for _, id := range ids {
		if h, ok := entries[id]; ok {
			dir.add(id, mode, h)
		}
	}
	return dir.write(func() *gitobj.Batch { return b })
}

// shardedEntries are the entries of a sharded folder, by shard, added in
// the order of their ids (see writeDir).
type shardedEntries struct {
	shards map[string][]gitobj.Entry
	// per is the room each shard is made with: a shard grown by
	// doubling may hold twice its entries' room.
	per int
}

// newShardedEntries returns a folder for about n entries.
func newShardedEntries(n int) *shardedEntries {
	// Shards hold n/256 entries each give or take a few standard
	// deviations (the square root of that): a quarter more is room for
	// all but the rarest.
	per := n/256 + n/1024 + 16
	return &shardedEntries{shards: make(map[string][]gitobj.Entry, 256), per: per}
}

func (d *shardedEntries) add(id string, mode filemode.FileMode, h plumbing.Hash) {
	s := schemas.Shard(id)
	es, ok := d.shards[s]
	if !ok {
		es = make([]gitobj.Entry, 0, d.per)
	}
	d.shards[s] = append(es, gitobj.Entry{Name: id, Mode: mode, Hash: h})
}

// write adds each shard's tree, then the folder's, to the batch next
// returns for each, and returns the folder's tree, zero when it holds
// nothing. A shard's entries are let go once its tree is made.
func (d *shardedEntries) write(next func() *gitobj.Batch) plumbing.Hash {
	if len(d.shards) == 0 {
		return plumbing.ZeroHash
	}
	top := make([]gitobj.Entry, 0, len(d.shards))
	for _, s := range slices.Sorted(maps.Keys(d.shards)) {
		top = append(top, gitobj.Entry{Name: s, Mode: filemode.Dir, Hash: next().Tree(d.shards[s])})
		delete(d.shards, s)
	}
	return next().Tree(top)
}

// patchDir adds to b the folder d with the entries of changes set (a zero
// hash removes the entry) and returns its tree, zero when it holds
// nothing. Only the shards changes touch are read and written again.
func patchDir(b *gitobj.Batch, d *shardedDir, changes map[string]plumbing.Hash, mode filemode.FileMode) (plumbing.Hash, error) {
	if d.flat() {
		all, err := d.all()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		m := maps.Clone(all)
		for id, h := range changes {
			if h.IsZero() {
				delete(m, id)
			} else {
				m[id] = h
			}
		}
		return writeDir(b, m, nil, mode), nil
	}
	touched := map[string]map[string]plumbing.Hash{}
	for id, h := range changes {
		s := schemas.Shard(id)
		if touched[s] == nil {
			touched[s] = map[string]plumbing.Hash{}
		}
		touched[s][id] = h
	}
	top := maps.Clone(d.top)
	for s, ch := range touched {
		prev, err := d.shard(s)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		es := make([]gitobj.Entry, 0, len(prev)+len(ch))
		for id, h := range prev {
			if _, ok := ch[id]; !ok {
				es = append(es, gitobj.Entry{Name: id, Mode: mode, Hash: h})
			}
		}
		for id, h := range ch {
			if !h.IsZero() {
				es = append(es, gitobj.Entry{Name: id, Mode: mode, Hash: h})
			}
		}
		if len(es) == 0 {
			delete(top, s)
			continue
		}
		top[s] = b.Tree(es)
	}
	if len(top) == 0 {
		return plumbing.ZeroHash, nil
	}
	es := make([]gitobj.Entry, 0, len(top))
	for s, h := range top {
		es = append(es, gitobj.Entry{Name: s, Mode: filemode.Dir, Hash: h})
	}
	return b.Tree(es), nil
}
