package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// The index reads of each install only what it keeps (viewWords.slim),
// where fleet.ReadDesired and fleet.ReadInstall, which an install's page
// still uses, read every file of both commits: a rendered desired state
// is a commit, three trees and eight files (its policies among them), a
// status carries the applied state, jobs and answers beside status.json,
// and fleet.ReadInstall walks the whole status history for key
// hand-overs. For the index:
//
//   - of the desired state, the commit, its tree and install.json,
//     decoded for the fields the index keeps; each component's desired
//     version is read only for the rows a page shows (view.versionsOf),
//     where it was five more files of every install;
//   - of the status, the commit, its tree and status.json; the key it is
//     checked against is the key in force (keyTable.lookup), which is
//     what fleet's walk gives for a tip that is not itself a hand-over
//     (see readIndexStatus), so the history is walked only for those.
//
// TestIndexReadSameAsFleet holds both to what fleet reads.

// readIndexDesired reads the desired state at h as fleet.ReadDesired does,
// keeping what the index keeps: its generation, time, channel and
// deletion (Commit is left out), and with versions each component's
// version (nil without).
func readIndexDesired(st storer.EncodedObjectStorer, h plumbing.Hash, versions bool) (fleet.Desired, error) {
	var d fleet.Desired
	if versions {
		d.Versions = map[string]string{}
	}
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return d, fmt.Errorf("desired state %s: %w", h, err)
	}
	d.Time = c.Committer.When
	if g, ok := schemas.Trailer(c.Message, schemas.TrailerGeneration); ok {
		d.Generation, _ = strconv.ParseInt(g, 10, 64)
	}
	root, err := readIndexTree(st, c.TreeHash)
	if err != nil {
		return d, fmt.Errorf("desired state %s: %w", h, err)
	}
	data, err := root.file(st, schemas.InstallStateFile)
	if err != nil {
		return d, fmt.Errorf("desired state %s: %w", h, err)
	}
	var in struct {
		Channel    string   `json:"channel"`
		Components []string `json:"components"`
		Deleted    bool     `json:"deleted"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return d, fmt.Errorf("desired state %s: %s: %w", h, schemas.InstallStateFile, err)
	}
	d.Channel, d.Deleted = in.Channel, in.Deleted
	if !versions {
		return d, nil
	}
	var comps *indexTree
	for _, name := range in.Components {
		if comps == nil {
			if comps, err = root.dir(st, schemas.ComponentsDir); err != nil {
				break
			}
		}
		data, err := comps.file(st, name+".json")
		if err != nil {
			continue
		}
		var cs struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(data, &cs) == nil {
			d.Versions[name] = cs.Version
		}
	}
	return d, nil
}

// readIndexStatus reads install id's status at h as fleet.ReadInstall
// does, checked against key, the install's key in force, and judged at
// the zero time (the index judges it at its own: newEntry). desired is
// the install's desired tip now (InSync). Only status.json is read of
// the tree.
//
// fleet.ReadInstall checks a tip against the key its walk of the history
// finds in force there. Given the key in force now, that walk finds it
// again for any tip that is not itself a hand-over: a key outside the
// history's chain is taken as it is, and the chain's newest key is the
// key after its last hand-over, which is before the tip. A tip that
// carries a hand-over trailer is read by fleet.ReadInstall, walk and all.
func readIndexStatus(st storer.Storer, id string, h, desired plumbing.Hash, key string) (fleet.Install, error) {
	row := fleet.Install{Install: id, Components: []fleet.Component{}}
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return row, fmt.Errorf("status of %s: %w", id, err)
	}
	if handsOver(c.Message) {
		repo := tableRepo{st: st, refs: map[string]installTips{id: {desired: desired, status: h}}}
		return fleet.ReadInstall(repo, id, h, key, time.Time{})
	}
	root, err := readIndexTree(st, c.TreeHash)
	if err != nil {
		return row, fmt.Errorf("status of %s: %w", id, err)
	}
	data, err := root.file(st, schemas.StatusFile)
	if err != nil {
		return row, fmt.Errorf("status of %s: %w", id, err)
	}
	var s schemas.Status
	if err := json.Unmarshal(data, &s); err != nil {
		return row, fmt.Errorf("status of %s: %s:%s: %w", id, schemas.StatusRef(id), schemas.StatusFile, err)
	}
	row.Time = c.Committer.When.UTC()
	row.Desired, row.Applied, row.Generation, row.Phase, row.Refusal, row.Artifacts = s.Desired, s.Applied, s.Generation, s.Phase, s.Refusal, s.Artifacts
	row.Stale, row.Expires, row.Forged, row.Deferred = s.Stale, s.Expires, s.Forged, s.Deferred
	for _, name := range slices.Sorted(maps.Keys(s.Components)) {
		cs := s.Components[name]
		row.Components = append(row.Components, fleet.Component{Name: name, ComponentStatus: cs})
		if len(cs.Drift) > 0 {
			row.Drifted++
		}
	}
	row.Vetoed, row.HeartbeatEvery = s.Vetoed, s.HeartbeatEvery
	row.Verified, row.VerifyError = fleet.Verify(c, id, key)
	if !desired.IsZero() {
		row.Rendered = desired.String()
		row.InSync = row.Rendered == s.Desired || (s.Refusal != nil && s.Refusal.Commit == row.Rendered)
	}
	return row.At(time.Time{}), nil
}

// handsOver says whether a status commit's message carries a key
// hand-over trailer, parsed or not.
func handsOver(msg string) bool {
	_, a := schemas.Trailer(msg, TrailerKeyHandover)
	_, b := schemas.Trailer(msg, TrailerKeyRetired)
	return a || b
}

// indexTree is one tree object's content, read for a few names.
type indexTree struct {
	h   plumbing.Hash
	raw []byte
}

func readIndexTree(st storer.EncodedObjectStorer, h plumbing.Hash) (*indexTree, error) {
	_, raw, err := gitobj.ReadObject(st, plumbing.TreeObject, h, 0)
	if err != nil {
		return nil, err
	}
	return &indexTree{h: h, raw: raw}, nil
}

// entry finds name in the tree; a tree is small (a desired state's root
// has four entries), so it is scanned.
func (t *indexTree) entry(name string) (gitobj.RawEntry, error) {
	data := t.raw
	for len(data) > 0 {
		e, rest, ok := gitobj.NextRawEntry(data)
		if !ok {
			return gitobj.RawEntry{}, fmt.Errorf("tree %s is malformed", t.h)
		}
		if bytes.Equal(e.Name, []byte(name)) {
			return e, nil
		}
		data = rest
	}
	return gitobj.RawEntry{}, fmt.Errorf("%s: %w", name, errIndexMissing)
}

var errIndexMissing = fmt.Errorf("not in the tree")

// file reads the file name of the tree, a path of folders.
func (t *indexTree) file(st storer.EncodedObjectStorer, name string) ([]byte, error) {
	if dir, base, ok := strings.Cut(name, "/"); ok {
		sub, err := t.dir(st, dir)
		if err != nil {
			return nil, err
		}
		return sub.file(st, base)
	}
	e, err := t.entry(name)
	if err != nil {
		return nil, err
	}
	if !e.Mode.IsFile() {
		return nil, fmt.Errorf("%s is not a file", name)
	}
	data, err := gitobj.ReadBlob(st, e.Hash(), 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return data, nil
}

// dir reads the folder name of the tree.
func (t *indexTree) dir(st storer.EncodedObjectStorer, name string) (*indexTree, error) {
	e, err := t.entry(name)
	if err != nil {
		return nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, fmt.Errorf("%s is not a folder", name)
	}
	return readIndexTree(st, e.Hash())
}
