package server

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// keyTable knows each install's agent key: agentKey in installs/<id>.yaml
// on main. It reads main's installs/ folder once per main commit and an
// install's file the first time that install is asked for, so the cost of a
// request does not grow with the fleet and an install added on main is
// known as soon as the server sees the new main.
//
// main's installs/ folder is kept as its tree object, indexed
// (installsTree): an install's blob is found in it by name, and the next
// main's tree is compared with it around the bytes the two share
// (gitobj.TreeIndex.Delta), so a one-install change on a main of a million
// installs reads one tree and walks a few entries, with no map of the
// fleet built. A main whose installs/ tree is the same (a channel pin, a
// release) keeps the table as it is.
type keyTable struct {
	dir string

	mu   sync.RWMutex
	main plumbing.Hash
	repo *gitrepo.Repo
	// inst is main's installs/ folder; nil until read.
	inst *installsTree
	keys map[string]ssh.PublicKey // parsed so far; nil value: no usable key

	// rot is each install's key hand-overs read from its status ref
	// (handover.go); it outlives main commits. statusTip and readObject
	// let the table read a status history the first time it is asked.
	rot        map[string]*rotation
	statusTip  func(install string) plumbing.Hash
	readObject func(plumbing.Hash, int64) (plumbing.ObjectType, []byte, error)
}

func newKeyTable(dir string) *keyTable { return &keyTable{dir: dir} }

