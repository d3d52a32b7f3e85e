package renderer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/trust"
	"nuon.dev/nuon/trust/maingit"
)

// loadTrust reads the trust root from the source (trust/root/<n>.json on
// main), checks that its versions chain from version 1 to the newest, and
// keeps every version's file, as written on main, to carry into each
// install's rendered tree (trust/root/<n>.json there too): an agent given
// version 1 at install creation follows the chain through them. A root
// that does not chain fails the render, since every agent would refuse
// what it carries; an expired newest version or a render key the root
// does not authorize now is a warning, since the render is still what
// main says. Without trust/root on main nothing is carried.
//
// The root's render keys, retired and revoked ones included, are added to
// the keys whose commits the renderer takes for its own (Options.Trust):
// after a rotation, the history the old key signed is still the
// renderer's, and generations continue above it.
func (r *renderRun) loadTrust(context.Context) error {
	files, err := r.rootFiles()
	if err != nil || files == nil {
		return err
	}
	roots, err := trust.LoadFiles(files)
	if err != nil {
		return fmt.Errorf("trust root on main at %s: %w", short(r.source), err)
	}
	first := trust.First(roots)
	if first == nil {
		return fmt.Errorf("trust root on main at %s: no %s: the chain starts at version 1", short(r.source), trust.FileName(1))
	}
	// Expiry is judged below as a warning: the zero time is before any.
	newest, err := trust.Chain(first, roots, time.Time{})
	if err != nil {
		return fmt.Errorf("trust root on main at %s: %w", short(r.source), err)
	}
	if !r.now.Before(newest.Expires) {
		r.rootWarnings = append(r.rootWarnings, fmt.Sprintf(
			"%s expired at %s: every agent following the root refuses what it carries until a newer version is signed (nuon trust sign)",
			newest.File, newest.Expires.UTC().Format(time.RFC3339)))
	}
	if k, ok := r.opts.Signer.(interface{ PublicKey() ssh.PublicKey }); ok {
		fp := ssh.FingerprintSHA256(k.PublicKey())
		if _, err := newest.Authorize(trust.RoleRender, fp, r.now, trust.Target{}); err != nil && !errors.Is(err, trust.ErrOutOfScope) {
			r.rootWarnings = append(r.rootWarnings, fmt.Sprintf(
				"the render key is not authorized by %s: %v: agents following the root refuse what this render signs", newest.File, err))
		}
	}
	signers := slices.Clone(r.opts.Trust.Signers)
	for _, role := range []*trust.RoleKeys{newest.Role(trust.RoleRender)} {
		for _, k := range role.Keys {
			signers = append(signers, signature.AllowedSigner{Principals: []string{"nuon-render"}, Key: k.PublicKey})
		}
	}
	r.opts.Trust = &signature.AllowedSigners{Signers: signers}
	r.root = files
	return nil
}

// rootFiles reads the files under trust/root on the source commit, path
// to content; nil when main has none.
func (r *renderRun) rootFiles() (map[string][]byte, error) {
	m, err := maingit.Open(r.st, r.source)
	if err != nil {
		return nil, err
	}
	files, err := m.RootFiles()
	if err != nil {
		return nil, fmt.Errorf("trust root on main: %w", err)
	}
	return files, nil
}

// addRoot adds the trust root's files to an install's.
func (r *renderRun) addRoot(files Files) {
	maps.Copy(files, r.root)
}

// nestedEntries writes files whose names hold a "/" as the trees of
// their folders, and returns the top-level entries: the folder entries
// and the files with no folder.
func nestedEntries(b *gitobj.Batch, files map[string]plumbing.Hash) []gitobj.Entry {
	var top []gitobj.Entry
	dirs := map[string]map[string]plumbing.Hash{}
	for name, h := range files {
		dir, rest, ok := strings.Cut(name, "/")
		if !ok {
			top = append(top, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: h})
			continue
		}
		if dirs[dir] == nil {
			dirs[dir] = map[string]plumbing.Hash{}
		}
		dirs[dir][rest] = h
	}
	for dir, sub := range dirs {
		top = append(top, gitobj.Entry{Name: dir, Mode: filemode.Dir, Hash: b.Tree(nestedEntries(b, sub))})
	}
	return top
}

// trustTop is the top folder of main that holds the trust root: a change
// there renders every install, since each carries the root.
const trustTop = "trust"
