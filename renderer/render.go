package renderer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"golang.org/x/crypto/ssh"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"nuon.dev/nuon/internal/signature"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// Signer signs a commit's encoding (see internal/signature).
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// Options configure a render. Signer and Now are required: the renderer
// reads no clock and holds no key of its own.
type Options struct {
	Signer Signer
	// Now stamps the commits.
	Now func() time.Time
	// Name and Email of the commits' author and committer; default
	// "nuon renderer" <renderer@nuon.invalid>.
	Name, Email string
	// Workers load and render installs in parallel, each as soon as it
	// has read its file; default GOMAXPROCS.
	Workers int
	// Diff asks for a line diff of every changed install's files.
	Diff bool
	// MaxListed bounds the installs named in the rendered commit's
	// message; default 100.
	MaxListed int
	// Trust holds the keys whose commits the renderer takes for its own:
	// the previous rendered commit and install commits are believed only
	// when one of them signed. Default: the Signer's public key, when it
	// has one (a key rotation lists the old key here too).
	Trust *signature.AllowedSigners
	// Requests is the tip of requests.Ref: the install's pending requests
	// signed by a key trust/requests on main lists go into its rendered
	// state (installs/<id>/requests.json). Zero: no requests.
	Requests plumbing.Hash
	// Approvals is the tip of schemas.ApprovalsRef: an install's approvals
	// signed by a key trust/approvals on main lists go into its rendered
	// state (installs/<id>/approvals.json). Zero: no approvals.
	Approvals plumbing.Hash
	// CheckPolicies compiles policies/*.rego on main (by path) and
	// returns schemas.Problems for what does not compile; the renderer
	// itself links no policy engine. Nil: policies are rendered unchecked
	// (the agent blocks the changes of a policy it cannot compile).
	CheckPolicies func(files map[string]string) error
	// Rollouts are the tips of the channels' rollout refs
	// (schemas.RolloutRef), by channel: an install of a channel with a
	// rollout gets the pins its rollout state gives it (renderer/rollout.go).
	// Nil: main's pins.
	Rollouts map[string]plumbing.Hash
	// MaxFileSize bounds each source file, in bytes; default
	// schemas.DefaultMaxFileSize.
	MaxFileSize int64
	// Objects is the batch the render's new objects go into, returned as
	// Result.Objects; default gitobj.NewBatch(). A batch of
	// gitobj.NewSpooledBatch writes each install's objects to a pack file
	// as it is rendered, so that memory does not grow with them.
	Objects *gitobj.Batch
	// Cache, when not nil, keeps across the renders of a process what the
	// next render reads again (a server renders main at every change);
	// default none.
	Cache *Cache
}

func (o *Options) defaults() error {
	if o.Signer == nil {
		return errors.New("no signer")
	}
	if o.Now == nil {
		return errors.New("no clock")
	}
	if o.Name == "" {
		o.Name = "nuon renderer"
	}
	if o.Email == "" {
		o.Email = "renderer@nuon.invalid"
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Objects == nil {
		o.Objects = gitobj.NewBatch()
	}
	if o.MaxListed <= 0 {
		o.MaxListed = 100
	}
	if o.Trust == nil {
		k, ok := o.Signer.(interface{ PublicKey() ssh.PublicKey })
		if !ok {
			return errors.New("no trusted render keys")
		}
		o.Trust = &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"nuon-render"}, Key: k.PublicKey()}}}
	}
	return nil
}

// Previous is what the repository holds now: the rendered ref and every
// install ref (zero hashes when absent).
type Previous struct {
	Rendered plumbing.Hash
	// Installs are the install refs, id to commit. Refs, when not nil,
	// is used instead.
	Installs map[string]plumbing.Hash
	// Refs are the install refs sorted by id, each id once: what a
	// repository of 100,000 install refs hands over without building a
	// map of them (gitrepo.Repo.RefList). List, when not nil, is used
	// instead.
	Refs []InstallRef
	// List is the install refs as a RefList: the list a render left
	// (Result.List), handed back, is not read again, and its digest is
	// known.
	List *RefList
}

// InstallRef is an install's ref: its id and commit.
type InstallRef struct {
	ID     string
	Commit plumbing.Hash
}

// installRefs returns the install refs that exist, sorted by id.
func (p Previous) installRefs() []InstallRef {
	if p.Refs != nil {
		zero := func(r InstallRef) bool { return r.Commit.IsZero() }
		sorted := slices.IsSortedFunc(p.Refs, compareRefs)
		if sorted && !slices.ContainsFunc(p.Refs, zero) {
			return p.Refs
		}
		out := slices.DeleteFunc(slices.Clone(p.Refs), zero)
		if !sorted {
			slices.SortStableFunc(out, compareRefs)
			out = slices.CompactFunc(out, func(a, b InstallRef) bool { return a.ID == b.ID })
		}
		return out
	}
	out := make([]InstallRef, 0, len(p.Installs))
	for id, h := range p.Installs {
		if !h.IsZero() {
			out = append(out, InstallRef{id, h})
		}
	}
	slices.SortFunc(out, compareRefs)
	return out
}

func compareRefs(a, b InstallRef) int { return strings.Compare(a.ID, b.ID) }

// Change says what happened to one install.
type Change string

