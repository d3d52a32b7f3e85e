package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// Modes of a Server.
const (
	// ModeWriter is the default: the server owns the repository, renders
	// and accepts status pushes.
	ModeWriter = "writer"
	// ModeReplica serves polls and fetches from its own mirror of the
	// writer's repository and forwards status pushes to the writer.
	ModeReplica = "replica"
)

// replicaPath is where a writer serves its whole repository, read-only, to
// its replicas (with the replica token): git smart HTTP under
// /replica/, and /replica/version, which says whether anything moved.
const replicaPath = "/replica"

// replicaRoutes adds, on a writer with a ReplicaToken, the endpoints its
// replicas refresh from.
func (s *Server) replicaRoutes() {
	s.mux.HandleFunc("GET "+replicaPath+"/version", s.replicaOnly(s.replicaVersion))
	s.mux.HandleFunc("GET "+replicaPath+"/changes", s.replicaOnly(s.replicaChanges))
	s.mux.HandleFunc("GET "+replicaPath+"/info/refs", s.replicaOnly(s.replicaAdvertise))
	s.mux.HandleFunc("POST "+replicaPath+"/git-upload-pack", s.replicaOnly(s.replicaUploadPack))
}

// replicaOnly lets through requests that carry the replica token as a
// bearer token. An install's key or the view token never does.
func (s *Server) replicaOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.ReplicaToken)) != 1 {
			s.log.Warn("replica request refused", "remote", r.RemoteAddr, "path", r.URL.Path)
			s.metrics.refused(reasonReplicaToken)
			w.Header().Set("WWW-Authenticate", `Bearer realm="nuon replica"`)
			http.Error(w, "nuon: the replica endpoint needs the replica token", http.StatusUnauthorized)
			return
		}
		next(w, r)
	}
}

// replicaVersion names the state of the writer's refs: its boot, its ref
// table's version, main, and the moves of refs outside the table (build
// requests, rollouts). A replica fetches only when it changed.
func (s *Server) replicaVersion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	fmt.Fprintf(w, "%s %d %s %d\n", s.boot, s.refs.stamp(), s.keys.mainCommit(), s.sideRefs.Load())
}

// sideRefPrefixes are where the refs outside the ref table live (main,
// the rendered and approvals branches, build requests, rollouts,
// liveness, the archive): few, listed whole at each refresh.
var sideRefPrefixes = []string{schemas.MainRef, schemas.RenderedRef, schemas.ApprovalsRef,
	schemas.BuildRefPrefix, schemas.RolloutRefPrefix, schemas.LivenessRefPrefix, schemas.ArchiveRefPrefix}

// replicaChanges tells a replica what moved since the version it names
// (?since=, as /replica/version said it): "changes", the version now, the
// table's refs set since (a zero hash: deleted) and every ref under
// sideRefPrefixes, as "<hash>\t<name>" lines; or "full" and the version
// when the table's log no longer reaches back that far (or the writer
// restarted): the replica compares every ref then.
func (s *Server) replicaChanges(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	boot, rest, _ := strings.Cut(r.URL.Query().Get("since"), " ")
	stampText, _, _ := strings.Cut(rest, " ")
	since, err := strconv.ParseUint(stampText, 10, 64)
	var names []string
	var version uint64
	ok := false
	if err == nil && boot == s.boot {
		names, version, ok = s.refs.changes(since)
	}
	if !ok {
		fmt.Fprintf(w, "full\n%s %d %s %d\n", s.boot, s.refs.stamp(), s.keys.mainCommit(), s.sideRefs.Load())
		return
	}
	// The version before the listing: a move after it is seen again.
	var b strings.Builder
	fmt.Fprintf(&b, "changes\n%s %d %s %d\n", s.boot, version, s.keys.mainCommit(), s.sideRefs.Load())
	side, err := runGit(r.Context(), s.cfg.Dir, nil, nil, append([]string{"for-each-ref", "--format=%(objectname)\t%(refname)"}, sideRefPrefixes...)...)
	if err != nil {
		http.Error(w, "nuon: list refs: "+err.Error(), http.StatusInternalServerError)
		return
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		h, _ := s.refs.get(name)
		fmt.Fprintf(&b, "%s\t%s\n", h, name)
	}
	b.Write(side)
	io.WriteString(w, b.String())
}

// sideRefMoved tells replicas that a ref outside the ref table moved (a
// build request's state, a rollout decision): their next refresh fetches
// it, where the table's version alone would not have changed.
func (s *Server) sideRefMoved() { s.sideRefs.Add(1) }

