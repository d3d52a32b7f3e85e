package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// archivedText is what an archived install is told when it polls, fetches
// or pushes. It names nothing but the install the request claims to be.
const archivedText = "install archived: it was deleted (nuon install delete); nothing is served or accepted for it"

// archive is the current generation of one install's archive
// (schemas.ArchiveGenRef): the newest, the only one the server reads or
// moves; earlier ones are the histories of installs that had the id
// before, left as they are.
type archive struct {
	// gen is the generation's number.
	gen int
	// tips maps a live ref name (the install's InstallRef or StatusRef)
	// to the tip the generation holds for it.
	tips map[string]plumbing.Hash
}

// listArchives reads every install's archived refs in the repository at
// dir with one git for-each-ref.
func listArchives(ctx context.Context, dir string) (map[string]archive, error) {
	out, err := gitOutput(ctx, dir, nil, "for-each-ref", "--format=%(objectname) %(refname)", schemas.ArchiveRefPrefix)
	if err != nil {
		return nil, err
	}
	return parseArchives(out), nil
}

// parseArchives parses "hash refname" lines of archived refs into each
// install's current generation; a line that names no install's archived
// ref (schemas.ParseArchiveRef) is skipped.
func parseArchives(out []byte) map[string]archive {
	archives := map[string]archive{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		h, name, _ := strings.Cut(sc.Text(), " ")
		id, gen, live, ok := schemas.ParseArchiveRef(name)
		if !ok || !isHash(h) {
			continue
		}
		arch, seen := archives[id]
		switch {
		case seen && gen < arch.gen:
			continue
		case !seen || gen > arch.gen:
			arch = archive{gen: gen, tips: map[string]plumbing.Hash{}}
			archives[id] = arch
		}
		arch.tips[live] = plumbing.NewHash(h)
	}
	return archives
}

// liveRefs are an install's two refs, desired first.
func liveRefs(id string) [2]string { return [2]string{schemas.InstallRef(id), schemas.StatusRef(id)} }

// loadArchived finds the archived installs: those with refs under
// schemas.ArchiveRefPrefix that main, the main commit about to be served,
// does not name (an install created again under the same id is not
// archived), and whose live refs, when the server holds any, are not of
// an install created since the archive's current generation
// (dropRecreated). It remembers their ids for the refusals and returns
// their archives. Call it before the key table moves to main: an install's key
// then leaves only once the server knows it archived, so its agent is
// never told "unknown install" in between. When it read main's installs/
// to tell, the key table takes that reading once the archived are known.
func (s *Server) loadArchived(ctx context.Context, main plumbing.Hash) (map[string]archive, error) {
	archives, err := listArchives(ctx, s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	keys := s.keys
	if len(archives) > 0 && keys.mainCommit() != main {
		// main's installs/ through a table of its own: s.keys serves
		// the previous main until it is reset.
		keys = newKeyTable(s.cfg.Dir)
		keys.reset(main)
	}
	var held []string
	for id := range archives {
		onMain, err := keys.known(id)
		if err != nil {
			// Without main, nothing is taken for archived.
			return nil, err
		}
		if onMain {
			delete(archives, id)
			continue
		}
		if len(s.refs.own(id)) > 0 {
			held = append(held, id)
		}
	}
	if err := s.dropRecreated(ctx, archives, held); err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(archives))
	for id := range archives {
		ids[id] = true
	}
	s.archivedMu.Lock()
	s.archived = ids
	s.archivedMu.Unlock()
	if keys != s.keys {
		// What keys read is main's: the caller's reset of s.keys to main
		// then reads nothing again.
		s.keys.take(keys)
	}
	return archives, nil
}