// Changes of an install.
const (
	Added     Change = "added"
	Changed   Change = "changed"
	Unchanged Change = "unchanged"
	// Removed installs vanish from the rendered tree; their own ref is
	// left as it was.
	Removed Change = "removed"
	// Replaced installs' refs held a commit the renderer did not sign (or
	// not the last one it signed): a new signed commit, with a generation
	// above every one issued, replaces it.
	Replaced Change = "replaced"
	// Renewed installs got a new signed commit of the same tree, because
	// their freshness bound was near (schemas.Freshness).
	Renewed Change = "renewed"
	// Failed installs could not be rendered (their file has problems, or
	// their state could not be made); they keep their previous state and
	// ref, and the render reports them.
	Failed Change = "failed"
)

// InstallResult is the outcome for one install.
type InstallResult struct {
	ID     string `json:"install"`
	Change Change `json:"change"`
	// Generation of the install's state after the render.
	Generation int64    `json:"generation,omitempty"`
	Commit     ObjectID `json:"commit,omitzero"`
	Tree       ObjectID `json:"tree,omitzero"`
	// Diff is a unified diff of the install's files (Options.Diff).
	Diff string `json:"diff,omitempty"`
	// Error says why a Failed install was not rendered.
	Error string `json:"error,omitempty"`
	// Replaced is the commit a Replaced install's ref held, and why it
	// was not trusted.
	Replaced string `json:"replaced,omitempty"`
}

// ObjectID is a git object's id in a result: its hex form in JSON and
// text, and none when zero. It is the id's 20 bytes where a hex string
// was 16 and 48 more: at 1,000,000 installs the results' commits and
// trees as strings were 130 MB held to the end of the render.
type ObjectID plumbing.Hash

// IsZero reports whether o is no object.
func (o ObjectID) IsZero() bool { return plumbing.Hash(o).IsZero() }

// String is o in hex, "" when zero.
func (o ObjectID) String() string {
	if o.IsZero() {
		return ""
	}
	return plumbing.Hash(o).String()
}

// MarshalText implements encoding.TextMarshaler.
func (o ObjectID) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: 40 hex digits, or
// nothing for none.
func (o *ObjectID) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*o = ObjectID{}
		return nil
	}
	if len(text) != 40 || !plumbing.IsHash(string(text)) {
		return fmt.Errorf("object id %q: want 40 hex digits", text)
	}
	*o = ObjectID(plumbing.NewHash(string(text)))
	return nil
}

// Update is one ref update: from Old (zero: create) to New.
type Update struct {
	Name     plumbing.ReferenceName
	Old, New plumbing.Hash
}

// Result is a finished render: the objects to write and the refs to move.
type Result struct {
	Source plumbing.Hash
	// Rendered is the new rendered commit, zero when nothing changed.
	Rendered plumbing.Hash
	Installs []InstallResult
	// Updates are the ref updates, rendered ref last.
	Updates []Update
	// Objects holds every new object; write it before moving a ref.
	Objects *gitobj.Batch
	// Incremental is true when only the installs whose source changed
	// were rendered, the others keeping their previous state.
	Incremental bool
	// Total is the number of installs in the rendered tree after the
	// render. An incremental render lists in Installs only the installs
	// it read (changed, added, removed, failed); a full one lists every
	// install.
	Total int
	// List is the install refs once Updates are applied, its ids those
	// of Previous.List or else Previous.Refs and of Updates: the next
	// render's Previous.List when nothing else moves one (the tenant
	// server's ref table hands it out next), sharing all but the chunks
	// of the refs moved with this render's.
	List *RefList
	// Problems are those of the Failed installs' files.
	Problems schemas.Problems
	// Warnings are things the render repaired, for the operator to know:
	// a rendered ref that held a commit the renderer did not sign.
	Warnings []string
}

// moved reports whether a change writes a new commit on the install's ref.
func (c Change) moved() bool { return c == Added || c == Changed || c == Replaced || c == Renewed }

// ChangedCount is the number of installs that get a new commit.
func (r *Result) ChangedCount() int {
	n := 0
	for _, in := range r.Installs {
		if in.Change.moved() {
			n++
		}
	}
	return n
}

// Failed returns the installs that could not be rendered.
func (r *Result) Failed() []InstallResult {
	var out []InstallResult
	for _, in := range r.Installs {
		if in.Change == Failed {
			out = append(out, in)
		}
	}
	return out
}

// Trailers the rendered commit carries beside those of schemas, so that
// the next render can trust it.
const (
	// TrailerInstallRefs is a digest of every install ref (id and commit)
	// as the render left them (see digestChunks). The next render compares it with the refs
	// it finds: when they agree, each install ref holds the tree of its
	// folder in the rendered commit and need not be read; when they do not
	// (a render stopped between ref updates, or someone moved a ref), it
	// reads every install ref.
	TrailerInstallRefs = "Nuon-Install-Refs"
	// TrailerFormat is the Format the render was made with.
	TrailerFormat = "Nuon-Render-Format"
	// TrailerRendered is the number of installs in the rendered tree:
	// the next render compares it with the install files of the source
	// it was made from to know that each has a folder, without reading
	// them.
	TrailerRendered = "Nuon-Installs-Rendered"
	// TrailerRenewAt is when the next install's freshness bound comes
	// within its renewal window: a render before then need not read every
	// install's commit to find the ones to re-sign.
	TrailerRenewAt = "Nuon-Renew-At"
)

// Format is the version of what the renderer writes for a given source.
// Bump it with any change that renders other files from the same source
// (including a change to the schemas types it encodes): a render re-renders
// only the installs whose source changed when the previous render has the
// same Format, and every install otherwise.
//
// Format 3 splits the rendered installs/ and issued/ into shards
// (schemas.Shard) and records TrailerRendered.
const Format = schemas.ShardedFormat