// replicaAdvertise is git upload-pack's advertisement of the whole
// repository (protocol v2 capabilities).
func (s *Server) replicaAdvertise(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("service") != "git-upload-pack" {
		http.Error(w, "nuon: replicas only fetch", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache")
	s.runUploadPack(w, r, nil, true)
}

func (s *Server) replicaUploadPack(w http.ResponseWriter, r *http.Request) {
	raw, err := body(r)
	if err != nil {
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	s.runUploadPack(w, r, raw, false)
}

// runUploadPack runs git upload-pack on the whole repository for a replica.
func (s *Server) runUploadPack(w http.ResponseWriter, r *http.Request, in []byte, advertise bool) {
	release, err := s.gitSlot(r.Context())
	if err != nil {
		return
	}
	defer release()
	args := []string{"upload-pack", "--stateless-rpc"}
	if advertise {
		args = append(args, "--advertise-refs")
	}
	cmd := exec.CommandContext(r.Context(), "git", append(args, s.cfg.Dir)...)
	cmd.Env = os.Environ()
	if p := r.Header.Get("Git-Protocol"); p != "" {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+p)
	}
	if advertise && !strings.Contains(r.Header.Get("Git-Protocol"), "version=2") {
		// Protocol v0 wants the service line first.
		w.Write(append(pkt(nil, "# service=git-upload-pack\n"), pktFlush...))
	}
	cmd.Stdin = strings.NewReader(string(in))
	cmd.Stdout = w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil && r.Context().Err() == nil {
		s.log.Error("replica upload-pack failed", "error", err, "stderr", strings.TrimSpace(stderr.String()))
	}
}

// forward sends an install's receive-pack request, already authenticated
// here, to the writer unchanged: the writer checks the install's request
// signature again (it covers the method and path, not the host) and checks
// the push (checkPush), so a replica cannot push anything an install
// could not. After an accepted push the replica refreshes at once.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, install string) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(s.writer)
			pr.Out.URL.Path, pr.Out.URL.RawPath = s.writer.Path+r.URL.Path, ""
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.Out.Host = s.writer.Host
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if r.Method == http.MethodPost {
				result := resultOK
				if resp.StatusCode != http.StatusOK {
					result = resultError
				}
				s.metrics.forwarded.WithLabelValues(result).Inc()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			s.log.Error("forward push to the writer", "install", install, "error", err)
			s.metrics.forwarded.WithLabelValues(resultError).Inc()
			http.Error(w, "nuon: the writer is unreachable; try again later", http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
	if r.Method == http.MethodPost {
		// The writer has answered in full: its ref moved, or not.
		s.kickRefresh()
	}
}

func (s *Server) kickRefresh() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Refresh brings a replica's mirror up to the writer: when the writer's
// version moved, the refs that differ are fetched and updated in one
// transaction (refresh), then the ref table follows.
func (s *Server) Refresh(ctx context.Context) error {
	s.renderMu.Lock()
	defer s.renderMu.Unlock()
	err := s.refresh(ctx)
	result := resultOK
	if err != nil {
		result = resultError
	} else {
		s.ready.Store(true)
		s.metrics.replicaLast.SetToCurrentTime()
	}
	s.metrics.replicaSyncs.WithLabelValues(result).Inc()
	return err
}

// maxNegotiationTips bounds the old tips a refresh offers the writer as
// common ground (with main's), so the command line stays short after a
// change of many refs; the newest moved refs come first.
const maxNegotiationTips = 256

// refMove is one ref that differs between the writer and the mirror;
// a zero hash is no such ref.
type refMove struct {
	name     string
	old, new plumbing.Hash
}

// refresh compares the writer's refs with the mirror's and fetches only
// the refs that moved, offering as common ground their old tips and
// main's: the writer sends the objects of the change, never a whole tree
// again because git's negotiation gave up before a tip both have (a fetch
// of every ref with --prune offered ~900 of the newest commits at
// 1,000,000 installs and got main's whole tree for a 4-object change).
// What arrived is checked to be complete (applyMoves), then the moved and
// deleted refs are set in one update-ref transaction, each checked
// against its old tip, and in the ref table.
func (s *Server) refresh(ctx context.Context) error {
	version, err := s.writerVersion(ctx)
	if err != nil {
		return err
	}
	if version == s.seen {
		return nil
	}
	u := s.writer.JoinPath(replicaPath).String()
	env := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Bearer " + s.cfg.ReplicaToken}
	var moves []refMove
	if s.seen != "" {
		moves, version, err = s.changedRefs(ctx)
		if err != nil {
			return err
		}
	}
	if moves == nil {
		if moves, err = s.allMoves(ctx, u, env); err != nil {
			return err
		}
	}
	return s.applyRefresh(ctx, u, env, version, moves)
}

// allMoves compares every ref of the writer with the mirror's: at a
// replica's start, and when the writer's log of moves no longer reaches
// back to the replica's version.
func (s *Server) allMoves(ctx context.Context, u string, env []string) ([]refMove, error) {
	remote, err := runGit(ctx, s.cfg.Dir, env, nil, "-c", "protocol.version=2", "ls-remote", u)
	if err != nil {
		return nil, fmt.Errorf("refresh from the writer: list its refs: %w", err)
	}
	// The archive too: an archived install is refused as such.
	local, err := runGit(ctx, s.cfg.Dir, nil, nil, "for-each-ref", "--format=%(objectname)\t%(refname)", "refs/heads/", schemas.ArchiveRefPrefix)
	if err != nil {
		return nil, fmt.Errorf("refresh from the writer: list the mirror's refs: %w", err)
	}
	moves := diffRefs(parseRefList(remote, replicaRefKept), parseRefList(local, replicaRefKept))
	if moves == nil {
		moves = []refMove{}
	}
	return moves, nil
}

// changedRefs asks the writer what moved since the replica's version and
// compares it with the mirror; nil moves (and no error): compare every
// ref (allMoves).
func (s *Server) changedRefs(ctx context.Context) ([]refMove, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.writer.JoinPath(replicaPath, "changes").String()+"?since="+url.QueryEscape(s.seen), nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.ReplicaToken)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("ask the writer what moved: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("ask the writer what moved: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("ask the writer what moved: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	kind, rest, _ := strings.Cut(string(b), "\n")
	version, list, _ := strings.Cut(rest, "\n")
	if kind != "changes" {
		return nil, version, nil
	}
	remote := parseRefList([]byte(list), replicaRefKept)
	// The table's refs the writer named, as the mirror has them (the
	// table is the mirror's), beside the mirror's side refs.
	local, err := runGit(ctx, s.cfg.Dir, nil, nil, append([]string{"for-each-ref", "--format=%(objectname)\t%(refname)"}, sideRefPrefixes...)...)
	if err != nil {
		return nil, "", fmt.Errorf("refresh from the writer: list the mirror's refs: %w", err)
	}
	var have strings.Builder
	have.Write(local)
	var want []refLine
	for _, r := range remote {
		if _, _, ok := splitRef(r.name); ok {
			if h, ok := s.refs.get(r.name); ok {
				fmt.Fprintf(&have, "%s\t%s\n", h, r.name)
			}
			if r.hash.IsZero() {
				continue // deleted on the writer
			}
		}
		want = append(want, r)
	}
	moves := diffRefs(want, parseRefList([]byte(have.String()), replicaRefKept))
	if moves == nil {
		moves = []refMove{}
	}
	return moves, version, nil
}

// applyRefresh sets the moves in the mirror and the ref table, then
// takes version as seen when every move was made.
func (s *Server) applyRefresh(ctx context.Context, u string, env []string, version string, moves []refMove) error {
	var err error
	complete := true
	if len(moves) > 0 {
		moves, complete, err = s.applyMoves(ctx, u, env, moves)
		if err != nil {
			return err
		}
	}
	mainMoved := s.seen == ""
	for _, m := range moves {
		if m.name == schemas.MainRef || strings.HasPrefix(m.name, schemas.ArchiveRefPrefix) {
			mainMoved = true
		}
	}
	// Archived installs, then keys, then refs: an archived install's key
	// leaves once it is known archived, and its refs after its key.
	if mainMoved {
		if main, err := revParse(ctx, s.cfg.Dir, schemas.MainRef); err == nil {
			if _, err := s.loadArchived(ctx, main); err != nil {
				return err
			}
			s.keys.reset(main)
		}
	}
	for _, m := range moves {
		if _, _, ok := splitRef(m.name); ok {
			if h, _ := s.refs.get(m.name); h != m.new {
				s.refs.set(m.name, m.new)
			}
		}
	}
	if complete {
		s.seen = version
	}
	return nil
}

// applyMoves fetches the moved refs' objects and sets the refs, and
// returns the moves it made; complete is false when a ref moved again on
// the writer while it was fetched (it is set at the next refresh).
//
// A mirror that holds main fetches by object id and checks what arrived
// by difference (fetchMoves); an empty one, at a replica's first start,
// lets git fetch every ref by name and check it.
func (s *Server) applyMoves(ctx context.Context, u string, env []string, moves []refMove) (made []refMove, complete bool, err error) {
	main, err := revParse(ctx, s.cfg.Dir, schemas.MainRef)
	if err != nil {
		if err := s.gitFetchMoves(ctx, u, env, moves); err != nil {
			return nil, false, err
		}
	} else if err := s.fetchMoves(ctx, main, moves); err != nil {
		return nil, false, err
	}
	return s.setMoves(ctx, moves)
}

// fetchMoves fetches the moves' new tips by id from the writer, with
// main and the old tips as haves (replicaFetchPack), and checks that the
// mirror then holds everything they reach (replicaConnected; git
// rev-list against every ref, as git fetch checks, when the change is
// too large to check by difference). A move it cannot vouch for fails
// the refresh: no ref moves.
func (s *Server) fetchMoves(ctx context.Context, main plumbing.Hash, moves []refMove) error {
	var wants, haves []plumbing.Hash
	var tips []replicaTip
	haves = append(haves, main)
	for _, m := range moves {
		if m.new.IsZero() {
			continue
		}
		wants = append(wants, m.new)
		tips = append(tips, replicaTip{tip: m.new, old: m.old})
		if !m.old.IsZero() && len(haves) <= maxNegotiationTips {
			haves = append(haves, m.old)
		}
	}
	if len(wants) == 0 {
		return nil
	}
	if err := s.replicaFetchPack(ctx, dedupeHashes(wants), dedupeHashes(haves)); err != nil {
		return fmt.Errorf("refresh from the writer: %w", err)
	}
	err := replicaConnected(s.objects, tips, []plumbing.Hash{main})
	if errors.Is(err, errReplicaWalk) {
		var in strings.Builder
		for _, h := range wants {
			in.WriteString(h.String() + "\n")
		}
		_, err = runGit(ctx, s.cfg.Dir, nil, strings.NewReader(in.String()), "rev-list", "--objects", "--quiet", "--stdin", "--not", "--all")
	}
	if err != nil {
		return fmt.Errorf("refresh from the writer: the fetched refs are not complete: %w", err)
	}
	return nil
}

// gitFetchMoves has git fetch the moved refs by name, with main and
// their old tips as negotiation tips.
func (s *Server) gitFetchMoves(ctx context.Context, u string, env []string, moves []refMove) error {
	var specs strings.Builder
	args := []string{"-c", "protocol.version=2", "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--stdin"}
	if main, err := revParse(ctx, s.cfg.Dir, schemas.MainRef); err == nil {
		args = append(args, "--negotiation-tip="+main.String())
	}
	tips := 0
	for _, m := range moves {
		if m.new.IsZero() {
			continue
		}
		specs.WriteString(m.name + "\n")
		if !m.old.IsZero() && tips < maxNegotiationTips {
			args = append(args, "--negotiation-tip="+m.old.String())
			tips++
		}
	}
	if specs.Len() > 0 {
		args = append(args, u)
		if _, err := runGit(ctx, s.cfg.Dir, env, strings.NewReader(specs.String()), args...); err != nil {
			return fmt.Errorf("refresh from the writer: %w", err)
		}
	}
	return nil
}

// setMoves sets the moves whose new tips the mirror holds in one
// update-ref transaction, each checked against its old tip.
func (s *Server) setMoves(ctx context.Context, moves []refMove) (made []refMove, complete bool, err error) {
	// A ref that moved again between the listing and the fetch may have
	// left the listed tip unfetched (history rewritten): keep its old tip.
	var check strings.Builder
	for _, m := range moves {
		if !m.new.IsZero() {
			check.WriteString(m.new.String() + "\n")
		}
	}
	have := map[plumbing.Hash]bool{}
	if check.Len() > 0 {
		out, err := runGit(ctx, s.cfg.Dir, nil, strings.NewReader(check.String()), "cat-file", "--batch-check=%(objectname) %(objecttype)")
		if err != nil {
			return nil, false, fmt.Errorf("refresh from the writer: check fetched tips: %w", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if h, kind, ok := strings.Cut(line, " "); ok && kind != "missing" && len(h) == 40 {
				have[plumbing.NewHash(h)] = true
			}
		}
	}
	complete = true
	var tx strings.Builder
	kept := moves[:0]
	for _, m := range moves {
		switch {
		case m.new.IsZero():
			fmt.Fprintf(&tx, "delete %s %s\n", m.name, m.old)
		case !have[m.new]:
			complete = false
			continue
		case m.old.IsZero():
			fmt.Fprintf(&tx, "create %s %s\n", m.name, m.new)
		default:
			fmt.Fprintf(&tx, "update %s %s %s\n", m.name, m.new, m.old)
		}
		kept = append(kept, m)
	}
	if tx.Len() > 0 {
		if _, err := runGit(ctx, s.cfg.Dir, nil, strings.NewReader(tx.String()), "update-ref", "--stdin"); err != nil {
			return nil, false, fmt.Errorf("refresh from the writer: set refs: %w", err)
		}
	}
	return kept, complete, nil
}

// replicaRefKept says whether a ref of the writer is mirrored: branches
// and the archive.
func replicaRefKept(name string) bool {
	return strings.HasPrefix(name, "refs/heads/") || strings.HasPrefix(name, schemas.ArchiveRefPrefix)
}

// refLine is one ref of a listing.
type refLine struct {
	name string
	hash plumbing.Hash
}

// parseRefList reads "<hash>\t<name>" or "<hash> <name>" lines
// (ls-remote, for-each-ref), keeping the names keep accepts, sorted by
// name. It is the one reader of such listings (parseRefs is its map).
func parseRefList(out []byte, keep func(string) bool) []refLine {
	var refs []refLine
	sorted := true
	for len(out) > 0 {
		line := out
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			line, out = out[:i], out[i+1:]
		} else {
			out = nil
		}
		sep := bytes.IndexAny(line, " \t")
		if sep != 40 {
			continue
		}
		h, name := line[:sep], line[sep+1:]
		if !keep(string(name)) {
			continue
		}
		var hash plumbing.Hash
		if _, err := hex.Decode(hash[:], h); err != nil {
			continue
		}
		r := refLine{string(name), hash}
		if n := len(refs); n > 0 && refs[n-1].name >= r.name {
			sorted = false
		}
		refs = append(refs, r)
	}
	if !sorted {
		sort.Slice(refs, func(i, j int) bool { return refs[i].name < refs[j].name })
	}
	return refs
}

// diffRefs returns the refs whose tip differs between want (the writer)
// and have (the mirror), both sorted by name: moved, new and deleted.
func diffRefs(want, have []refLine) []refMove {
	var moves []refMove
	i, j := 0, 0
	for i < len(want) || j < len(have) {
		switch {
		case j == len(have) || (i < len(want) && want[i].name < have[j].name):
			moves = append(moves, refMove{name: want[i].name, new: want[i].hash})
			i++
		case i == len(want) || have[j].name < want[i].name:
			moves = append(moves, refMove{name: have[j].name, old: have[j].hash})
			j++
		default:
			if want[i].hash != have[j].hash {
				moves = append(moves, refMove{name: want[i].name, old: have[j].hash, new: want[i].hash})
			}
			i++
			j++
		}
	}
	return moves
}

// writerVersion asks the writer for its version.
func (s *Server) writerVersion(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.writer.JoinPath(replicaPath, "version").String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.ReplicaToken)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask the writer: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ask the writer: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return strings.TrimSpace(string(b)), nil
}

// runReplica refreshes the mirror every PollInterval, and at once after a
// forwarded push or a webhook, until ctx ends.
func (s *Server) runReplica(ctx context.Context) error {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("refresh from the writer; serving the mirror as it is", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.wake:
		}
	}
}

// initReplica checks a replica's configuration and makes its mirror
// repository when there is none yet.
func initReplica(ctx context.Context, cfg *Config) (*url.URL, error) {
	if cfg.Writer == "" {
		return nil, errors.New("server: a replica needs the writer's URL")
	}
	if cfg.RenderKey != nil || cfg.Upstream != "" {
		return nil, errors.New("server: a replica neither renders nor mirrors upstream; the writer does")
	}
	if cfg.ReplicaToken == "" {
		return nil, errors.New("server: a replica needs the replica token")
	}
	w, err := url.Parse(cfg.Writer)
	if err != nil || (w.Scheme != "http" && w.Scheme != "https") || w.Host == "" {
		return nil, fmt.Errorf("server: writer URL %q: want http(s)://host[:port]", cfg.Writer)
	}
	w.Path = strings.TrimSuffix(w.Path, "/")
	if _, err := os.Stat(cfg.Dir); errors.Is(err, os.ErrNotExist) {
		if err := exec.CommandContext(ctx, "git", "init", "--quiet", "--bare", cfg.Dir).Run(); err != nil {
			return nil, fmt.Errorf("server: make the replica's mirror %s: %w", cfg.Dir, err)
		}
	}
	// A refresh unpacks main's new installs/ tree, and the key table
	// reads it, as on the writer: stored, neither deflates nor inflates
	// 48 MB at a million installs (1.2 s of a refresh's 2.5 s CPU).
	if err := ConfigureRepo(ctx, cfg.Dir); err != nil {
		return nil, err
	}
	return w, nil
}

// bootID names one start of a server.
func bootID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
