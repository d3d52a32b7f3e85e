package server

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// keyTable knows each install's agent key: agentKey in installs/<id>.yaml
// on main. It reads main's installs/ folder once per main commit and an
// install's file the first time that install is asked for, so the cost of a
// request does not grow with the fleet and an install added on main is
// known as soon as the server sees the new main.
type keyTable struct {
	dir string

	mu      sync.RWMutex
	main    plumbing.Hash
	repo    *gitrepo.Repo
	entries map[string]plumbing.Hash // install id → blob of its yaml
	keys    map[string]ssh.PublicKey // parsed so far; nil value: no usable key

	// rot is each install's key hand-overs read from its status ref
	// (handover.go); it outlives main commits. statusTip and readObject
	// let the table read a status history the first time it is asked.
	rot        map[string]*rotation
	statusTip  func(install string) plumbing.Hash
	readObject func(plumbing.Hash, int64) (plumbing.ObjectType, []byte, error)

	// gen counts the moves of main and the hand-overs: reset keeps what
	// it read outside the lock only if nothing moved meanwhile.
	gen uint64
}

func newKeyTable(dir string) *keyTable { return &keyTable{dir: dir} }

// reset points the table at a main commit. When the table holds what it
// read of the previous main, it reads the new main's installs/ folder now,
// outside its lock (polls keep being answered from the old table
// meanwhile), and keeps every parsed key whose install file is the same
// blob: a one-install change costs one folder read, not a parse of every
// install's file again as each polls. Otherwise it reads nothing until
// asked.
func (k *keyTable) reset(main plumbing.Hash) {
	k.mu.RLock()
	same := main == k.main && k.repo != nil
	had, gen := k.entries != nil, k.gen
	k.mu.RUnlock()
	if same {
		return
	}
	var repo *gitrepo.Repo
	var entries map[string]plumbing.Hash
	var keys map[string]ssh.PublicKey
	if had && !main.IsZero() {
		var err error
		if repo, entries, err = readInstalls(k.dir, main); err == nil {
			// The keys parsed so far, copied under the read lock:
			// lookups go on, and one that adds a key meanwhile only
			// costs that install a parse again.
			k.mu.RLock()
			keys = make(map[string]ssh.PublicKey, len(k.keys))
			for id, key := range k.keys {
				if h, ok := entries[id]; ok && h == k.entries[id] {
					keys[id] = key
				}
			}
			k.mu.RUnlock()
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if main == k.main && k.repo != nil {
		return
	}
	if entries == nil || k.gen != gen {
		// Nothing read, or the table moved meanwhile (a hand-over
		// dropped a key, another reset): read again when asked.
		k.main, k.repo, k.entries, k.keys = main, nil, nil, nil
		k.gen++
		return
	}
	k.main, k.repo, k.entries, k.keys = main, repo, entries, keys
	k.gen++
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
	if _, ok := k.entries[install]; !ok {
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
	k.gen++
}

// rotationFor is rotationOf under the table's lock.
func (k *keyTable) rotationFor(install string) *rotation {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rotationOf(install)
}

// load reads main's installs/ folder.
func (k *keyTable) load() error {
	if k.entries != nil {
		return nil
	}
	if k.main.IsZero() {
		return fmt.Errorf("no main")
	}
	repo, entries, err := readInstalls(k.dir, k.main)
	if err != nil {
		return err
	}
	k.repo, k.entries, k.keys = repo, entries, map[string]ssh.PublicKey{}
	return nil
}

// readInstalls reads the installs/ folder of the main commit main: each
// install's id and the blob of its file.
func readInstalls(dir string, main plumbing.Hash) (*gitrepo.Repo, map[string]plumbing.Hash, error) {
	repo, err := gitrepo.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	c, err := object.GetCommit(repo.Storer(), main)
	if err != nil {
		return nil, nil, fmt.Errorf("read main %s: %w", main, err)
	}
	root, err := object.GetTree(repo.Storer(), c.TreeHash)
	if err != nil {
		return nil, nil, err
	}
	entries := map[string]plumbing.Hash{}
	if e, err := root.FindEntry(strings.TrimSuffix(schemas.InstallsDir, "/")); err == nil && e.Mode == filemode.Dir {
		t, err := object.GetTree(repo.Storer(), e.Hash)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range t.Entries {
			if id, ok := strings.CutSuffix(e.Name, ".yaml"); ok && e.Mode.IsFile() {
				entries[id] = e.Hash
			}
		}
	}
	return repo, entries, nil
}

// read parses one install's agentKey.
func (k *keyTable) read(install string) ssh.PublicKey {
	h, ok := k.entries[install]
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
	_, ok := k.entries[install]
	return ok, nil
}

// take moves k to the main commit o read installs/ of, with what o read,
// rather than reading the folder again: 100,000 entries at fleet size.
// It does nothing when o has read nothing.
func (k *keyTable) take(o *keyTable) {
	o.mu.RLock()
	main, repo, entries := o.main, o.repo, o.entries
	o.mu.RUnlock()
	if entries == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.main, k.repo, k.entries, k.keys = main, repo, entries, map[string]ssh.PublicKey{}
	k.gen++
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