// Render renders every install of the source commit on top of the previous
// state. It reads objects from st and writes none: the new objects are in
// the result. The same source and previous state give the same trees.
//
// When the previous render's install refs are as it left them and only
// install files changed on main since, it renders only those installs: the
// others' state is their folder in the previous rendered tree.
func Render(ctx context.Context, st storer.EncodedObjectStorer, source plumbing.Hash, prev Previous, opts Options) (*Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	r := &renderRun{
		st: st, source: source, prev: prev, opts: opts, batch: opts.Objects,
		now: opts.Now().UTC().Truncate(time.Second),
	}
	if prev.List != nil {
		// Sorted and checked as it was made: not checked again.
		r.list = prev.List
	} else {
		// The ids are the caller's (Result.List).
		r.list = newRefList(prev.installRefs())
	}
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"trust", r.loadTrust},
		{"previous", r.readPrevious},
		{"source", r.loadSource},
		{"requests", r.loadRequests},
		{"approvals", r.loadApprovals},
		{"policies", r.loadPolicies},
		{"rollouts", r.loadRollouts},
		{"installs", r.renderInstalls},
		{"rendered", r.writeRendered},
	} {
		t0 := time.Now()
		if err := step.run(ctx); err != nil {
			return nil, err
		}
		phase(ctx, "render "+step.name, t0)
	}
	return r.result, nil
}

type renderRun struct {
	st     storer.EncodedObjectStorer
	source plumbing.Hash
	prev   Previous
	opts   Options
	batch  *gitobj.Batch
	// now stamps every commit of the render.
	now time.Time

	// prevCommit is the newest rendered commit the renderer signed on the
	// rendered ref, nil when there is none.
	prevCommit *object.Commit
	// prevTrees are the install folders of prevCommit's tree, and
	// prevIssued their issued records' blobs, read as far as asked.
	prevTrees, prevIssued *shardedDir
	// prevCount is the number of installs in prevTrees, -1 when
	// prevCommit does not record it.
	prevCount int
	// trusted is true when prevCommit is the rendered ref's tip and the
	// install refs are as that render left them, so that each holds its
	// folder of prevTrees and is the last commit issued for it.
	trusted bool
	// list is the install refs that exist.
	list *RefList

	src *schemas.Source
	// ids are the installs to render: every install of the source, or
	// in an incremental render (changed is not nil) the ones whose file
	// changed, the others keeping their previous state; removed are the
	// installs whose file an incremental render found gone.
	ids     []string
	changed map[string]bool
	removed []string
	// bad are the installs whose files have problems.
	bad map[string]schemas.Problems

	// validFor and renewBefore are the source's freshness bound (zero:
	// off); renewAll asks every install's commit to be read for renewal;
	// renewAt is the earliest renewal time known (zero: none).
	validFor, renewBefore time.Duration
	renewAll              bool
	renewAt               time.Time
	// nextRenew is renewAt for the next render.
	nextRenew time.Time

	// folders are, in a full render (changed is nil), the install
	// folders of the new rendered tree and the records issued, one per
	// id of ids: slices, as a million installs' maps were some 200 bytes
	// an install at the render's peak.
	folders []folder
	// trees and issued are, in an incremental render, the install
	// folders that changed (a zero hash: the install is gone) and the
	// records issued.
	trees  map[string]plumbing.Hash
	issued map[string]issued
	// total is the number of installs in the new rendered tree.
	total  int
	result *Result
	// requests are the installs' requests.json, by install id.
	requests map[string][]byte
	// approvals are the installs' approvals.json, by install id.
	approvals map[string][]byte
	// policies are the Rego policies on plans, by their path in an
	// install's tree.
	policies map[string]string
	// rollouts are the channels' rollout states, rolloutWords the refs
	// read (TrailerRollouts).
	rollouts     map[string]*schemas.RolloutState
	rolloutWords []string
	// pinsOnly are the channels whose file changed on main since the
	// previous render in its components' pins only, with the components
	// whose pin changed (sourceDelta); read are the rollout states
	// pinsCovered read for them, for loadRollouts.
	pinsOnly map[string]map[string]bool
	read     map[string]*schemas.RolloutState
	// root are the trust root's files on main (trust/root/<n>.json),
	// carried into every install's tree; nil when main has none.
	root map[string][]byte
	// rootWarnings are what loadTrust found, before the result exists.
	rootWarnings []string
}