// dropRecreated removes from archives the installs among ids (archived
// installs whose refs the server holds) whose live refs belong to an
// install created again under the id since the current generation was
// archived, and not archived yet: nuon install delete removes it from
// main before it moves its refs, so for a moment main lacks it while the
// newest generation is the one before. Its refs are then neither retired
// into that older generation nor refused as archived: they stay live
// until the archive phase writes their own generation. They are of a
// newer install when the live desired state holds commits the
// generation's does not (it was rendered since) and the live status is
// not on the generation's status history (a new agent's first status, or
// none: a status on no history of either is not taken as the archived
// install's). A status on that history is the same install's, accepted
// after the archive read the refs, and a desired state within the
// generation's is the one archived: both are retired, as before. The
// usual case, a desired ref equal to the generation's, runs no git.
func (s *Server) dropRecreated(ctx context.Context, archives map[string]archive, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	names := make([]string, 0, 2*len(ids))
	for _, id := range ids {
		lives := liveRefs(id)
		names = append(names, lives[:]...)
	}
	cur, err := s.readRefs(ctx, names...)
	if err != nil {
		return err
	}
	for _, id := range ids {
		newer, err := s.recreated(ctx, id, archives[id], cur[schemas.InstallRef(id)], cur[schemas.StatusRef(id)])
		if err != nil {
			return err
		}
		if newer {
			s.log.Info("install: its refs are newer than its archive (created again under the id, and not archived yet); kept live", "install", id, "commit", cur[schemas.InstallRef(id)].String(), "archived", schemas.ArchiveGenRef(id, archives[id].gen, schemas.InstallRef(id)))
			delete(archives, id)
		}
	}
	return nil
}

// recreated reports whether install id's live refs, desired and status
// (zero: none), are of an install created since arch (dropRecreated).
func (s *Server) recreated(ctx context.Context, id string, arch archive, desired, status plumbing.Hash) (bool, error) {
	if desired.IsZero() {
		return false, nil
	}
	switch was := arch.tips[schemas.InstallRef(id)]; {
	case was == desired:
		return false, nil
	case !was.IsZero():
		if in, err := s.isAncestor(ctx, desired, was); err != nil || in {
			return false, err
		}
	}
	// The desired state was rendered since: only a status on the
	// generation's history says the refs are still the archived install's.
	wasStatus := arch.tips[schemas.StatusRef(id)]
	if wasStatus.IsZero() || status.IsZero() {
		return true, nil
	}
	_, same, err := s.continues(ctx, wasStatus, status)
	return !same, err
}

// isArchived reports whether install was archived and main no longer
// names it.
func (s *Server) isArchived(install string) bool {
	s.archivedMu.RLock()
	defer s.archivedMu.RUnlock()
	return s.archived[install]
}

// followArchives is the step of Sync that retires the archived installs
// (loadArchived) the server still holds refs of (see "Archived installs"
// in the package doc). It tells the mirror which refs to hold back: those
// of installs whose retirement failed, to be tried again.
func (s *Server) followArchives(ctx context.Context, archives map[string]archive) error {
	var held []string
	var errs []error
	ids := make([]string, 0, len(archives))
	for id := range archives {
		if len(s.refs.own(id)) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		dropped, err := s.retire(ctx, id, archives[id])
		switch {
		case err != nil:
			s.metrics.retired.WithLabelValues(resultError).Inc()
			errs = append(errs, fmt.Errorf("install %s: %w", id, err))
			lives := liveRefs(id)
			held = append(held, lives[:]...)
		case dropped:
			s.metrics.retired.WithLabelValues(resultOK).Inc()
			s.live.forget(id)
		}
	}
	if s.mirror != nil {
		s.mirror.hold(held)
	}
	return errors.Join(errs...)
}

// move is one of an archived install's refs: live in the repository at
// cur (zero: gone), archived at was (zero: none), to be archived at to.
type move struct {
	live, archived string
	cur, was, to   plumbing.Hash
}

