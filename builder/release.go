package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing/fstest"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// MainRef is the branch releases are recorded on.
const MainRef = plumbing.ReferenceName("refs/heads/main")

// ErrConflict means a version is already released with other artifacts:
// a released version never changes. Release a new version instead.
var ErrConflict = errors.New("version already released with other artifacts")

// Record is one component version to release.
type Record struct {
	Component string
	Version   string
	// Artifacts by name (module, chart, manifests, image). A repository
	// equal to the component's is left out of the file.
	Artifacts map[string]schemas.ReleaseArtifact
}

// CommitSigner signs a commit's encoding (internal/signature.Signer).
type CommitSigner interface {
	Sign(message io.Reader) ([]byte, error)
}

// ReleaseOptions configure Release. Name, Email and Now are required.
type ReleaseOptions struct {
	// Signer, when set, signs the commit.
	Signer CommitSigner
	// Name and Email are the commit's author and committer.
	Name, Email string
	Now         func() time.Time
	// Retries is how often to start again when main moved meanwhile
	// (another release, a merged pull request); default 5.
	Retries int
	// Request, when set, is the build request the release answers: the
	// commit carries it as a trailer (buildreq.TrailerBuildRequest), and
	// Release first looks on main, back to Since, for a commit with that
	// trailer signed by a key of RequestSigners: when one is there, the
	// request was released already (by an earlier attempt) and Release
	// answers with it, writing nothing. The look happens again on every
	// retry, so two agents releasing one request release it once.
	Request        string
	Since          time.Time
	RequestSigners *signature.AllowedSigners
}

// ReleaseResult is what Release did.
type ReleaseResult struct {
	// Commit is the new main commit; empty when every record was there
	// already, identical, and nothing was written.
	Commit string `json:"commit,omitempty"`
	// Found is set when the build request (ReleaseOptions.Request) was
	// released before, in Commit.
	Found bool `json:"found,omitempty"`
	// Added and Unchanged list "component version".
	Added     []string `json:"added"`
	Unchanged []string `json:"unchanged"`
}

// Release records versions in releases/<component>.yaml on main, in one
// commit, and moves main to it (a push, for a remote repository). A
// version already recorded with the same digests is left as it is; one
// recorded with other digests fails the whole release with ErrConflict and
// writes nothing. When main moves meanwhile, Release reads it again and
// retries. A release moves no install: a channel pin does.
func Release(ctx context.Context, repo *gitrepo.Repo, records []Record, o ReleaseOptions) (*ReleaseResult, error) {
	if o.Now == nil || o.Name == "" || o.Email == "" {
		return nil, errors.New("release: committer name, email and clock are required")
	}
	if o.Retries <= 0 {
		o.Retries = 5
	}
	for attempt := 0; ; attempt++ {
		res, err := releaseOnce(ctx, repo, records, o)
		if errors.Is(err, gitrepo.ErrStale) && attempt < o.Retries {
			continue
		}
		return res, err
	}
}

func releaseOnce(ctx context.Context, repo *gitrepo.Repo, records []Record, o ReleaseOptions) (*ReleaseResult, error) {
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return nil, err
	}
	head, err := repo.Ref(MainRef)
	if err != nil {
		return nil, err
	}
	if head.IsZero() {
		return nil, fmt.Errorf("release: %s has no %s", repo.Location, MainRef)
	}
	commit, err := gitobj.ReadCommit(repo.Storer(), head)
	if err != nil {
		return nil, fmt.Errorf("release: read main: %w", err)
	}
	if o.Request != "" {
		found, err := FindRelease(repo.Storer(), head, o.Request, o.Since, o.RequestSigners)
		if err != nil {
			return nil, err
		}
		if !found.IsZero() {
			return &ReleaseResult{Commit: found.String(), Found: true, Added: []string{}, Unchanged: []string{}}, nil
		}
	}
	root, err := gitobj.ReadTree(repo.Storer(), commit.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("release: read main: %w", err)
	}
	app, err := readFile(repo.Storer(), root, schemas.AppFile)
	if err != nil {
		return nil, err
	}
	res := &ReleaseResult{Added: []string{}, Unchanged: []string{}}
	files := map[string][]byte{}
	for _, r := range records {
		file := path.Join(schemas.ReleasesDir, r.Component+".yaml")
		old, ok := files[file]
		if !ok {
			old, err = readFile(repo.Storer(), root, file)
			if errors.Is(err, object.ErrFileNotFound) {
				old, err = nil, nil
			}
			if err != nil {
				return nil, err
			}
		}
		updated, added, err := appendVersion(app, file, old, r)
		if err != nil {
			return nil, err
		}
		what := r.Component + " " + r.Version
		if !added {
			res.Unchanged = append(res.Unchanged, what)
			continue
		}
		res.Added = append(res.Added, what)
		files[file] = updated
	}
	if len(files) == 0 {
		return res, nil
	}
	b := gitobj.NewBatch()
	tree, err := replaceFiles(b, root, files)
	if err != nil {
		return nil, err
	}
	msg := releaseMessage(records, res.Added)
	if o.Request != "" {
		msg += "\n" + buildreq.TrailerBuildRequest + ": " + o.Request + "\n"
	}
	h, err := writeCommit(b, tree, head, msg, o)
	if err != nil {
		return nil, err
	}
	if err := b.Flush(repo.Storer()); err != nil {
		return nil, fmt.Errorf("release: write objects: %w", err)
	}
	if err := repo.Apply(ctx, []gitrepo.Update{{Name: MainRef, Old: head, New: h}}); err != nil {
		return nil, err
	}
	res.Commit = h.String()
	return res, nil
}