// reset points the table at a main commit. When the table holds what it
// read of the previous main, it reads the new main's installs/ tree now,
// outside its lock (polls keep being answered from the old table
// meanwhile), compares it with the old one and then drops only the keys of
// the installs whose entry changed: a one-install change costs one tree
// read and the walk of the entries around it, and every other parsed key
// is kept. Otherwise it reads nothing until asked.
func (k *keyTable) reset(main plumbing.Hash) {
	k.mu.RLock()
	same := main == k.main && k.inst != nil
	prev := k.inst
	k.mu.RUnlock()
	if same {
		return
	}
	var repo *gitrepo.Repo
	var next *installsTree
	var changed []string
	var err error
	if prev != nil && !main.IsZero() {
		repo, next, changed, err = readInstallsFrom(k.dir, main, prev)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if main == k.main && k.inst != nil {
		return
	}
	if next == nil || err != nil {
		// Nothing read: read when asked.
		k.main, k.repo, k.inst, k.keys = main, nil, nil, nil
		return
	}
	k.patch(repo, next, prev, changed)
	k.main = main
}

// patch moves the table to next, read as changed from prev; k.mu is held.
// A hand-over's dropped key stays dropped (the keys map is patched in
// place); when the table moved from prev meanwhile, every key is parsed
// again.
func (k *keyTable) patch(repo *gitrepo.Repo, next, prev *installsTree, changed []string) {
	if k.inst != prev || changed == nil || k.keys == nil {
		k.keys = map[string]ssh.PublicKey{}
	} else {
		for _, id := range changed {
			delete(k.keys, id)
		}
	}
	k.repo, k.inst = repo, next
}

// lookup returns an install's key in force: main's agentKey, or the key
// it handed over to on its status ref (handover.go); false when main has
// no usable key for it.
func (k *keyTable) lookup(install string) (ssh.PublicKey, bool) {
	k.mu.RLock()
	key, ok := k.keys[install]
	k.mu.RUnlock()
	if ok {
		return key, key != nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.keys[install]; ok {
		return key, key != nil
	}
	if err := k.load(); err != nil {
		return nil, false
	}
	if _, ok := k.inst.blob(install); !ok {
		// Not cached: ids nobody has must not grow the table.
		return nil, false
	}
	r := k.rotationOf(install)
	if r == unreadRotation {
		return nil, false
	}
	key = r.inForce(k.read(install))
	k.keys[install] = key
	return key, key != nil
}

// rotationOf is install's hand-overs, read from its status history the
// first time (once per install and process). A history that cannot be
// read gives unreadRotation, not kept: the install has no key until it
// is read.
func (k *keyTable) rotationOf(install string) *rotation {
	if r, ok := k.rot[install]; ok {
		return r
	}
	if k.statusTip == nil || k.readObject == nil {
		return nil
	}
	tip := k.statusTip(install)
	if tip.IsZero() {
		return nil
	}
	r, err := scanRotation(k.readObject, tip)
	if err != nil {
		// Not known: no key at all rather than a key that may have
		// been retired.
		return unreadRotation
	}
	if k.rot == nil {
		k.rot = map[string]*rotation{}
	}
	k.rot[install] = r
	return r
}

// handedOver records a checked push's hand-over: install's key in force
// is r's from now on.
func (k *keyTable) handedOver(install string, r *rotation) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rot == nil {
		k.rot = map[string]*rotation{}
	}
	k.rot[install] = r
	delete(k.keys, install)
}

// rotationFor is rotationOf under the table's lock.
func (k *keyTable) rotationFor(install string) *rotation {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rotationOf(install)
}

// load reads main's installs/ folder.
func (k *keyTable) load() error {
	if k.inst != nil {
		return nil
	}
	if k.main.IsZero() {
		return fmt.Errorf("no main")
	}
	repo, inst, _, err := readInstallsFrom(k.dir, k.main, nil)
	if err != nil {
		return err
	}
	k.repo, k.inst, k.keys = repo, inst, map[string]ssh.PublicKey{}
	return nil
}

// entries yields the id of every install main names, in git's order of
// their files; k.mu is held and main read (load).
func (k *keyTable) entries(yield func(string) bool) {
	if k.inst == nil || k.inst.index == nil {
		return
	}
	x := k.inst.index
	for i := range x.Len() {
		e := x.Entry(i)
		if id, ok := bytes.CutSuffix(e.Name, []byte(".yaml")); ok && e.Mode.IsFile() && !yield(string(id)) {
			return
		}
	}
}

// installsTree is the installs/ folder of a main commit: its tree's id
// and content, indexed. Neither changes once read: tables share it.
type installsTree struct {
	hash  plumbing.Hash     // zero: main has no installs/ folder
	index *gitobj.TreeIndex // nil when hash is zero
}

// blob is the blob of install's file, installs/<id>.yaml.
func (t *installsTree) blob(install string) (plumbing.Hash, bool) {
	if t.index == nil {
		return plumbing.ZeroHash, false
	}
	e, ok := t.index.Find(install+".yaml", false)
	if !ok || !e.Mode.IsFile() {
		return plumbing.ZeroHash, false
	}
	return e.Hash(), true
}

// readInstallsFrom reads the installs/ folder of the main commit main.
// With prev (a previous main's), it returns as changed the install ids
// whose file differs (added, changed, removed; the kind of entry too):
// the tree is compared with prev's around the bytes they share, and when
// its id is prev's, prev itself is returned and nothing changed. changed
// is nil when the trees could not be compared (no prev): every id may
// have changed.
func readInstallsFrom(dir string, main plumbing.Hash, prev *installsTree) (*gitrepo.Repo, *installsTree, []string, error) {
	repo, err := gitrepo.Open(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	st := repo.Storer()
	h, err := installsTreeOf(st, main)
	if err != nil {
		return nil, nil, nil, err
	}
	if prev != nil && h == prev.hash {
		return repo, prev, []string{}, nil
	}
	if h.IsZero() {
		var changed []string
		if prev != nil && prev.index != nil {
			for k := range prev.index.Len() {
				changed = appendInstall(changed, prev.index.Entry(k))
			}
		}
		return repo, &installsTree{}, changed, nil
	}
	if prev != nil && prev.index != nil {
		raw, err := gitobj.ReadTreeShared(st, h, 0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("read main %s: %s: %w", main, schemas.InstallsDir, err)
		}
		changed := []string{}
		idx, _, _, err := prev.index.Delta(raw, func(w *gitobj.TreeWalk) error {
			changed = appendChange(changed, w)
			return nil
		})
		if err == nil {
			gitobj.KeepIndex(h, idx)
			return repo, &installsTree{hash: h, index: idx}, changed, nil
		}
	}
	// Indexed once in the process for its readers: the render keeps the
	// index of main's tree from its first render.
	idx, err := gitobj.ReadIndexShared(st, h, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read main %s: %s: %w", main, schemas.InstallsDir, err)
	}
	if prev != nil && prev.index == nil {
		// No folder before: every file is new.
		changed := []string{}
		for k := range idx.Len() {
			changed = appendInstall(changed, idx.Entry(k))
		}
		return repo, &installsTree{hash: h, index: idx}, changed, nil
	}
	return repo, &installsTree{hash: h, index: idx}, nil, nil
}

// appendInstall appends the install id of e, a tree entry of installs/,
// when it names one (<id>.yaml).
func appendInstall(ids []string, e gitobj.RawEntry) []string {
	if e.IsZero() {
		return ids
	}
	if id, ok := bytes.CutSuffix(e.Name, []byte(".yaml")); ok {
		ids = append(ids, string(id))
	}
	return ids
}

// installsTreeOf is the id of the installs/ tree of the commit main; zero
// when it has no such folder.
func installsTreeOf(st storer.EncodedObjectStorer, main plumbing.Hash) (plumbing.Hash, error) {
	c, err := gitobj.ReadCommit(st, main)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read main %s: %w", main, err)
	}
	root, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read main %s: %w", main, err)
	}
	for _, e := range root.Entries {
		if e.Name == schemas.InstallsDir && e.Mode == filemode.Dir {
			return e.Hash, nil
		}
	}
	return plumbing.ZeroHash, nil
}

