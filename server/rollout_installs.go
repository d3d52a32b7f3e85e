package server

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// rolloutInstalls is what the rollout controller took of main's install
// files to assign waves: each file's blob and the install's channel and
// labels. When main moves, only the files whose entry changed are read
// again, and found by comparing main's installs/ tree with the one read
// last around the bytes the two share (gitobj.TreeIndex.Delta): a pin
// change on a channel of a million installs reads no install file and no
// installs/ tree, a one-install change one tree and one file; the
// assignment itself (rollout.Fleet) is then redone from memory.
//
// What a file gives depends only on its blob (and, for a file that sets
// its id, its name): the first read after a start takes what the server
// accepted before from the store kept beside the repository
// (install_facts.go), and at a million installs parses none of them.
//
// An install file is checked here as the render checks it (schema and
// the rest of main); a file that fails refuses the main, as before.
// What only the rest of main decides, a channel that no longer exists,
// Fleet reports for every install on it, read again or not.
type rolloutInstalls struct {
	files map[string]installSeen // by entry name of installs/
	// tree is the installs/ folder files were read from; nil before the
	// first read.
	tree *installsTree
	// list is fleet's answer, kept for the next main: patched where a
	// few installs changed, built again from files otherwise.
	list []rollout.FleetInstall

	// store is the path of the facts kept by blob across restarts
	// (install_facts.go); empty: none. The first read takes the blobs it
	// has from it and parses only the others; a read that parsed many
	// files writes it again.
	store string
	// unsaved counts the files parsed since the store was last written.
	unsaved int
	// saveErr is the last failure to write the store, for the caller to
	// report; the read itself does not fail for it.
	saveErr error
	// parsed counts the files parsed through the schemas, for tests and
	// benchmarks.
	parsed int
}

// patchAbove is the number of changed entries above which fleet's list
// is built again rather than patched: each patch moves the list's tail.
const patchAbove = 64

// installSeen is one install file as the controller read it.
type installSeen struct {
	blob    plumbing.Hash
	install rollout.FleetInstall
	// deleted installs are in no wave.
	deleted bool
	// named: the file sets its id (accepted only under that name).
	named bool
}

// installFleet is the install id on channel with labels, as the
// controller lists it.
func installFleet(id, channel string, labels map[string]string) rollout.FleetInstall {
	return rollout.FleetInstall{Install: rollout.Install{ID: id, Labels: labels}, Channel: channel}
}

// read returns main's installs with their channels and labels, and the
// number of files it parsed. The first read after a start parses only
// the files whose blob is not in the store (fromStore). A main refused (a changed file that fails)
// leaves ri as it was. A main read is taken in: files is ri.files,
// patched in place where main's entries changed (each entry is what its
// name and blob give, whatever else main holds, so a main refused later
// by the rest of the controller leaves nothing wrong in it). fsys is
// main's source (renderer.SourceFS); its installs/ folder is not listed.
func (ri *rolloutInstalls) read(ctx context.Context, st storer.EncodedObjectStorer, main plumbing.Hash, fsys fs.FS) (
	src *schemas.Source, files map[string]installSeen, read int, err error) {
	prev := ri.tree
	if ri.files == nil {
		prev = nil
	}
	next, changed, gone, err := installChanges(st, main, prev)
	if err != nil {
		return nil, nil, 0, err
	}
	fresh := make(map[string]installSeen, len(changed))
	// On the first read, the blobs the store has are taken from it: a
	// blob the server accepted before gives what it gave then.
	parse := changed
	if prev == nil && ri.store != "" && len(changed) > 0 {
		parse = fromStore(loadInstallFacts(ri.store), changed, fresh)
	}
	fsys, err = renderer.SourceFSOnly(st, main, parse)
	if err != nil {
		return nil, nil, 0, err
	}
	src, err = schemas.Open(fsys)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rollouts of main %s: %w", main, err)
	}
	blobs := make(map[string]plumbing.Hash, len(parse))
	for _, e := range parse {
		blobs[e.Name] = e.Hash
	}
	// Equal channels and label sets are kept once however many installs
	// have them.
	channels := map[string]string{}
	shared := map[string]map[string]string{}
	var mu sync.Mutex
	err = src.EachInstall(ctx, func(id string, in schemas.Install) {
		name := id + ".yaml"
		mu.Lock()
		defer mu.Unlock()
		channel, ok := channels[in.Channel]
		if !ok {
			channel = in.Channel
			channels[channel] = channel
		}
		fresh[name] = installSeen{blob: blobs[name], deleted: in.Deleted, named: in.ID != "",
			install: installFleet(name[:len(id)], channel, internLabels(shared, in.Labels))}
	})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rollouts of main %s: %w", main, err)
	}
	if prev == nil {
		ri.files, ri.list = fresh, nil
	} else {
		patch := ri.list != nil && len(gone)+len(changed) <= patchAbove
		if !patch {
			ri.list = nil
		}
		drop := func(name string) {
			delete(ri.files, name)
			if i, found := slices.BinarySearchFunc(ri.list, name, byName); found && patch {
				ri.list = slices.Delete(ri.list, i, i+1)
			}
		}
		for _, name := range gone {
			drop(name)
		}
		for _, e := range changed {
			drop(e.Name)
		}
		maps.Copy(ri.files, fresh)
		if patch {
			for _, seen := range fresh {
				if seen.deleted {
					continue
				}
				i, _ := slices.BinarySearchFunc(ri.list, seen.install.ID+".yaml", byName)
				ri.list = slices.Insert(ri.list, i, seen.install)
			}
		}
	}
	ri.tree = next
	ri.parsed += len(parse)
	ri.unsaved += len(parse)
	if ri.store != "" && ri.unsaved > 0 && (prev == nil || ri.unsaved >= max(saveAbove, len(ri.files)/16)) {
		ri.saveErr = saveInstallFacts(ri.store, ri.files)
		if ri.saveErr == nil {
			ri.unsaved = 0
		}
	}
	return src, ri.files, len(parse), nil
}

