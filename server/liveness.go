package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/atomicfile"
)

// Liveness: an install's signed requests are its heartbeat.
//
// Every request an agent sends the server is signed by the install's own
// key and checked (serveGit): a poll of its desired ref, a fetch, a push.
// The server keeps, in memory, the time and kind of each install's last
// such contact, and the fleet view, the metrics and `nuon status` (through
// GET /fleet/liveness) judge Unreachable from it: no signed contact for
// longer than twice the heartbeat the install's status announces
// (fleet.Install.LastSeen). An agent that talks to the server therefore
// writes no heartbeat commits, and an idle install adds nothing to the
// repository's history.
//
// Recording costs a poll one lock-free map read (sync.Map, whose read
// path takes no lock once an install is known) and a few atomic stores;
// the first contact of an install adds it under the map's lock, once.
//
// Replicas: each replica sends the writer the contacts it saw since its
// last exchange, every PollInterval, on POST /replica/liveness (the
// replica token), and takes back the writer's changed since its last
// (a sequence number, not a time, so that nothing merged from another
// replica is missed). The writer therefore holds the fleet's liveness,
// at most one PollInterval behind, and each replica the same at most two
// behind: much less than a heartbeat. Merging keeps the later time, so
// the exchange can be repeated or lost without harm.
//
// Restarts: the table is written to nuon-liveness.json in the repository
// directory every livenessSaveEvery and when the server closes (written
// whole to a temporary file and renamed, internal/atomicfile), and read
// back at start, so a restart does not turn the fleet Unreachable. A
// contact lost with a crash is at most livenessSaveEvery old, and the
// next poll brings it back.

// livenessFile is where the table is kept across restarts, in Dir.
const livenessFile = "nuon-liveness.json"

// livenessSaveEvery is how often the table is written when it changed.
const livenessSaveEvery = time.Minute

// Kinds of contact: what the install asked.
const (
	contactPoll uint32 = 1 + iota // a poll or fetch of its refs (upload-pack)
	contactPush                   // a status push (receive-pack)
)

var contactKinds = []string{"", "poll", "push"}

func contactKindName(k uint32) string {
	if int(k) < len(contactKinds) {
		return contactKinds[k]
	}
	return ""
}

func contactKindOf(name string) uint32 {
	if i := slices.Index(contactKinds, name); i > 0 {
		return uint32(i)
	}
	return 0
}

// contact is one install's last signed contact.
type contact struct {
	at   atomic.Int64  // unix nanoseconds; 0: none yet
	kind atomic.Uint32 // contactPoll, contactPush
	seq  atomic.Uint64 // the table's seq when at last moved
	// watched is set while the fleet view shows the install Unreachable:
	// its next contact tells the view to look again (revived).
	watched atomic.Bool
}

// liveness is every install's last signed contact.
type liveness struct {
	m   sync.Map      // install id → *contact
	seq atomic.Uint64 // moves with every contact that moved

	mu      sync.Mutex
	revived map[string]struct{} // watched installs seen again since the view looked

	// cursors guards saved, the seq last written to the file, and a
	// replica's exchange cursors: its own seq sent, the writer's taken.
	cursors                sync.Mutex
	saved, sent, writerSeq uint64
}

func newLiveness() *liveness { return &liveness{revived: map[string]struct{}{}} }

func (l *liveness) entry(id string) *contact {
	if c, ok := l.m.Load(id); ok {
		return c.(*contact)
	}
	c, _ := l.m.LoadOrStore(id, &contact{})
	return c.(*contact)
}

// forget drops install id's contact: the install was deleted (its refs
// retired to the archive), so the table and its file do not keep it for
// ever. A replica's later report of an older contact brings it back only
// until the writer's next retirement pass.
func (l *liveness) forget(id string) {
	if l == nil {
		return
	}
	l.m.Delete(id)
	l.mu.Lock()
	delete(l.revived, id)
	l.mu.Unlock()
}

// record notes a signed contact of install id at t. An older time than
// the one held (a replica's late report, the file read back) changes
// nothing.
func (l *liveness) record(id string, kind uint32, t time.Time) {
	if l == nil || id == "" {
		return
	}
	c, ns := l.entry(id), t.UnixNano()
	for {
		old := c.at.Load()
		if ns <= old {
			return
		}
		if c.at.CompareAndSwap(old, ns) {
			break
		}
	}
	c.kind.Store(kind)
	c.seq.Store(l.seq.Add(1))
	if c.watched.Load() && c.watched.CompareAndSwap(true, false) {
		l.mu.Lock()
		l.revived[id] = struct{}{}
		l.mu.Unlock()
	}
}