// read parses one install's agentKey.
func (k *keyTable) read(install string) ssh.PublicKey {
	h, ok := k.inst.blob(install)
	if !ok {
		return nil
	}
	b, err := object.GetBlob(k.repo.Storer(), h)
	if err != nil {
		return nil
	}
	r, err := b.Reader()
	if err != nil {
		return nil
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil
	}
	var in struct {
		AgentKey string `yaml:"agentKey"`
	}
	if yaml.Unmarshal(data, &in) != nil || in.AgentKey == "" {
		return nil
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(in.AgentKey))
	if err != nil {
		return nil
	}
	return key
}

// known reports whether main names install (installs/<id>.yaml), whether
// or not with a usable key.
func (k *keyTable) known(install string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.load(); err != nil {
		return false, err
	}
	_, ok := k.inst.blob(install)
	return ok, nil
}

// take moves k to the main commit o read installs/ of, with what o read,
// rather than reading the folder again: a million entries at fleet size.
// The keys k parsed of installs whose file did not change are kept. It
// does nothing when o has read nothing.
func (k *keyTable) take(o *keyTable) {
	o.mu.RLock()
	main, repo, inst := o.main, o.repo, o.inst
	o.mu.RUnlock()
	if inst == nil {
		return
	}
	k.mu.RLock()
	prev := k.inst
	k.mu.RUnlock()
	changed := changedInstalls(prev, inst)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.patch(repo, inst, prev, changed)
	k.main = main
}

// changedInstalls is the install ids whose file differs between the
// installs/ trees prev and next; nil when they cannot be compared.
func changedInstalls(prev, next *installsTree) []string {
	switch {
	case prev == nil:
		return nil
	case prev == next || prev.hash == next.hash:
		return []string{}
	case prev.index == nil || next.index == nil:
		return nil
	}
	changed := []string{}
	if _, _, _, err := prev.index.Delta(next.index.Raw, func(w *gitobj.TreeWalk) error {
		changed = appendChange(changed, w)
		return nil
	}); err != nil {
		return nil
	}
	return changed
}

// appendChange appends the install id of a step of a walk of installs/
// when its entry changed.
func appendChange(ids []string, w *gitobj.TreeWalk) []string {
	if w.Same() {
		return ids
	}
	if !w.Old.IsZero() {
		return appendInstall(ids, w.Old)
	}
	return appendInstall(ids, w.Cur)
}

// mainCommit is the main commit the table reads keys from.
func (k *keyTable) mainCommit() plumbing.Hash {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.main
}

// authorizedKey is k in authorized_keys form, without a comment.
func authorizedKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}