// readFile reads the source file name of main through the verified
// reader, refusing it from its blob's size when it is over the cap on a
// source file. A missing file is object.ErrFileNotFound.
func readFile(st storer.EncodedObjectStorer, root *object.Tree, name string) ([]byte, error) {
	e, err := root.FindEntry(name)
	if err != nil {
		return nil, object.ErrFileNotFound
	}
	if !e.Mode.IsFile() {
		return nil, fmt.Errorf("release: main's %s is not a file", name)
	}
	o, err := st.EncodedObject(plumbing.BlobObject, e.Hash)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if err := schemas.CheckSize(name, o.Size()); err != nil {
		return nil, fmt.Errorf("release: main's %w", err)
	}
	data, err := gitobj.ReadBlob(st, e.Hash, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return data, nil
}

// appendVersion adds r to the release file's content old (nil: no file
// yet). It reports false when the version is there already with the same
// digests, and ErrConflict when it is there with others. The result is
// validated against the app.
func appendVersion(app []byte, file string, old []byte, r Record) ([]byte, bool, error) {
	src, err := schemas.Load(fstest.MapFS{schemas.AppFile: {Data: app}})
	if err != nil {
		return nil, false, fmt.Errorf("release: main's %s: %w", schemas.AppFile, err)
	}
	var comp *schemas.Component
	for i := range src.App.Components {
		if src.App.Components[i].Name == r.Component {
			comp = &src.App.Components[i]
		}
	}
	if comp == nil && r.Component == schemas.SandboxComponent && src.App.Sandbox != nil {
		// The sandbox is released like a component, from its own entry.
		comp = &schemas.Component{Name: r.Component, Type: schemas.TypeTerraform, Repository: src.App.Sandbox.Repository}
	}
	if comp == nil {
		return nil, false, fmt.Errorf("release: no component %q in %s on main", r.Component, schemas.AppFile)
	}
	arts := map[string]schemas.ReleaseArtifact{}
	for n, a := range r.Artifacts {
		if a.Repository == comp.Repository {
			a.Repository = ""
		}
		arts[n] = a
	}
	version := schemas.ReleaseVersion{Version: r.Version, Artifacts: arts}

	var doc yaml.Node
	if old == nil {
		if err := doc.Encode(schemas.Release{Component: r.Component, Versions: []schemas.ReleaseVersion{version}}); err != nil {
			return nil, false, err
		}
	} else {
		if err := yaml.Unmarshal(old, &doc); err != nil {
			return nil, false, fmt.Errorf("release: %s: %w", file, err)
		}
		var rel schemas.Release
		if err := doc.Decode(&rel); err != nil {
			return nil, false, fmt.Errorf("release: %s: %w", file, err)
		}
		for _, v := range rel.Versions {
			if v.Version != r.Version {
				continue
			}
			if sameArtifacts(comp.Repository, v.Artifacts, arts) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("release %s %s: %w (%s holds %s)", r.Component, r.Version, ErrConflict, file, describe(v.Artifacts))
		}
		versions := findKey(&doc, "versions")
		if versions == nil || versions.Kind != yaml.SequenceNode {
			return nil, false, fmt.Errorf("release: %s has no list of versions", file)
		}
		var n yaml.Node
		if err := n.Encode(version); err != nil {
			return nil, false, err
		}
		versions.Content = append(versions.Content, &n)
		versions.Style = 0
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, false, err
	}
	if err := enc.Close(); err != nil {
		return nil, false, err
	}
	if _, err := schemas.Load(fstest.MapFS{schemas.AppFile: {Data: app}, file: {Data: buf.Bytes()}}); err != nil {
		return nil, false, fmt.Errorf("release %s %s: %w", r.Component, r.Version, err)
	}
	return buf.Bytes(), true, nil
}

// findKey returns the value of key in the document's top-level mapping.
func findKey(doc *yaml.Node, key string) *yaml.Node {
	m := doc
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// sameArtifacts compares two artifact sets by name, digest and
// repository (empty meaning the component's).
func sameArtifacts(compRepo string, a, b map[string]schemas.ReleaseArtifact) bool {
	if len(a) != len(b) {
		return false
	}
	repo := func(r string) string {
		if r == "" {
			return compRepo
		}
		return r
	}
	for n, x := range a {
		y, ok := b[n]
		if !ok || x.Digest != y.Digest || repo(x.Repository) != repo(y.Repository) {
			return false
		}
	}
	return true
}

func describe(arts map[string]schemas.ReleaseArtifact) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(arts)) {
		parts = append(parts, n+"="+arts[n].Digest)
	}
	return strings.Join(parts, ", ")
}

