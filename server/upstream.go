package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// stagingDir is where, inside Dir, the server keeps the bare repository it
// fetches the upstream into.
const stagingDir = "nuon-upstream.git"

// upstreamRefs are the refs the server takes from the upstream: main, the
// operators' requests, the approvers' approvals (nuon approve) and the
// archive (nuon install delete).
var upstreamRefs = []string{schemas.MainRef, requests.Ref + "*", schemas.ApprovalsRef + "*", schemas.ArchiveRefPrefix + "*"}

// fetchUpstream brings main, the operators' requests and the archive from
// the upstream into Dir. git fetch into Dir itself cost some 2.5 s at
// 100,000 installs whatever changed: Dir holds two refs per install, and
// fetch sends the upstream haves from all of them and checks the
// connectivity of what it got against all of them (BenchmarkRenderOnChange).
// So the fetch goes into a staging repository that holds only these refs,
// and what it brought is copied into Dir as one pack of the new objects
// (loose, as fetch writes them, below 100 objects) before the refs are
// moved there.
func (s *Server) fetchUpstream(ctx context.Context) error {
	staging := filepath.Join(s.cfg.Dir, stagingDir)
	if _, err := os.Stat(staging); errors.Is(err, os.ErrNotExist) {
		if err := git(ctx, "", "init", "--quiet", "--bare", staging); err != nil {
			return fmt.Errorf("make the upstream's staging repository: %w", err)
		}
		if err := ConfigureRepo(ctx, staging); err != nil {
			return err
		}
	}
	args := []string{"fetch", "--quiet", "--no-tags", s.cfg.Upstream}
	for _, r := range upstreamRefs {
		args = append(args, "+"+r+":"+r)
	}
	if err := gitEnv(ctx, staging, s.upstreamEnv, args...); err != nil {
		return upstreamError("fetch main from", s.cfg.Upstream, s.cfg.UpstreamAuth, err)
	}
	tips, err := listRefs(ctx, staging)
	if err != nil {
		return err
	}
	old, err := listRefs(ctx, s.cfg.Dir)
	if err != nil {
		return err
	}
	var moved, want strings.Builder
	for name, h := range tips {
		if old[name] != h {
			fmt.Fprintf(&moved, "update %s %s\n", name, h)
			fmt.Fprintln(&want, h)
		}
	}
	if moved.Len() == 0 {
		return nil
	}
	// What Dir had of these refs, and staging has too, need not be sent.
	var check strings.Builder
	for _, h := range old {
		fmt.Fprintln(&check, h)
	}
	out, err := gitOutputIn(ctx, staging, check.String(), "cat-file", "--batch-check=%(objectname)")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 1 {
			fmt.Fprintln(&want, "^"+f[0])
		}
	}
	// Neither deltas nor compression: the pack goes through a pipe to
	// be unpacked, and zlib took most of the copy's time on main's 4 MB
	// installs/ tree.
	pack, err := gitOutputIn(ctx, staging, want.String(), "pack-objects", "--revs", "--stdout", "-q", "--window=0", "--compression=0")
	if err != nil {
		return err
	}
	if len(pack) < 12 || string(pack[:4]) != "PACK" {
		return errors.New("copy from the upstream's staging repository: git pack-objects wrote no pack")
	}
	switch n := binary.BigEndian.Uint32(pack[8:12]); {
	case n == 0:
	case n < 100:
		_, err = runGit(ctx, s.cfg.Dir, nil, bytes.NewReader(pack), "unpack-objects", "-q")
	default:
		_, err = runGit(ctx, s.cfg.Dir, nil, bytes.NewReader(pack), "index-pack", "--stdin")
	}
	if err != nil {
		return fmt.Errorf("copy from the upstream's staging repository: %w", err)
	}
	if _, err := gitOutputIn(ctx, s.cfg.Dir, moved.String(), "update-ref", "--stdin"); err != nil {
		return fmt.Errorf("move the upstream's refs: %w", err)
	}
	return nil
}

// listRefs lists the refs of dir that the server takes from the upstream.
func listRefs(ctx context.Context, dir string) (map[string]plumbing.Hash, error) {
	var patterns []string
	for _, r := range upstreamRefs {
		patterns = append(patterns, strings.TrimSuffix(r, "*"))
	}
	return forEachRef(ctx, dir, matchesUpstream, patterns...)
}

// matchesUpstream says whether ref is one of upstreamRefs.
func matchesUpstream(ref string) bool {
	for _, r := range upstreamRefs {
		if prefix, ok := strings.CutSuffix(r, "*"); ok && strings.HasPrefix(ref, prefix) {
			return true
		}
		if ref == r {
			return true
		}
	}
	return false
}
