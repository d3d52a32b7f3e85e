package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// record is everything a status commit holds.
type record struct {
	Status schemas.Status
	// Applied holds the resolved spec of every component applied, by name.
	Applied map[string]*schemas.ComponentState
	// Jobs are the manifests of the jobs of the reconcile that wrote it.
	Jobs []*schemas.Job

	// dirty says the record changed since it was read and needs a commit;
	// summary is that commit's message body, one line per change.
	dirty   bool
	summary []string
}

func newRecord(install string) *record {
	return &record{
		Status: schemas.Status{
			APIVersion: schemas.APIVersion,
			Kind:       schemas.KindStatus,
			Install:    install,
			Components: map[string]schemas.ComponentStatus{},
		},
		Applied: map[string]*schemas.ComponentState{},
	}
}

// loadRecord reads the status commit at h from the agent's store.
func (a *Agent) loadRecord(h plumbing.Hash) (*record, error) {
	_, files, err := gitobj.ReadCommitFiles(a.store, h, 0)
	if err != nil {
		return nil, fmt.Errorf("read status %s: %w", short(h), err)
	}
	rec := newRecord(a.cfg.Install)
	if err := json.Unmarshal(files[schemas.StatusFile], &rec.Status); err != nil {
		return nil, fmt.Errorf("read status %s: %s: %w", short(h), schemas.StatusFile, err)
	}
	if rec.Status.Components == nil {
		rec.Status.Components = map[string]schemas.ComponentStatus{}
	}
	for p, data := range files {
		name, ok := strings.CutPrefix(p, schemas.AppliedDir+"/")
		if !ok {
			continue
		}
		var cs schemas.ComponentState
		if err := json.Unmarshal(data, &cs); err != nil {
			return nil, fmt.Errorf("read status %s: %s: %w", short(h), p, err)
		}
		rec.Applied[strings.TrimSuffix(name, ".json")] = &cs
	}
	return rec, nil
}

// commitRecord writes rec as a signed status commit on top of parent and
// moves the local status ref to it. It returns the new commit. A non-zero
// replace is a forged remote tip: it becomes the commit's second parent (or
// its only one when there is no parent), so the commit descends from it.
func (a *Agent) commitRecord(rec *record, parent, replace plumbing.Hash, summary string) (plumbing.Hash, error) {
	b := gitobj.NewBatch()
	blob := func(v any) (plumbing.Hash, error) {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return b.Add(plumbing.BlobObject, a.redactJSON(append(data, '\n'))), nil
	}
	var root []gitobj.Entry
	h, err := blob(rec.Status)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	root = append(root, gitobj.Entry{Name: schemas.StatusFile, Mode: filemode.Regular, Hash: h})
	if len(rec.Applied) > 0 {
		var entries []gitobj.Entry
		for name, cs := range rec.Applied {
			h, err := blob(cs)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			entries = append(entries, gitobj.Entry{Name: name + ".json", Mode: filemode.Regular, Hash: h})
		}
		root = append(root, gitobj.Entry{Name: schemas.AppliedDir, Mode: filemode.Dir, Hash: b.Tree(entries)})
	}
	if len(rec.Jobs) > 0 {
		var entries []gitobj.Entry
		for _, j := range rec.Jobs {
			h, err := blob(j)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			entries = append(entries, gitobj.Entry{Name: j.ID + ".json", Mode: filemode.Regular, Hash: h})
		}
		root = append(root, gitobj.Entry{Name: schemas.JobsDir, Mode: filemode.Dir, Hash: b.Tree(entries)})
	}
	tree := b.Tree(root)
	if !parent.IsZero() && replace.IsZero() {
		if pc, err := gitobj.ReadCommit(a.store, parent); err == nil && pc.TreeHash == tree {
			return parent, nil // nothing new to say
		}
	}
	st := rec.Status
	msg := fmt.Sprintf("nuon: status %s generation %d: %s\n\n%s\n\n%s: %s\n%s: %d\n%s: %s\n%s: %s\n",
		st.Install, st.Generation, st.Phase, summary,
		schemas.TrailerInstall, st.Install,
		schemas.TrailerGeneration, st.Generation,
		schemas.TrailerDesired, orNone(st.Desired),
		schemas.TrailerPhase, st.Phase)
	who := object.Signature{Name: "nuon agent " + st.Install, Email: st.Install + "@agent.nuon.invalid", When: a.cfg.Now().UTC().Truncate(time.Second)}
	var parents []plumbing.Hash
	for _, h := range []plumbing.Hash{parent, replace} {
		if !h.IsZero() {
			parents = append(parents, h)
		}
	}
	commit, err := b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: a.red.String(msg)}, a.cfg.Key)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("status commit: %w", err)
	}
	if err := b.Flush(a.store); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write status: %w", err)
	}
	var old *plumbing.Reference
	if !parent.IsZero() {
		old = plumbing.NewHashReference(plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install)), parent)
	}
	if err := a.store.CheckAndSetReference(plumbing.NewHashReference(plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install)), commit), old); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("move local status ref: %w", err)
	}
	return commit, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// redactJSON returns data, JSON, with every secret the install holds
// replaced by redact.Marker: git history is permanent. Should replacing
// runs of the text break the JSON (a secret that spans its syntax), the
// strings are redacted one by one instead.
func (a *Agent) redactJSON(data []byte) []byte {
	out := a.red.Bytes(data)
	if json.Valid(out) {
		return out
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return out
	}
	red, _ := schemas.WalkStrings(v, "", func(_, s string) (any, error) { return a.red.String(s), nil })
	b, err := json.MarshalIndent(red, "", "  ")
	if err != nil {
		return out
	}
	b = append(b, '\n')
	if again := a.red.Bytes(b); json.Valid(again) {
		return again
	}
	return b
}

// redactReport returns rep with every secret replaced, for whoever reads
// it (`nuon agent --once -o json`).
func (a *Agent) redactReport(rep *Report) *Report {
	data, err := json.Marshal(rep)
	if err != nil {
		return rep
	}
	red := a.redactJSON(data)
	if bytes.Equal(red, data) {
		return rep
	}
	var out Report
	if err := json.Unmarshal(red, &out); err != nil {
		return rep
	}
	return &out
}