// retire drops an archived install's refs from the server: every commit
// they hold goes under the archive's current generation (arch) first (upstream, then here), then they
// are deleted (upstream, then here) and leave the ref table. A ref whose
// history the archive neither holds nor continues (they diverged: the
// archive was rewritten by hand, say) is kept live, here and upstream,
// and logged: folding it in would need a forced update that drops the
// archive's history. It runs under the install's push lock and the
// mirror's, so no push lands and no mirror push goes up in between.
// dropped says whether it dropped anything (a kept ref alone: no).
func (s *Server) retire(ctx context.Context, id string, arch archive) (dropped bool, err error) {
	mu := s.installLock(id)
	mu.Lock()
	defer mu.Unlock()
	if s.mirror != nil {
		s.mirror.pushMu.Lock()
		defer s.mirror.pushMu.Unlock()
	}
	lives := liveRefs(id)
	cur, err := s.readRefs(ctx, lives[:]...)
	if err != nil {
		return false, err
	}
	var moves []move
	for _, live := range lives {
		m := move{live: live, archived: schemas.ArchiveGenRef(id, arch.gen, live), cur: cur[live], was: arch.tips[live]}
		to, ok, err := s.continues(ctx, m.was, m.cur)
		if err != nil {
			return false, err
		}
		if !ok {
			s.log.Error("archived install: a ref and its archive diverged; the ref is kept, here and upstream", "install", id, "ref", live, "commit", m.cur.String(), "archived", m.was.String())
			if s.mirror != nil {
				s.mirror.add(live)
			}
			continue
		}
		m.to = to
		moves = append(moves, m)
	}
	changed := false
	if s.cfg.Upstream != "" {
		if changed, err = s.retireUpstream(ctx, id, moves); err != nil {
			return false, err
		}
	}
	// One transaction, each ref compared with what was read: git's
	// own, which takes the same locks as a push's write (writeRef).
	var tx []string
	for _, m := range moves {
		if m.to != m.was {
			tx = append(tx, fmt.Sprintf("update %s %s %s\n", m.archived, m.to, m.was))
		}
		if !m.cur.IsZero() {
			tx = append(tx, fmt.Sprintf("delete %s %s\n", m.live, m.cur))
		}
	}
	if len(tx) > 0 {
		changed = true
		in := "start\n" + strings.Join(tx, "") + "commit\n"
		if _, err := gitOutputIn(ctx, s.cfg.Dir, in, "update-ref", "--stdin"); err != nil {
			return false, fmt.Errorf("archive refs: %w", err)
		}
	}
	for _, m := range moves {
		if _, ok := s.refs.get(m.live); ok {
			changed = true
			s.refs.set(m.live, plumbing.ZeroHash)
		}
		if s.mirror != nil {
			s.mirror.forget(m.live)
		}
	}
	if changed {
		for _, m := range moves {
			s.log.Info("install archived: its ref left the server (and the upstream); its history is in the archive", "install", id, "ref", m.live, "archived", m.archived, "commit", m.to.String())
		}
	}
	return changed, nil
}

// continues decides where an archived ref ends up, given what the archive
// holds (was) and what the repository holds (cur): the newer of the two
// when one contains the other; ok is false when they diverged.
func (s *Server) continues(ctx context.Context, was, cur plumbing.Hash) (to plumbing.Hash, ok bool, err error) {
	switch {
	case cur.IsZero() || cur == was:
		return was, true, nil
	case was.IsZero():
		return cur, true, nil
	}
	if in, err := s.isAncestor(ctx, cur, was); err != nil || in {
		return was, in, err
	}
	in, err := s.isAncestor(ctx, was, cur)
	return cur, in, err
}