func (r *renderRun) readPrevious(context.Context) error {
	r.prevTrees, r.prevIssued = emptyDir(schemas.InstallsDir), emptyDir(schemas.IssuedDir)
	r.prevCount = -1
	r.result = &Result{Source: r.source, Objects: r.batch, Warnings: r.rootWarnings}
	if r.prev.Rendered.IsZero() {
		return nil
	}
	c, ok := r.newestOurs(r.prev.Rendered, "")
	if !ok {
		r.result.Warnings = append(r.result.Warnings, fmt.Sprintf(
			"%s holds %s, and no commit the renderer signed is within %d first parents of it: rendering from the install refs' signed history",
			schemas.RenderedRef, short(r.prev.Rendered), maxWalk))
		return nil
	}
	if c.Hash != r.prev.Rendered {
		r.result.Warnings = append(r.result.Warnings, fmt.Sprintf(
			"%s holds %s, which the renderer did not sign: continuing from its own %s",
			schemas.RenderedRef, short(r.prev.Rendered), short(c.Hash)))
	}
	r.prevCommit = c
	digest, _ := schemas.Trailer(c.Message, TrailerInstallRefs)
	found := r.refsDigestAs(digest)
	r.trusted = c.Hash == r.prev.Rendered && digest == found
	root, err := gitobj.ReadTree(r.st, c.TreeHash)
	if err != nil {
		return fmt.Errorf("read rendered tree: %w", err)
	}
	format, _ := schemas.Trailer(c.Message, TrailerFormat)
	f, _ := strconv.Atoi(format)
	flat := schemas.FlatLayout(f)
	if r.prevTrees, err = openDir(r.st, root, schemas.InstallsDir, flat); err != nil {
		return err
	}
	if r.prevIssued, err = openDir(r.st, root, schemas.IssuedDir, flat); err != nil {
		return err
	}
	if n, ok := schemas.Trailer(c.Message, TrailerRendered); ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 0 {
			r.prevCount = v
		}
	}
	if at, ok := schemas.Trailer(c.Message, TrailerRenewAt); ok {
		r.renewAt, _ = time.Parse(time.RFC3339, at)
	}
	return nil
}

// loadSource opens the source: it loads nuon.yaml, the channels and the
// releases, and lists the install files it renders. The install files
// are read as they are rendered (renderInstalls).
func (r *renderRun) loadSource(context.Context) error {
	delta, ok := r.sourceDelta()
	if ok {
		fsys, err := sourceFS(r.st, r.source, true, delta.entries)
		if err != nil {
			return err
		}
		fsys.cache = r.opts.Cache
		if err := r.open(fsys); err != nil {
			return err
		}
		r.ids = slices.Sorted(maps.Keys(delta.changed))
		r.changed, r.removed = delta.changed, delta.removed
		if !r.pinsCovered() {
			if err := r.openSource(); err != nil {
				return err
			}
		}
	} else if err := r.openSource(); err != nil {
		return err
	}
	if f := r.src.App.Freshness; f != nil {
		r.validFor, r.renewBefore = f.Durations()
		// Renew when the earliest bound is due, or when none is recorded
		// (freshness was just turned on, or the previous render is not
		// trusted).
		r.renewAll = r.renewAt.IsZero() || !r.trusted || !r.now.Before(r.renewAt)
	}
	if r.renewAll && r.changed != nil {
		return r.openSource()
	}
	return nil
}

// openSource opens the whole source, for a render of every install.
func (r *renderRun) openSource() error {
	fsys, err := SourceFS(r.st, r.source)
	if err != nil {
		return err
	}
	if err := r.open(fsys); err != nil {
		return err
	}
	r.changed, r.removed = nil, nil
	r.ids = r.src.ListedInstalls()
	for id := range r.bad {
		r.ids = append(r.ids, id)
	}
	slices.Sort(r.ids)
	r.ids = slices.Compact(r.ids)
	return nil
}

// open opens the source in fsys (schemas.Open) as r.src, and keeps the
// installs whose own files have problems aside, so that they fail alone;
// any other problem fails the render.
func (r *renderRun) open(fsys fs.FS) error {
	src, err := schemas.Open(fsys, schemas.WithMaxFileSize(r.opts.MaxFileSize), schemas.WithWorkers(r.opts.Workers))
	r.src, r.bad = src, nil
	return r.addProblems(err)
}

// addProblems adds the installs whose own files have problems to r.bad,
// so that they fail alone; any other problem fails the render.
func (r *renderRun) addProblems(err error) error {
	if err == nil {
		return nil
	}
	var ps schemas.Problems
	if !errors.As(err, &ps) {
		return err
	}
	bad, rest := ps.Split()
	if len(rest) > 0 {
		return ps
	}
	if r.bad == nil {
		r.bad = map[string]schemas.Problems{}
	}
	for id, ps := range bad {
		r.bad[id] = append(r.bad[id], ps...)
	}
	return nil
}