// saveAbove is the number of files parsed since the store was written
// above which a read writes it again (after the first read, which writes
// it whenever it parsed any): writing it costs a pass over every install.
const saveAbove = 1024

// fromStore puts in fresh the entries of changed that facts gives and
// returns the others, to be parsed. An entry is taken only when the
// schemas would read it as an install file: a regular file whose name
// is an install's, once in its folder, and (a file that sets its id)
// under that id.
func fromStore(facts *installFacts, changed []gitobj.Entry, fresh map[string]installSeen) []gitobj.Entry {
	if facts == nil {
		return changed
	}
	count := make(map[string]int, len(changed))
	for _, e := range changed {
		count[e.Name]++
	}
	var parse []gitobj.Entry
	for _, e := range changed {
		if e.Mode == filemode.Regular && count[e.Name] == 1 {
			if kind, _ := schemas.Classify(schemas.InstallsDir, e.Name, 0); kind == schemas.SourceFile {
				if fact, ok := facts.lookup(e.Hash); ok {
					if seen, ok := facts.seen(e.Name, fact); ok {
						fresh[e.Name] = seen
						continue
					}
				}
			}
		}
		parse = append(parse, e)
	}
	return parse
}

// fleet is the installs of the files read last that take changes,
// sorted by file name: in the order of the installs/ tree they were read from
// (git's order, which for the files <id>.yaml is their names' order),
// where sorting the names of a million files cost a second of CPU on
// every move of main.
//
// The list is kept and patched by read where a few installs changed; the
// caller does not change it.
func (ri *rolloutInstalls) fleet() []rollout.FleetInstall {
	if ri.list != nil {
		return ri.list
	}
	out := make([]rollout.FleetInstall, 0, len(ri.files))
	if ri.tree == nil || ri.tree.index == nil {
		return out
	}
	x := ri.tree.index
	for k := range x.Len() {
		e := x.Entry(k)
		if seen, ok := ri.files[string(e.Name)]; ok && !seen.deleted {
			out = append(out, seen.install)
		}
	}
	ri.list = out
	return out
}

// byName orders a listed install against a file name of installs/: the
// list is in the order of the files' names.
func byName(in rollout.FleetInstall, name string) int { return strings.Compare(in.ID+".yaml", name) }

// installChanges reads the installs/ folder of main and returns it with
// its entries that are new or changed since prev's (every entry when prev
// is nil or cannot be compared, prev then taken as nil) and the names of
// prev's entries gone. An entry whose kind changed (a file now a folder)
// is both. When main's installs/ tree is prev's, nothing is read.
func installChanges(st storer.EncodedObjectStorer, main plumbing.Hash, prev *installsTree) (
	next *installsTree, changed []gitobj.Entry, gone []string, err error) {
	h, err := installsTreeOf(st, main)
	if err != nil {
		return nil, nil, nil, err
	}
	if prev != nil && h == prev.hash {
		return prev, nil, nil, nil
	}
	if h.IsZero() {
		if prev != nil && prev.index != nil {
			for k := range prev.index.Len() {
				gone = append(gone, string(prev.index.Entry(k).Name))
			}
		}
		return &installsTree{}, nil, gone, nil
	}
	entry := func(e gitobj.RawEntry) gitobj.Entry {
		return gitobj.Entry{Name: string(e.Name), Mode: e.Mode, Hash: e.Hash()}
	}
	if prev != nil {
		raw, err := gitobj.ReadTreeShared(st, h, 0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("read main %s: %s: %w", main, schemas.InstallsDir, err)
		}
		x := prev.index
		if x == nil {
			x = &gitobj.TreeIndex{}
		}
		idx, _, _, err := x.Delta(raw, func(w *gitobj.TreeWalk) error {
			switch {
			case w.Same():
			case w.Cur.IsZero():
				gone = append(gone, string(w.Old.Name))
			default:
				changed = append(changed, entry(w.Cur))
			}
			return nil
		})
		if err == nil {
			gitobj.KeepIndex(h, idx)
			return &installsTree{hash: h, index: idx}, changed, gone, nil
		}
		changed, gone = nil, nil
	}
	idx, err := gitobj.ReadIndexShared(st, h, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read main %s: %s: %w", main, schemas.InstallsDir, err)
	}
	changed = make([]gitobj.Entry, 0, idx.Len())
	for k := range idx.Len() {
		changed = append(changed, entry(idx.Entry(k)))
	}
	if prev != nil && prev.index != nil {
		for k := range prev.index.Len() {
			gone = append(gone, string(prev.index.Entry(k).Name))
		}
	}
	return &installsTree{hash: h, index: idx}, changed, gone, nil
}