// last is install id's last signed contact; ok is false when none is
// known.
func (l *liveness) last(id string) (at time.Time, kind string, ok bool) {
	if l == nil {
		return time.Time{}, "", false
	}
	v, found := l.m.Load(id)
	if !found {
		return time.Time{}, "", false
	}
	c := v.(*contact)
	ns := c.at.Load()
	if ns == 0 {
		return time.Time{}, "", false
	}
	return time.Unix(0, ns).UTC(), contactKindName(c.kind.Load()), true
}

// watch asks to be told (revived) at install id's next contact, then
// returns the contact as it is: set before read, so a contact that lands
// in between is either returned or revives.
func (l *liveness) watch(id string) (at time.Time, kind string, ok bool) {
	if l == nil {
		return time.Time{}, "", false
	}
	l.entry(id).watched.Store(true)
	return l.last(id)
}

// unwatch withdraws watch: the install is not shown Unreachable after all.
func (l *liveness) unwatch(id string) {
	if v, ok := l.m.Load(id); ok {
		v.(*contact).watched.Store(false)
	}
}

// takeRevived returns the watched installs seen since the last call.
func (l *liveness) takeRevived() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.revived) == 0 {
		return nil
	}
	ids := make([]string, 0, len(l.revived))
	for id := range l.revived {
		ids = append(ids, id)
	}
	clear(l.revived)
	return ids
}

// withContact returns row with install id's last signed contact, if any.
func (l *liveness) withContact(row fleet.Install) fleet.Install {
	if at, kind, ok := l.last(row.Install); ok {
		row.Contact, row.ContactKind = &at, kind
	}
	return row
}

// contactRecord is one install's contact as the file, the replica
// exchange and GET /fleet/liveness carry it.
type contactRecord struct {
	Install string    `json:"install"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind,omitempty"`
}

// since returns the contacts that moved after seq, by install id.
func (l *liveness) since(seq uint64) []contactRecord {
	var out []contactRecord
	l.m.Range(func(k, v any) bool {
		c := v.(*contact)
		if ns := c.at.Load(); ns != 0 && c.seq.Load() > seq {
			out = append(out, contactRecord{Install: k.(string), At: time.Unix(0, ns).UTC(), Kind: contactKindName(c.kind.Load())})
		}
		return true
	})
	slices.SortFunc(out, func(a, b contactRecord) int { return strings.Compare(a.Install, b.Install) })
	return out
}

// merge records contacts another server saw (or the file kept).
func (l *liveness) merge(recs []contactRecord) {
	for _, r := range recs {
		if r.Install == "" || r.At.IsZero() {
			continue
		}
		l.record(r.Install, contactKindOf(r.Kind), r.At)
	}
}

// livenessState is the file's content.
type livenessState struct {
	Version  int             `json:"version"`
	Contacts []contactRecord `json:"contacts"`
}

// maxLivenessBytes bounds the file and a replica's exchange: some 60
// bytes an install, so about 4 million installs.
const maxLivenessBytes = 256 << 20

// load reads the table kept at path; a missing file is an empty table.
func (l *liveness) load(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var st livenessState
	if err := json.NewDecoder(io.LimitReader(f, maxLivenessBytes)).Decode(&st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Version != 1 {
		return fmt.Errorf("%s: version %d, want 1", path, st.Version)
	}
	l.merge(st.Contacts)
	l.cursors.Lock()
	l.saved = l.seq.Load()
	l.cursors.Unlock()
	return nil
}

// save writes the table to path when it moved since the last save.
func (l *liveness) save(path string) error {
	l.cursors.Lock()
	defer l.cursors.Unlock()
	seq := l.seq.Load()
	if seq == l.saved {
		return nil
	}
	b, err := json.Marshal(livenessState{Version: 1, Contacts: l.since(0)})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save liveness: %w", err)
	}
	l.saved = seq
	return nil
}

// livenessPath is where s keeps its table.
func (s *Server) livenessPath() string { return filepath.Join(s.cfg.Dir, livenessFile) }

// startLiveness reads the table kept across restarts and starts saving
// it (and, on a replica, exchanging it with the writer) until Close.
func (s *Server) startLiveness() {
	s.live = newLiveness()
	if err := s.live.load(s.livenessPath()); err != nil {
		// Liveness is only ever a little behind without it: polls
		// bring it back within a poll interval.
		s.log.Warn("liveness file unreadable; starting without it", "error", err)
	}
	s.liveStop, s.liveDone = make(chan struct{}), make(chan struct{})
	go s.runLiveness()
}

// stopLiveness ends the loop and saves the table once more.
func (s *Server) stopLiveness() {
	if s.liveStop == nil {
		return
	}
	s.liveOnce.Do(func() {
		close(s.liveStop)
		<-s.liveDone
		if err := s.live.save(s.livenessPath()); err != nil {
			s.log.Warn("save liveness", "error", err)
		}
	})
}