// renderInstalls renders each install as soon as its file is loaded, on
// the loader's workers (schemas.Source.EachInstall), so that no more than
// a worker's install is held at once. An install whose file has problems
// fails alone.
func (r *renderRun) renderInstalls(ctx context.Context) error {
	ids := r.ids
	// Each worker fills in its installs' entries: a result's empty ID
	// marks an install not rendered.
	results := make([]InstallResult, len(ids), len(ids)+len(r.removed))
	folders := make([]folder, len(ids))
	var mu sync.Mutex
	var soonest time.Time
	err := r.src.EachInstall(ctx, func(id string, in schemas.Install) {
		i, ok := slices.BinarySearch(ids, id)
		if !ok {
			return
		}
		res, tree, rec, err := r.renderInstall(id, in)
		if err != nil {
			results[i] = InstallResult{ID: id, Change: Failed, Error: err.Error()}
			return
		}
		results[i], folders[i] = res, folder{tree: tree, commit: rec.commit, gen: rec.gen}
		if e := rec.expires; r.validFor > 0 && !e.IsZero() {
			at := e.Add(-r.renewBefore)
			mu.Lock()
			if soonest.IsZero() || at.Before(soonest) {
				soonest = at
			}
			mu.Unlock()
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.addProblems(err); err != nil {
		return err
	}
	for i, id := range ids {
		if results[i].ID != "" {
			continue
		}
		msg := fmt.Sprintf("render %s: no such install", id)
		if ps, bad := r.bad[id]; bad {
			msg = ps.Error()
		}
		results[i] = InstallResult{ID: id, Change: Failed, Error: msg}
	}
	if !r.renewAll {
		// Installs not read keep the earliest bound known before.
		r.nextRenew = r.renewAt
	}
	if !soonest.IsZero() && (r.nextRenew.IsZero() || soonest.Before(r.nextRenew)) {
		r.nextRenew = soonest
	}
	var err2 error
	if r.changed == nil {
		results, err2 = r.fullFolders(results, folders)
	} else {
		results, err2 = r.changedFolders(results, folders)
	}
	if err2 != nil {
		return err2
	}
	if !slices.IsSortedFunc(results, compareResults) {
		slices.SortFunc(results, compareResults)
	}
	r.result.Installs, r.result.Incremental, r.result.Total = results, r.changed != nil, r.total
	moved := 0
	for _, in := range results {
		if in.Change.moved() {
			moved++
		}
	}
	r.result.Updates = make([]Update, 0, moved+1)
	for _, in := range results {
		if in.Change.moved() {
			r.result.Updates = append(r.result.Updates, Update{
				Name: plumbing.ReferenceName(schemas.InstallRef(in.ID)),
				Old:  r.ref(in.ID),
				New:  plumbing.Hash(in.Commit),
			})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.bad)) {
		r.result.Problems = append(r.result.Problems, r.bad[id]...)
	}
	return nil
}

// folder is one install's part of the new rendered tree: its folder
// (zero: none) and, when commit is not zero, the record issued for it.
type folder struct {
	tree, commit plumbing.Hash
	gen          int64
}

func compareResults(a, b InstallResult) int { return strings.Compare(a.ID, b.ID) }

// fullFolders keeps the folders of a full render, one per id of r.ids (a
// failed install keeps its previous folder, if it has one), and returns
// results with the installs of the previous tree that are gone.
func (r *renderRun) fullFolders(results []InstallResult, folders []folder) ([]InstallResult, error) {
	prev, err := r.prevTrees.all()
	if err != nil {
		return nil, err
	}
	r.total = 0
	for i, id := range r.ids {
		if results[i].Change == Failed {
			folders[i] = folder{tree: prev[id]}
		}
		if !folders[i].tree.IsZero() {
			r.total++
		}
	}
	for id := range prev {
		if _, found := slices.BinarySearch(r.ids, id); !found {
			results = append(results, InstallResult{ID: id, Change: Removed})
		}
	}
	r.folders = folders
	return results, nil
}

// changedFolders keeps the folders of an incremental render, those of
// the installs it rendered and removed, and returns results with the
// installs removed.
func (r *renderRun) changedFolders(results []InstallResult, folders []folder) ([]InstallResult, error) {
	r.trees = make(map[string]plumbing.Hash, len(r.ids))
	r.issued = make(map[string]issued, len(r.ids))
	r.total = max(r.prevCount, 0)
	for i, id := range r.ids {
		had, ok, err := r.prevTrees.get(id)
		if err != nil {
			return nil, err
		}
		if results[i].Change == Failed {
			// A failed install keeps its previous state, if it has one.
			if ok {
				r.trees[id] = had
			}
			continue
		}
		f := folders[i]
		r.trees[id] = f.tree
		if !ok {
			r.total++
		}
		if !f.commit.IsZero() {
			r.issued[id] = issued{gen: f.gen, commit: f.commit}
		}
	}
	for _, id := range r.removed {
		if _, ok, err := r.prevTrees.get(id); err != nil {
			return nil, err
		} else if ok {
			r.trees[id] = plumbing.ZeroHash
			r.total--
			results = append(results, InstallResult{ID: id, Change: Removed})
		}
	}
	return results, nil
}

// renderInstall renders one install into trees and, when its tree differs
// from what the renderer last issued for it, when its ref holds anything
// else than that, or when its freshness bound is near, a signed commit.
// Only then do its objects join the render's: an unchanged install's are
// in the repository already. It returns the install's issued record after
// the render.
func (r *renderRun) renderInstall(id string, in schemas.Install) (InstallResult, plumbing.Hash, issued, error) {
	files, err := installFiles(r.src, id, r.rolloutInstall(id, in))
	if err != nil {
		return InstallResult{}, plumbing.ZeroHash, issued{}, err
	}
	if data, ok := r.requests[id]; ok {
		files[schemas.RequestsFile] = data
	}
	if data, ok := r.approvals[id]; ok {
		files[schemas.ApprovalsFile] = data
	}
	for name, src := range r.policies {
		files[name] = []byte(src)
	}
	r.addRoot(files)
	objs := gitobj.NewBatch()
	tree := writeFiles(objs, files)
	res := InstallResult{ID: id, Tree: ObjectID(tree)}
	tip := r.ref(id)
	_, recorded, err := r.prevIssued.get(id)
	if err != nil {
		return InstallResult{}, plumbing.ZeroHash, issued{}, err
	}
	had, _, err := r.prevTrees.get(id)
	if err != nil {
		return InstallResult{}, plumbing.ZeroHash, issued{}, err
	}
	if recorded && r.trusted && !r.renewAll && had == tree && !tip.IsZero() {
		res.Change = Unchanged
		return res, tree, issued{}, nil
	}
	last, err := r.lastIssued(id)
	if err != nil {
		return res, tree, issued{}, err
	}
	// from is the tree the install's agent has: the diff starts there.
	var from plumbing.Hash
	var replaced string
	switch {
	case tip != last.commit && !tip.IsZero():
		replaced = fmt.Sprintf("%s: not the last commit the renderer signed for this install (%s)", tip, orNone(last.commit))
	case tip != last.commit:
		replaced = fmt.Sprintf("the ref was deleted; the renderer last signed %s", last.commit)
	}
	renew := false
	if !last.commit.IsZero() {
		lc, err := gitobj.ReadCommit(r.st, last.commit)
		if err != nil && replaced == "" {
			return res, tree, issued{}, fmt.Errorf("read %s: %w", schemas.InstallRef(id), err)
		}
		if err == nil {
			from = lc.TreeHash
			renew = r.due(lc)
			if replaced == "" && lc.TreeHash == tree && !renew {
				res.Change, res.Commit, res.Generation = Unchanged, ObjectID(last.commit), last.gen
				last.expires, _, _ = schemas.Expires(lc.Message)
				return res, tree, last, nil
			}
		}
	}
	gen, err := nextGeneration(last)
	if err != nil {
		return res, tree, issued{}, err
	}
	switch {
	case replaced != "":
		res.Change, res.Replaced = Replaced, replaced
	case last.commit.IsZero():
		res.Change = Added
	case from == tree:
		res.Change = Renewed
	default:
		res.Change = Changed
	}
	res.Generation = gen
	if r.opts.Diff {
		if res.Diff, err = r.diff(id, from, files); err != nil {
			return res, tree, issued{}, err
		}
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "nuon: render %s generation %d\n\nRendered from main at %s.\n", id, gen, short(r.source))
	msg.WriteString(r.rolloutNote(id, in))
	if replaced != "" {
		fmt.Fprintf(&msg, "Replaces %s\n", replaced)
	}
	fmt.Fprintf(&msg, "\n%s: %s\n%s: %d\n%s: %s\n", schemas.TrailerInstall, id, schemas.TrailerGeneration, gen, schemas.TrailerSource, r.source)
	var expires time.Time
	if r.validFor > 0 {
		expires = r.now.Add(r.validFor)
		fmt.Fprintf(&msg, "%s: %s\n", schemas.TrailerExpires, expires.Format(time.RFC3339))
	}
	if replaced != "" && !tip.IsZero() {
		fmt.Fprintf(&msg, "%s: %s\n", schemas.TrailerReplaces, tip)
	}
	// The first parent continues the renderer's own history; a replaced
	// commit becomes the second, so the ref still moves forward (a host or
	// the tenant server may refuse anything else) and the commit stays in
	// the audit log.
	var parents []plumbing.Hash
	if !last.commit.IsZero() {
		if err := r.st.HasEncodedObject(last.commit); err == nil {
			parents = append(parents, last.commit)
		}
	}
	if !tip.IsZero() && tip != last.commit {
		parents = append(parents, tip)
	}
	commit, err := r.commit(objs, tree, parents, msg.String())
	if err != nil {
		return res, tree, issued{}, fmt.Errorf("render %s: %w", id, err)
	}
	// Merged, the install's objects are compressed by this worker and
	// only their compressed form is kept until the render is written.
	r.batch.Merge(objs)
	res.Commit = ObjectID(commit)
	return res, tree, issued{gen: gen, commit: commit, expires: expires}, nil
}

// due reports whether the install commit c must be re-signed for
// freshness: it has no bound, or its bound falls within the renewal
// window.
func (r *renderRun) due(c *object.Commit) bool {
	if r.validFor <= 0 {
		return false
	}
	expires, ok, err := schemas.Expires(c.Message)
	return !ok || err != nil || !r.now.Add(r.renewBefore).Before(expires)
}

func orNone(h plumbing.Hash) string {
	if h.IsZero() {
		return "none"
	}
	return h.String()
}

// writeFiles adds an install's blobs and trees to b and returns the
// install's tree.
func writeFiles(b *gitobj.Batch, files Files) plumbing.Hash {
	var top, comps []gitobj.Entry
	var nested map[string]plumbing.Hash
	for name, data := range files {
		h := b.Add(plumbing.BlobObject, data)
		if rest, ok := strings.CutPrefix(name, schemas.ComponentsDir+"/"); ok {
			comps = append(comps, gitobj.Entry{Name: rest, Mode: filemode.Regular, Hash: h})
			continue
		}
		if strings.Contains(name, "/") {
			if nested == nil {
				nested = map[string]plumbing.Hash{}
			}
			nested[name] = h
			continue
		}
		top = append(top, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	top = append(top, nestedEntries(b, nested)...)
	if len(comps) > 0 {
		top = append(top, gitobj.Entry{Name: schemas.ComponentsDir, Mode: filemode.Dir, Hash: b.Tree(comps)})
	}
	return b.Tree(top)
}

func (r *renderRun) commit(b *gitobj.Batch, tree plumbing.Hash, parents []plumbing.Hash, msg string) (plumbing.Hash, error) {
	who := object.Signature{Name: r.opts.Name, Email: r.opts.Email, When: r.now}
	return b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: msg}, r.opts.Signer)
}

func (r *renderRun) writeRendered(context.Context) error {
	// The trees join the render's objects only with a new commit: when
	// nothing changed, the repository holds them already. A render that
	// moves a ref writes one, so they join as they are made (objects).
	out := &objects{b: gitobj.NewBatch()}
	if len(r.result.Updates) > 0 {
		out.into = r.batch
	}
	var installs, issuedTree plumbing.Hash
	if r.changed != nil {
		// Every install ever issued keeps its record, removed ones
		// included, so that one added again continues above its last
		// generation. Only the shards of the installs rendered or
		// removed are written again.
		records := make(map[string]plumbing.Hash, len(r.issued))
		for id, in := range r.issued {
			records[id] = out.b.Add(plumbing.BlobObject, in.bytes())
		}
		var err error
		if installs, err = patchDir(out.b, r.prevTrees, r.trees, filemode.Dir); err != nil {
			return err
		}
		if issuedTree, err = patchDir(out.b, r.prevIssued, records, filemode.Regular); err != nil {
			return err
		}
	} else {
		var err error
		t0 := time.Now()
		if installs, issuedTree, err = r.writeFolders(out); err != nil {
			return err
		}
		phase(context.Background(), "render folders", t0)
	}
	trees := out.b
	var root []gitobj.Entry
	if !installs.IsZero() {
		root = append(root, gitobj.Entry{Name: schemas.InstallsDir, Mode: filemode.Dir, Hash: installs})
	}
	if !issuedTree.IsZero() {
		root = append(root, gitobj.Entry{Name: schemas.IssuedDir, Mode: filemode.Dir, Hash: issuedTree})
	}
	tree := trees.Tree(root)
	renewAt := ""
	if r.validFor > 0 && !r.nextRenew.IsZero() {
		renewAt = r.nextRenew.UTC().Format(time.RFC3339)
	}
	moved := make([]InstallRef, 0, len(r.result.Updates))
	for _, u := range r.result.Updates {
		moved = append(moved, InstallRef{ID: strings.TrimPrefix(u.Name.String(), schemas.InstallRefPrefix), Commit: u.New})
	}
	// Updates are in the order of the installs' ids.
	slices.SortFunc(moved, compareRefs)
	// What the refs are once the updates are applied: the next render's
	// refs, when nothing else moves one.
	t0 := time.Now()
	r.result.List = r.list.With(moved)
	digest := r.result.List.Digest()
	phase(context.Background(), "render ref list", t0)
	if pc := r.prevCommit; pc != nil && pc.TreeHash == tree && len(r.result.Updates) == 0 {
		d, _ := schemas.Trailer(pc.Message, TrailerInstallRefs)
		f, _ := schemas.Trailer(pc.Message, TrailerFormat)
		at, _ := schemas.Trailer(pc.Message, TrailerRenewAt)
		n, _ := schemas.Trailer(pc.Message, TrailerRendered)
		src, _ := schemas.Trailer(pc.Message, schemas.TrailerSource)
		// A render that read source files records their source, even
		// when nothing it renders changed (a comment, a change to
		// nuon.yaml that renders the same): the next render compares its
		// source with this one, and would otherwise read those files, or
		// render every install, again each time.
		read := len(r.ids) > 0 && src != r.source.String()
		if d == digest && r.prevRollouts() == r.rolloutTrailer() && f == strconv.Itoa(Format) && at == renewAt && n == strconv.Itoa(r.total) && pc.Hash == r.prev.Rendered && !read {
			return nil
		}
	}
	var b strings.Builder
	changed := r.result.ChangedCount()
	fmt.Fprintf(&b, "nuon: render %d of %d installs from %s\n\n", changed, r.total, short(r.source))
	fmt.Fprintf(&b, "%s: %s\n%s: %d\n", schemas.TrailerSource, r.source, schemas.TrailerChanged, changed)
	listed := 0
	for _, in := range r.result.Installs {
		if in.Change.moved() && listed < r.opts.MaxListed {
			fmt.Fprintf(&b, "%s: %s\n", schemas.TrailerInstall, in.ID)
			listed++
		}
	}
	fmt.Fprintf(&b, "%s: %s\n%s: %d\n%s: %d\n", TrailerInstallRefs, digest, TrailerFormat, Format, TrailerRendered, r.total)
	if renewAt != "" {
		fmt.Fprintf(&b, "%s: %s\n", TrailerRenewAt, renewAt)
	}
	if rs := r.rolloutTrailer(); rs != "" {
		fmt.Fprintf(&b, "%s: %s\n", TrailerRollouts, rs)
	}
	t0 = time.Now()
	r.batch.Merge(trees)
	phase(context.Background(), "render merge", t0)
	// The first parent continues the renderer's own history; a rendered
	// commit it did not sign becomes the second, as for install refs.
	var parents []plumbing.Hash
	if r.prevCommit != nil {
		parents = append(parents, r.prevCommit.Hash)
	}
	if !r.prev.Rendered.IsZero() && (r.prevCommit == nil || r.prevCommit.Hash != r.prev.Rendered) {
		parents = append(parents, r.prev.Rendered)
	}
	commit, err := r.commit(r.batch, tree, parents, b.String())
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	r.result.Rendered = commit
	r.result.Updates = append(r.result.Updates, Update{Name: plumbing.ReferenceName(schemas.RenderedRef), Old: r.prev.Rendered, New: commit})
	return nil
}

// refsDigestAs is the digest of the refs read, in the form of digest (the
// previous rendered commit's TrailerInstallRefs): each form a render wrote
// is checked in its own form, so that a render of a newer form trusts the
// commit of an older one.
func (r *renderRun) refsDigestAs(digest string) string {
	switch {
	case strings.HasPrefix(digest, digestBinary):
		return refsDigest(r.list.Refs(), nil, true)
	case !strings.HasPrefix(digest, digestChunks):
		return refsDigest(r.list.Refs(), nil, false)
	}
	return r.list.Digest()
}

// objects is where writeRendered puts its trees and records: in b,
// which joins the render's objects only if the rendered tree is new, or,
// when into is set (the render writes a commit), in into, a few thousand
// at a time, compressed (and, in a spooled batch, written to the pack):
// a million installs' records and shard trees, held uncompressed until
// the commit, were some 150 MB at the render's peak.
type objects struct {
	b, into *gitobj.Batch
}

// batch returns the batch to add objects to.
func (o *objects) batch() *gitobj.Batch {
	if o.into != nil && o.b.Len() >= 4096 {
		o.into.Merge(o.b)
		o.b = gitobj.NewBatch()
	}
	return o.b
}

// writeFolders writes the installs/ and issued/ folders of a full render
// from r.folders, and returns their trees. Every install ever issued
// keeps its record, removed ones included, so that one added again
// continues above its last generation.
func (r *renderRun) writeFolders(out *objects) (installs, issuedTree plumbing.Hash, err error) {
	dir := newShardedEntries(len(r.ids))
	for i, id := range r.ids {
		if h := r.folders[i].tree; !h.IsZero() {
			dir.add(id, filemode.Dir, h)
		}
	}
	installs = dir.write(out.batch)
	prev, err := r.prevIssued.all()
	if err != nil {
		return plumbing.ZeroHash, plumbing.ZeroHash, err
	}
	dir = newShardedEntries(len(r.ids))
	for i, id := range r.ids {
		f := r.folders[i]
		if !f.commit.IsZero() {
			b := out.batch()
			dir.add(id, filemode.Regular, b.Add(plumbing.BlobObject, issued{gen: f.gen, commit: f.commit}.bytes()))
		} else if h, ok := prev[id]; ok {
			dir.add(id, filemode.Regular, h)
		}
	}
	for id, h := range prev {
		if _, found := slices.BinarySearch(r.ids, id); !found {
			dir.add(id, filemode.Regular, h)
		}
	}
	return installs, dir.write(out.batch), nil
}

// Forms of TrailerInstallRefs: "sha256-chunks:" and the chunked digest
// (chunkedDigest), which renders write; "sha256-bin:" and the SHA-256 of
// one "id", NUL, 20-byte commit record per ref, which renders wrote until
// the chunked form; "sha256:" and the SHA-256 of one "id commit\n" line
// per ref, the commit in hex, which renders of Format 2 and before wrote.
// The two older forms are still checked. The binary form hashes half the
// bytes of the lines and encodes nothing; the chunked form lets a render
// that moves one ref of a million hash one chunk and the chunks' digests,
// where the binary form is hashed from the ref moved to the last.
const (
	digestChunks = "sha256-chunks:"
	digestBinary = "sha256-bin:"
	digestLines  = "sha256:"
)

// refsDigest is the value of TrailerInstallRefs for the install refs
// refs (sorted by id) once moved (sorted by id too) are applied, in the
// binary form or the older one of lines.
func refsDigest(refs, moved []InstallRef, binary bool) string {
	// Hashed as it goes, in a buffer of a few hundred lines: the lines of
	// 100,000 refs are 6 MB.
	d := sha256.New()
	buf := make([]byte, 0, 32<<10)
	line := func(r InstallRef) {
		buf = append(buf, r.ID...)
		if binary {
			buf = append(buf, 0)
			buf = append(buf, r.Commit[:]...)
		} else {
			buf = append(buf, ' ')
			buf = hex.AppendEncode(buf, r.Commit[:])
			buf = append(buf, '\n')
		}
		if len(buf) > cap(buf)-256 {
			d.Write(buf)
			buf = buf[:0]
		}
	}
	for len(refs) > 0 || len(moved) > 0 {
		switch {
		case len(moved) == 0 || len(refs) > 0 && refs[0].ID < moved[0].ID:
			line(refs[0])
			refs = refs[1:]
		case len(refs) > 0 && refs[0].ID == moved[0].ID:
			line(moved[0])
			refs, moved = refs[1:], moved[1:]
		default:
			line(moved[0])
			moved = moved[1:]
		}
	}
	d.Write(buf)
	if binary {
		return digestBinary + hex.EncodeToString(d.Sum(nil))
	}
	return digestLines + hex.EncodeToString(d.Sum(nil))
}

// mergeRefs returns refs with moved in place of the refs of their ids,
// both sorted by id. The refs between two moved ones are copied as one
// run: at a million installs, one append each was some 10 ms.
func mergeRefs(refs, moved []InstallRef) []InstallRef {
	out := make([]InstallRef, 0, len(refs)+len(moved))
	for _, m := range moved {
		i, found := slices.BinarySearchFunc(refs, m.ID, func(e InstallRef, id string) int { return strings.Compare(e.ID, id) })
		out = append(out, refs[:i]...)
		out = append(out, m)
		if found {
			i++
		}
		refs = refs[i:]
	}
	return append(out, refs...)
}

// ref returns the commit of install id's ref, zero when it has none.
func (r *renderRun) ref(id string) plumbing.Hash {
	h, _ := r.list.Find(id)
	return h
}

func short(h plumbing.Hash) string { return h.String()[:12] }

// phase logs, at debug level, how long a phase of a render took since t0:
// `nuon --log-level debug render` shows where a large render's wall
// time goes.
func phase(ctx context.Context, name string, t0 time.Time) {
	slog.Log(ctx, slog.LevelDebug, "phase", "name", name, "took", time.Since(t0).Round(time.Millisecond))
}
