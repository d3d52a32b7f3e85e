package server

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// rolloutInstalls is what the rollout controller took of main's install
// files to assign waves: each file's blob and the install's channel and
// labels. When main moves, only the files whose blob changed are read
// again, so a pin change on a channel of 100,000 installs reads none of
// them; the assignment itself (rollout.Fleet) is then redone from memory.
//
// An install file is checked here as the render checks it (schema and
// the rest of main); a file that fails refuses the main, as before.
// What only the rest of main decides, a channel that no longer exists,
// Fleet reports for every install on it, read again or not.
type rolloutInstalls struct {
	files map[string]installSeen // by entry name of installs/
}

// installSeen is one install file as the controller read it.
type installSeen struct {
	blob    plumbing.Hash
	install rollout.FleetInstall
	// deleted installs are in no wave.
	deleted bool
}

// read returns main's installs with their channels and labels, and the
// files it read; it changes nothing of ri until commit is called, so a
// main refused leaves it as it was.
func (ri *rolloutInstalls) read(ctx context.Context, st storer.EncodedObjectStorer, main plumbing.Hash, fsys fs.FS) (
	src *schemas.Source, next map[string]installSeen, read int, err error) {
	entries, err := installEntries(st, main)
	if err != nil {
		return nil, nil, 0, err
	}
	changed := map[string]bool{}
	for name, h := range entries {
		if seen, ok := ri.files[name]; !ok || seen.blob != h {
			changed[name] = true
		}
	}
	src, err = schemas.Open(onlyInstalls{fsys: fsys, names: changed})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rollouts of main %s: %w", main, err)
	}
	next = make(map[string]installSeen, len(entries))
	for name := range entries {
		if !changed[name] {
			next[name] = ri.files[name]
		}
	}
	var mu sync.Mutex
	err = src.EachInstall(ctx, func(id string, in schemas.Install) {
		name := id + ".yaml"
		seen := installSeen{blob: entries[name], deleted: in.Deleted,
			install: rollout.FleetInstall{Install: rollout.Install{ID: id, Labels: in.Labels}, Channel: in.Channel}}
		mu.Lock()
		next[name] = seen
		mu.Unlock()
	})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rollouts of main %s: %w", main, err)
	}
	return src, next, len(changed), nil
}

// fleetInstalls are the installs of files that take changes, sorted by id.
func fleetInstalls(files map[string]installSeen) []rollout.FleetInstall {
	out := make([]rollout.FleetInstall, 0, len(files))
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if seen := files[name]; !seen.deleted {
			out = append(out, seen.install)
		}
	}
	return out
}

// installEntries reads the blob of each file of main's installs/ folder,
// by entry name; none when main has no such folder.
func installEntries(st storer.EncodedObjectStorer, main plumbing.Hash) (map[string]plumbing.Hash, error) {
	c, err := gitobj.ReadCommit(st, main)
	if err != nil {
		return nil, fmt.Errorf("read main %s: %w", main, err)
	}
	root, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("read main %s: %w", main, err)
	}
	out := map[string]plumbing.Hash{}
	var dir plumbing.Hash
	for _, e := range root.Entries {
		if e.Name == schemas.InstallsDir && e.Mode == filemode.Dir {
			dir = e.Hash
		}
	}
	if dir.IsZero() {
		return out, nil
	}
	t, err := gitobj.ReadTree(st, dir)
	if err != nil {
		return nil, fmt.Errorf("read main %s: %s: %w", main, schemas.InstallsDir, err)
	}
	for _, e := range t.Entries {
		out[e.Name] = e.Hash
	}
	return out, nil
}

// onlyInstalls is a source tree whose installs/ folder lists only the
// entries names: schemas.Open then lists, and EachInstall reads, only
// those.
type onlyInstalls struct {
	fsys  fs.FS
	names map[string]bool
}

func (o onlyInstalls) Open(name string) (fs.File, error)     { return o.fsys.Open(name) }
func (o onlyInstalls) Stat(name string) (fs.FileInfo, error) { return fs.Stat(o.fsys, name) }

func (o onlyInstalls) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(o.fsys, name)
	if err != nil || name != schemas.InstallsDir {
		return es, err
	}
	out := es[:0]
	for _, e := range es {
		if o.names[e.Name()] {
			out = append(out, e)
		}
	}
	return out, nil
}