func (s *Server) runLiveness() {
	defer close(s.liveDone)
	save := time.NewTicker(livenessSaveEvery)
	defer save.Stop()
	var exchange <-chan time.Time
	if s.writer != nil {
		t := time.NewTicker(s.cfg.PollInterval)
		defer t.Stop()
		exchange = t.C
	}
	for {
		select {
		case <-s.liveStop:
			return
		case <-save.C:
			if err := s.live.save(s.livenessPath()); err != nil {
				s.log.Warn("save liveness", "error", err)
			}
		case <-exchange:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := s.exchangeLiveness(ctx); err != nil {
				s.log.Warn("send liveness to the writer", "error", err)
			}
			cancel()
		}
	}
}

// exchangeLiveness sends the writer the contacts this replica saw since
// the last exchange and merges the writer's.
func (s *Server) exchangeLiveness(ctx context.Context) error {
	l := s.live
	l.cursors.Lock()
	sent, since := l.sent, l.writerSeq
	l.cursors.Unlock()
	seq := l.seq.Load()
	body, err := json.Marshal(l.since(sent))
	if err != nil {
		return err
	}
	u := s.writer.JoinPath(replicaPath, "liveness")
	u.RawQuery = "since=" + strconv.FormatUint(since, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.ReplicaToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var back livenessExchange
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLivenessBytes)).Decode(&back); err != nil {
		return fmt.Errorf("the writer's answer: %w", err)
	}
	l.merge(back.Contacts)
	l.cursors.Lock()
	l.sent, l.writerSeq = seq, back.Seq
	l.cursors.Unlock()
	return nil
}

// livenessExchange is the writer's answer to a replica: the contacts
// that moved after the replica's cursor, and the cursor to send next.
type livenessExchange struct {
	Seq      uint64          `json:"seq"`
	Contacts []contactRecord `json:"contacts"`
}

// replicaLiveness merges a replica's contacts and answers the writer's
// that moved since the replica's cursor.
func (s *Server) replicaLiveness(w http.ResponseWriter, r *http.Request) {
	since, err := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	if err != nil && r.URL.Query().Get("since") != "" {
		http.Error(w, "nuon: since: want a number", http.StatusBadRequest)
		return
	}
	var recs []contactRecord
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLivenessBytes)).Decode(&recs); err != nil {
		http.Error(w, "nuon: liveness: "+err.Error(), http.StatusBadRequest)
		return
	}
	// A replica reports only what it checked; the time is bounded by
	// the writer's own clock so that no report lives in the future.
	now := s.cfg.Now()
	for i := range recs {
		if recs[i].At.After(now) {
			recs[i].At = now
		}
	}
	s.live.merge(recs)
	seq := s.live.seq.Load()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(livenessExchange{Seq: seq, Contacts: s.live.since(since)})
}

// livenessReport is GET /fleet/liveness: every install's last signed
// contact (or one's, with ?install=), for `nuon status --server`.
type livenessReport struct {
	Now      time.Time       `json:"now"`
	Contacts []contactRecord `json:"contacts"`
}

func (s *Server) serveLiveness(w http.ResponseWriter, r *http.Request) {
	rep := livenessReport{Now: s.cfg.Now().UTC(), Contacts: []contactRecord{}}
	if id := r.URL.Query().Get("install"); id != "" {
		if at, kind, ok := s.live.last(id); ok {
			rep.Contacts = append(rep.Contacts, contactRecord{Install: id, At: at, Kind: kind})
		}
	} else {
		rep.Contacts = append(rep.Contacts, s.live.since(0)...)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// livenessRoutes adds GET /fleet/liveness for operators (the view
// token) and, on a writer with replicas, POST /replica/liveness.
func (s *Server) livenessRoutes() {
	if s.cfg.ViewToken != "" {
		s.mux.HandleFunc("GET /fleet/liveness", s.view.operator(s.serveLiveness))
	}
	if s.cfg.Mode == ModeWriter && s.cfg.ReplicaToken != "" {
		s.mux.HandleFunc("POST "+replicaPath+"/liveness", s.replicaOnly(s.replicaLiveness))
	}
}

// LastContact is install id's last signed contact as this server knows
// it (on a replica, its own and the writer's): when, and what it asked
// ("poll" or "push"); ok is false when none is known. For the rollout
// controller and others that judge an install alive.
func (s *Server) LastContact(id string) (at time.Time, kind string, ok bool) {
	return s.live.last(id)
}

// contactOf is the kind of contact a git request is.
// A poll's query is not parsed (url.Values is an allocation a poll need
// not make): only info/refs has one.
func contactOf(endpoint string, r *http.Request) uint32 {
	if endpoint == "git-receive-pack" || (endpoint == "info/refs" && strings.Contains(r.URL.RawQuery, "service=git-receive-pack")) {
		return contactPush
	}
	return contactPoll
}