// replaceFiles writes root with files (paths one directory deep, under
// releases/) replaced or added, and returns the new root tree.
func replaceFiles(b *gitobj.Batch, root *object.Tree, files map[string][]byte) (plumbing.Hash, error) {
	byDir := map[string]map[string][]byte{}
	for p, data := range files {
		dir, base := path.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" || strings.Contains(dir, "/") {
			return plumbing.ZeroHash, fmt.Errorf("release: unexpected path %s", p)
		}
		if byDir[dir] == nil {
			byDir[dir] = map[string][]byte{}
		}
		byDir[dir][base] = data
	}
	entries := treeEntries(root)
	for dir, fs := range byDir {
		var sub []gitobj.Entry
		if e, err := root.FindEntry(dir); err == nil && e.Mode == filemode.Dir {
			t, err := root.Tree(dir)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			sub = treeEntries(t)
		}
		for base, data := range fs {
			h := b.Add(plumbing.BlobObject, data)
			sub = setEntry(sub, gitobj.Entry{Name: base, Mode: filemode.Regular, Hash: h})
		}
		entries = setEntry(entries, gitobj.Entry{Name: dir, Mode: filemode.Dir, Hash: b.Tree(sub)})
	}
	return b.Tree(entries), nil
}

func treeEntries(t *object.Tree) []gitobj.Entry {
	out := make([]gitobj.Entry, len(t.Entries))
	for i, e := range t.Entries {
		out[i] = gitobj.Entry{Name: e.Name, Mode: e.Mode, Hash: e.Hash}
	}
	return out
}

func setEntry(entries []gitobj.Entry, e gitobj.Entry) []gitobj.Entry {
	for i := range entries {
		if entries[i].Name == e.Name {
			entries[i] = e
			return entries
		}
	}
	return append(entries, e)
}

func releaseMessage(records []Record, added []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "release: %s\n\n", strings.Join(added, ", "))
	for _, r := range records {
		if !slices.Contains(added, r.Component+" "+r.Version) {
			continue
		}
		for _, n := range slices.Sorted(maps.Keys(r.Artifacts)) {
			a := r.Artifacts[n]
			fmt.Fprintf(&b, "%s %s %s: %s@%s\n", r.Component, r.Version, n, a.Repository, a.Digest)
		}
	}
	return b.String()
}

func writeCommit(b *gitobj.Batch, tree, parent plumbing.Hash, msg string, o ReleaseOptions) (plumbing.Hash, error) {
	who := object.Signature{Name: o.Name, Email: o.Email, When: o.Now()}
	var s gitobj.Signer
	if o.Signer != nil {
		s = o.Signer
	}
	return b.Commit(gitobj.Commit{Tree: tree, Parents: []plumbing.Hash{parent}, Author: who, Message: msg}, s)
}

// maxReleaseWalk bounds the commits FindRelease reads.
const maxReleaseWalk = 5000

// FindRelease looks for the release of build request id on main: a commit
// reachable from head, committed at or after since, whose message carries
// the trailer "Nuon-Build-Request: id" and, when signers is not nil,
// signed by one of them. It returns the zero hash when there is none.
func FindRelease(st storer.EncodedObjectStorer, head plumbing.Hash, id string, since time.Time, signers *signature.AllowedSigners) (plumbing.Hash, error) {
	trailer := "\n" + buildreq.TrailerBuildRequest + ": " + id + "\n"
	seen := map[plumbing.Hash]bool{head: true}
	todo := []plumbing.Hash{head}
	for n := 0; len(todo) > 0 && n < maxReleaseWalk; n++ {
		h := todo[0]
		todo = todo[1:]
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("release: look for build request %s on main: %w", id, err)
		}
		if c.Committer.When.Before(since) {
			continue
		}
		if strings.Contains(c.Message, trailer) {
			if signers == nil {
				return h, nil
			}
			if _, err := signers.VerifyCommit(c); err == nil {
				return h, nil
			}
		}
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				todo = append(todo, p)
			}
		}
	}
	return plumbing.ZeroHash, nil
}