// retireUpstream does retire's moves on the upstream in one atomic push,
// each ref leased at the value the upstream has: the archive moves forward
// to what the server held (an agent's status accepted before the archive
// and mirrored after it, say), then the live refs are deleted, only where
// the archive now holds their commits. An upstream ref it does not hold
// stays there.
func (s *Server) retireUpstream(ctx context.Context, id string, moves []move) (pushed bool, err error) {
	if len(moves) == 0 {
		return false, nil // and no ls-remote without a name, which lists every ref
	}
	lives := make([]string, len(moves))
	for i, m := range moves {
		lives[i] = m.live
	}
	up, err := s.lsRemote(ctx, lives...)
	if err != nil {
		return false, upstreamError("list refs of", s.cfg.Upstream, s.cfg.UpstreamAuth, err)
	}
	var leases, specs []string
	for _, m := range moves {
		if m.to != m.was {
			expect := ""
			if !m.was.IsZero() {
				expect = m.was.String()
			}
			leases = append(leases, "--force-with-lease="+m.archived+":"+expect)
			specs = append(specs, m.to.String()+":"+m.archived)
		}
		u, ok := up[m.live]
		if !ok {
			continue
		}
		if in := u == m.to; !in {
			if in, _ = s.isAncestor(ctx, u, m.to); !in {
				s.log.Warn("archived install: the upstream holds a ref its archive does not; left upstream", "install", id, "ref", m.live, "commit", u.String())
				continue
			}
		}
		leases = append(leases, "--force-with-lease="+m.live+":"+u.String())
		specs = append(specs, ":"+m.live)
	}
	if len(specs) == 0 {
		return false, nil
	}
	args := append(append([]string{"push", "--quiet", "--atomic"}, leases...), s.cfg.Upstream)
	if err := gitEnv(ctx, s.cfg.Dir, s.upstreamEnv, append(args, specs...)...); err != nil {
		return false, upstreamError("archive on", s.cfg.Upstream, s.cfg.UpstreamAuth, err)
	}
	return true, nil
}

// readRefs reads refs of the repository, exactly those names; a missing
// one is absent from the map.
func (s *Server) readRefs(ctx context.Context, names ...string) (map[string]plumbing.Hash, error) {
	return forEachRef(ctx, s.cfg.Dir, func(name string) bool { return slices.Contains(names, name) }, names...)
}

// lsRemote reads refs of the upstream, exactly those names.
func (s *Server) lsRemote(ctx context.Context, names ...string) (map[string]plumbing.Hash, error) {
	out, err := gitOutput(ctx, s.cfg.Dir, s.upstreamEnv, append([]string{"-c", "protocol.version=2", "ls-remote", s.cfg.Upstream}, names...)...)
	if err != nil {
		return nil, err
	}
	return parseRefs(out, func(name string) bool { return slices.Contains(names, name) }), nil
}

// parseRefs is parseRefList as a map by name.
func parseRefs(out []byte, keep func(name string) bool) map[string]plumbing.Hash {
	refs := map[string]plumbing.Hash{}
	for _, r := range parseRefList(out, keep) {
		refs[r.name] = r.hash
	}
	return refs
}

// isAncestor reports whether commit a is b or one of its ancestors; a
// commit the repository lacks is not.
func (s *Server) isAncestor(ctx context.Context, a, b plumbing.Hash) (bool, error) {
	cmd := exec.CommandContext(ctx, "git", "merge-base", "--is-ancestor", a.String(), b.String())
	cmd.Dir = s.cfg.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, nil
	case errors.As(err, &exit) && strings.Contains(strings.ToLower(stderr.String()), "not a valid"):
		// git lacks a (an upstream ref nobody brought here).
		return false, nil
	}
	return false, fmt.Errorf("git merge-base %s %s: %w: %s", a, b, err, strings.TrimSpace(stderr.String()))
}

// gitOutput runs a git command in dir with more environment (nil: none)
// and returns its output.
func gitOutput(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	return runGit(ctx, dir, env, nil, args...)
}

// gitOutputIn runs a git command in dir with stdin.
func gitOutputIn(ctx context.Context, dir, stdin string, args ...string) ([]byte, error) {
	return runGit(ctx, dir, nil, strings.NewReader(stdin), args...)
}

// runGit runs a git command in dir with more environment (nil: none) and
// stdin (nil: none), and returns its output; an error carries what git
// said, URLs in it without credentials.
func runGit(ctx context.Context, dir string, env []string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, redactURL(strings.TrimSpace(stderr.String())))
	}
	return out, nil
}
