package server

import (
	"bytes"
	"container/heap"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// viewEntry is one install in the fleet index: what was read of its refs
// (shared with the read cache, never changed) and its state at the
// index's time, which only the index changes, under the view's lock.
type viewEntry struct {
	in     *viewInstall
	row    *fleet.Install // in.Status as it stands at the index's time; nil: no status
	state  string         // the CLI's STATE word, or Unreported
	rank   int            // problems first: see stateRank
	late   time.Time      // when the heartbeat turns late; zero: never, or already
	labels map[string]string
	gone   bool // replaced or removed: a late-heap item for it is void

	// What the list's filters compare, as the index's symbols (see
	// fleetIndex.syms), set when the entry joins the index.
	stateSym, channelSym uint32
	comps                []compSym
	traits               uint8
}

// compSym is one reported component as symbols.
type compSym struct{ name, version, phase uint32 }

// Traits of an entry the list filters on (fleetQuery.Is).
const (
	traitOutOfSync uint8 = 1 << iota
	traitUnverified
	traitDrifted
	traitCorrected
	traitAwaiting // a component's plan waits for approval
)

// Ranks of the problems-first order: what needs a person comes first.
const (
	rankFailing = iota // Failed, Refused, Degraded, or its status unreadable
	rankUnreachable
	rankStale
	rankUnverified
	rankDrifted // a component's drift not corrected
	rankDeferred
	rankBusy // reported, not Ready: applying, pending
	rankBehind
	rankUnreported
	rankReady
)

// newEntry makes in's entry as it stands at now. With live (the server's
// liveness table), the install is Unreachable only when its last signed
// contact is late too; an entry shown Unreachable is watched, so that its
// next contact makes the index look again (fleetIndex.advance).
func newEntry(in *viewInstall, labels map[string]string, now time.Time, live *liveness) *viewEntry {
	e := &viewEntry{in: in, labels: labels, state: phaseUnreported}
	if in.Status != nil {
		st := live.withContact(*in.Status)
		row := st.At(now)
		if row.Unreachable && live != nil {
			// Watch first, then read again: a contact in between is
			// seen here or revives the entry.
			if at, kind, ok := live.watch(in.ID); ok && (st.Contact == nil || at.After(*st.Contact)) {
				st.Contact, st.ContactKind = &at, kind
				if row = st.At(now); !row.Unreachable {
					live.unwatch(in.ID)
				}
			}
		}
		e.row, e.state = &row, row.State
		if sameRow(in.Status, &row) {
			e.row = in.Status // one copy, not two
		}
		if e.state == "" {
			e.state = phaseUnreported
		}
		if every, err := time.ParseDuration(row.HeartbeatEvery); err == nil && every > 0 && !row.Unreachable {
			e.late = row.LastSeen().Add(lateFactor*every + time.Nanosecond)
		}
	}
	e.rank = e.stateRank()
	return e
}

// sameRow says whether row is r as it stands (At and the liveness table
// change only these fields).
func sameRow(r, row *fleet.Install) bool {
	return r.State == row.State && r.Unreachable == row.Unreachable && r.Contact == row.Contact && r.ContactKind == row.ContactKind
}

// lateFactor mirrors package fleet's: heartbeats a status may miss
// before the install is Unreachable. newEntry only schedules when to ask
// fleet.Install.At again; At decides.
const lateFactor = 2

func (e *viewEntry) stateRank() int {
	if e.in.Err != "" {
		return rankFailing
	}
	r := e.row
	if r == nil {
		return rankUnreported
	}
	switch e.state {
	case schemas.InstallReady:
	case schemas.InstallRefused, schemas.InstallDegraded, schemas.PhaseFailed:
		return rankFailing
	case fleet.StateUnreachable:
		return rankUnreachable
	case fleet.StateStale:
		return rankStale
	case fleet.StateHeld, fleet.StateWaiting:
		return rankDeferred
	default:
		return rankBusy
	}
	switch {
	case !r.Verified:
		return rankUnverified
	case e.openDrift():
		return rankDrifted
	case !r.InSync || r.Generation < e.in.Desired.Generation:
		return rankBehind
	}
	return rankReady
}

// openDrift says whether a component drifted and was not corrected.
func (e *viewEntry) openDrift() bool {
	for _, c := range e.row.Components {
		if len(c.Drift) > 0 && !c.Corrected {
			return true
		}
	}
	return false
}

// inSync is the CLI's SYNCED: the agent reported on the desired ref the
// install has now.
func (e *viewEntry) inSync() bool { return e.row != nil && e.row.InSync }

func compareID(a, b *viewEntry) int { return strings.Compare(a.in.ID, b.in.ID) }

func compareProblems(a, b *viewEntry) int {
	if a.rank != b.rank {
		return a.rank - b.rank
	}
	return compareID(a, b)
}

// fleetSummary is what a release manager asks first, kept as counts that
// move with each install that changes, never recounted per request.
type fleetSummary struct {
	Installs int
	States   map[string]int            // by the CLI's STATE word
	Versions map[string]map[string]int // component → version it runs → installs
	Failing  map[string]int            // component → installs where it failed
	Channels map[string]int
	// OutOfSync counts installs whose agent has not reported on their
	// desired ref; Drifted and Corrected, installs with drift left as
	// found or corrected; Unverified, statuses not signed by the
	// install's key.
	OutOfSync, Drifted, Corrected, Unverified int
	// Awaiting counts installs where a component's saved plan waits for
	// a signed approval (nuon approve).
	Awaiting int
}

func newSummary() fleetSummary {
	return fleetSummary{States: map[string]int{}, Versions: map[string]map[string]int{}, Failing: map[string]int{}, Channels: map[string]int{}}
}

// add adds e's counts times d (1 or -1).
func (s *fleetSummary) add(e *viewEntry, d int) {
	s.Installs += d
	bump(s.States, e.state, d)
	if ch := e.in.Desired.Channel; ch != "" {
		bump(s.Channels, ch, d)
	}
	r := e.row
	if r == nil {
		return
	}
	if !r.InSync {
		s.OutOfSync += d
	}
	if !r.Verified {
		s.Unverified += d
	}
	drifted, corrected := false, false
	if awaitsApproval(r) {
		s.Awaiting += d
	}
	for _, c := range r.Components {
		if c.Version != "" {
			m := s.Versions[c.Name]
			if m == nil {
				m = map[string]int{}
				s.Versions[c.Name] = m
			}
			bump(m, c.Version, d)
			if len(m) == 0 {
				delete(s.Versions, c.Name)
			}
		}
		if c.Phase == schemas.PhaseFailed {
			bump(s.Failing, c.Name, d)
		}
		if len(c.Drift) > 0 {
			if c.Corrected {
				corrected = true
			} else {
				drifted = true
			}
		}
	}
	if drifted {
		s.Drifted += d
	} else if corrected {
		s.Corrected += d
	}
}

// awaitsApproval says whether a component of r waits for an approval of
// its saved plan, whatever the install's state (another component may be
// failing).
func awaitsApproval(r *fleet.Install) bool {
	for _, c := range r.Components {
		if c.Phase == schemas.PhaseAwaitingApproval {
			return true
		}
	}
	return false
}

func bump(m map[string]int, k string, d int) {
	m[k] += d
	if m[k] == 0 {
		delete(m, k)
	}
}

// clone copies s for a page, outside the view's lock.
func (s fleetSummary) clone() fleetSummary {
	out := s
	out.States, out.Failing, out.Channels = maps.Clone(s.States), maps.Clone(s.Failing), maps.Clone(s.Channels)
	out.Versions = make(map[string]map[string]int, len(s.Versions))
	for c, m := range s.Versions {
		out.Versions[c] = maps.Clone(m)
	}
	return out
}

// fleetIndex is the fleet view's index: the summary and two orders of
// every install (by id, and problems first), moved one install at a time
// as refs move and heartbeats turn late.
type fleetIndex struct {
	summary fleetSummary
	byID    []*viewEntry
	order   []*viewEntry // problems first
	entries map[string]*viewEntry
	late    lateHeap
	now     time.Time // the index's time: states are as they stand at it
	// live is the server's liveness table (nil: status commits alone).
	live *liveness
	// syms numbers every word the filters compare (states, channels,
	// component names, versions, phases) from 1; it only grows, as
	// far as the fleet's variety of words.
	syms map[string]uint32
	// words interns what the entries keep (viewWords.slim).
	words *viewWords
	// times are the entries' status times, for the metrics' status ages.
	times statusTimes
}

func newFleetIndex() *fleetIndex {
	return &fleetIndex{summary: newSummary(), entries: map[string]*viewEntry{}, syms: map[string]uint32{}, words: newViewWords()}
}

func (x *fleetIndex) sym(s string) uint32 {
	if s == "" {
		return 0
	}
	id, ok := x.syms[s]
	if !ok {
		id = uint32(len(x.syms) + 1)
		x.syms[s] = id
	}
	return id
}

// compact sets what the filters compare of e.
func (x *fleetIndex) compact(e *viewEntry) {
	e.stateSym, e.channelSym = x.sym(e.state), x.sym(e.in.Desired.Channel)
	r := e.row
	if r == nil {
		return
	}
	e.comps = make([]compSym, len(r.Components))
	for i, c := range r.Components {
		e.comps[i] = compSym{x.sym(c.Name), x.sym(c.Version), x.sym(c.Phase)}
	}
	if !r.InSync {
		e.traits |= traitOutOfSync
	}
	if !r.Verified {
		e.traits |= traitUnverified
	}
	if awaitsApproval(r) {
		e.traits |= traitAwaiting
	}
	if e.openDrift() {
		e.traits |= traitDrifted
	} else {
		for _, c := range r.Components {
			if c.Corrected && len(c.Drift) > 0 {
				e.traits |= traitCorrected
			}
		}
	}
}

// bulkFactor: when more than 1/bulkFactor of the fleet changes at once
// (the first read, a render of everything), the orders are sorted anew
// rather than moved one install at a time.
const bulkFactor = 8

// apply replaces the entries of changed ids (nil: the install is gone).
func (x *fleetIndex) apply(changed map[string]*viewEntry) {
	bulk := len(changed) > len(x.entries)/bulkFactor
	for id, e := range changed {
		if old := x.entries[id]; old != nil {
			old.gone = true
			x.summary.add(old, -1)
			if !bulk {
				x.byID = removeEntry(x.byID, old, compareID)
				x.order = removeEntry(x.order, old, compareProblems)
				if old.row != nil {
					x.times.remove(statusMillis(old.row.Time))
				}
			}
			delete(x.entries, id)
		}
		if e == nil {
			continue
		}
		x.entries[id] = e
		x.compact(e)
		x.summary.add(e, 1)
		if !e.late.IsZero() {
			heap.Push(&x.late, e)
		}
		if !bulk {
			x.byID = insertEntry(x.byID, e, compareID)
			x.order = insertEntry(x.order, e, compareProblems)
			if e.row != nil {
				x.times.add(statusMillis(e.row.Time))
			}
		}
	}
	if bulk {
		x.byID = slices.SortedFunc(maps.Values(x.entries), compareID)
		x.order = slices.Clone(x.byID)
		slices.SortStableFunc(x.order, compareProblems)
		times := make([]int64, 0, len(x.byID))
		for _, e := range x.byID {
			if e.row != nil {
				times = append(times, statusMillis(e.row.Time))
			}
		}
		x.times.reset(times)
	}
}

// advance brings the index to now: installs whose heartbeat turned late
// since become Unreachable, in the order of their deadlines (an install
// whose signed contact is newer only moves its deadline), and those shown
// Unreachable that made a signed contact since are not any more.
func (x *fleetIndex) advance(now time.Time) {
	if now.After(x.now) {
		x.now = now
	}
	// Installs shown Unreachable that made a signed contact since.
	if ids := x.live.takeRevived(); len(ids) > 0 {
		changed := map[string]*viewEntry{}
		for _, id := range ids {
			if e := x.entries[id]; e != nil {
				changed[id] = newEntry(e.in, e.labels, x.now, x.live)
			}
		}
		x.apply(changed)
	}
	for len(x.late) > 0 && !x.late[0].late.After(x.now) {
		e := heap.Pop(&x.late).(*viewEntry)
		if e.gone {
			continue
		}
		x.apply(map[string]*viewEntry{e.in.ID: newEntry(e.in, e.labels, x.now, x.live)})
	}
}

// relabel sets every install's labels as main has them; labels move
// neither counts nor orders.
func (x *fleetIndex) relabel(l *viewLabels) {
	for id, e := range x.entries {
		e.labels = l.of(id)
	}
}

func insertEntry(s []*viewEntry, e *viewEntry, cmp func(a, b *viewEntry) int) []*viewEntry {
	i, _ := slices.BinarySearchFunc(s, e, cmp)
	return slices.Insert(s, i, e)
}

func removeEntry(s []*viewEntry, e *viewEntry, cmp func(a, b *viewEntry) int) []*viewEntry {
	if i, ok := slices.BinarySearchFunc(s, e, cmp); ok && s[i] == e {
		return slices.Delete(s, i, i+1)
	}
	return s
}

// lateHeap orders entries by when their heartbeat turns late.
type lateHeap []*viewEntry

func (h lateHeap) Len() int           { return len(h) }
func (h lateHeap) Less(i, j int) bool { return h[i].late.Before(h[j].late) }
func (h lateHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lateHeap) Push(x any)        { *h = append(*h, x.(*viewEntry)) }
func (h *lateHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// viewLabels reads each install's labels from installs/<id>.yaml on main,
// parsing only files whose blob it has not met: blobs are content, so a
// blob's labels never change, and the saved index keeps them by blob
// (view_cache.go) for the next start.
type viewLabels struct {
	main  plumbing.Hash
	blobs map[string]plumbing.Hash // install id → blob of its yaml
	// byBlob has the labels of every blob of blobs (nil: none); equal
	// label sets share one map.
	byBlob map[plumbing.Hash]map[string]string
	// parsed counts the blobs read and parsed, for tests and benchmarks.
	parsed int
}

// of is the labels of install id on l's main; nil: none.
func (l *viewLabels) of(id string) map[string]string {
	h, ok := l.blobs[id]
	if !ok {
		return nil
	}
	return l.byBlob[h]
}

// seed gives l the labels of blobs read before (the saved index), so that
// read parses only the others.
func (l *viewLabels) seed(saved map[plumbing.Hash]map[string]string) {
	if len(saved) == 0 {
		return
	}
	shared := map[string]map[string]string{}
	if l.byBlob == nil {
		l.byBlob = make(map[plumbing.Hash]map[string]string, len(saved))
	}
	for h, m := range saved {
		l.byBlob[h] = internLabels(shared, m)
	}
}

// blob is the blob of install id's file on l's main; zero: none.
func (l *viewLabels) blob(id string) plumbing.Hash { return l.blobs[id] }

// read moves l to main and returns the installs whose file on main was
// added, changed or removed since the last main: only their keys and
// labels may have changed. The files it has not met are read in the
// order of main's installs/ folder, the order of their pack.
func (l *viewLabels) read(st storer.EncodedObjectStorer, main plumbing.Hash) []string {
	if main == l.main && l.blobs != nil {
		return nil
	}
	l.main = main
	var order []plumbing.Hash
	blobs := map[string]plumbing.Hash{}
	if h, err := installsTreeOf(st, main); err == nil && !h.IsZero() {
		if raw, err := gitobj.ReadTreeShared(st, h, 0); err == nil {
			blobs = make(map[string]plumbing.Hash, len(raw)/48)
			order = make([]plumbing.Hash, 0, len(raw)/48)
			for data := raw; len(data) > 0; {
				e, rest, ok := gitobj.NextRawEntry(data)
				if !ok {
					break
				}
				data = rest
				if id, ok := bytes.CutSuffix(e.Name, []byte(".yaml")); ok && e.Mode.IsFile() {
					blobs[string(id)] = e.Hash()
					order = append(order, e.Hash())
				}
			}
		}
	}
	var moved []string
	for id, h := range blobs {
		if old, ok := l.blobs[id]; !ok || old != h {
			moved = append(moved, id)
		}
	}
	for id := range l.blobs {
		if _, ok := blobs[id]; !ok {
			moved = append(moved, id)
		}
	}
	// Keep the labels of the blobs main has, and no others.
	byBlob := make(map[plumbing.Hash]map[string]string, min(len(blobs), len(l.byBlob)+len(moved)))
	shared := map[string]map[string]string{} // label sets parsed now
	for _, h := range order {
		if _, ok := byBlob[h]; ok {
			continue
		}
		m, ok := l.byBlob[h]
		if !ok {
			m = internLabels(shared, parseLabels(st, h))
			l.parsed++
		}
		byBlob[h] = m
	}
	l.blobs, l.byBlob = blobs, byBlob
	return moved
}

// internLabels returns the map of shared equal to m, adding m when none
// is: a fleet has few label sets, so 1,000,000 installs share a few maps.
func internLabels(shared map[string]map[string]string, m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	if s, ok := shared[b.String()]; ok {
		return s
	}
	shared[b.String()] = m
	return m
}

// parseLabels reads the labels of one installs/<id>.yaml; a file that does
// not parse has none.
func parseLabels(st storer.EncodedObjectStorer, h plumbing.Hash) map[string]string {
	data, err := gitobj.ReadBlob(st, h, maxInstallYAML)
	if err != nil {
		return nil
	}
	return yamlLabels(data)
}

// yamlLabels is the labels of an install's file; a file that does not
// parse has none. A file that cannot hold a labels key is not parsed.
func yamlLabels(data []byte) map[string]string {
	if !mayHoldLabels(data) {
		return nil
	}
	return parseYAMLLabels(data)
}

// mayHoldLabels says whether data may have a labels key. YAML spells a
// key with other bytes only through escapes (a backslash in a quoted
// scalar) or another encoding (UTF-16 and UTF-32 have NULs or a byte
// order mark): without those, no "labels" bytes means no labels key, and
// the file has no labels whether or not it parses (FuzzYAMLLabels).
func mayHoldLabels(data []byte) bool {
	return bytes.Contains(data, []byte("labels")) ||
		bytes.IndexByte(data, '\\') >= 0 ||
		bytes.IndexByte(data, 0) >= 0 ||
		bytes.HasPrefix(data, []byte{0xef, 0xbb, 0xbf}) ||
		bytes.HasPrefix(data, []byte{0xfe, 0xff}) ||
		bytes.HasPrefix(data, []byte{0xff, 0xfe})
}

// parseYAMLLabels parses data for its labels.
func parseYAMLLabels(data []byte) map[string]string {
	var in struct {
		Labels map[string]string `yaml:"labels"`
	}
	if yaml.Unmarshal(data, &in) != nil || len(in.Labels) == 0 {
		return nil
	}
	return in.Labels
}

// maxInstallYAML bounds what the view reads of one installs/<id>.yaml.
const maxInstallYAML = 1 << 20

// viewWords interns what the index keeps of installs that repeats across
// them: words (phases, states, versions, component names, channels,
// heartbeats), desired version sets and reported component lists. A
// fleet of 1,000,000 installs on a few releases holds each once, not
// 1,000,000 times. It only grows, as far as the fleet's variety; what is
// not bounded by it (errors, drift, health messages) is not interned.
type viewWords struct {
	words    map[string]string
	versions map[string]map[string]string
	comps    map[string][]fleet.Component
	health   map[string]*schemas.Health
}

func newViewWords() *viewWords {
	return &viewWords{words: map[string]string{}, versions: map[string]map[string]string{},
		comps: map[string][]fleet.Component{}, health: map[string]*schemas.Health{}}
}

// word returns the interned s.
func (w *viewWords) word(s string) string {
	if s == "" {
		return ""
	}
	if k, ok := w.words[s]; ok {
		return k
	}
	w.words[s] = s
	return s
}

// slim returns in as the index keeps it: what the list, its filters, the
// summary and the metrics read, its words interned; the rest (the commit
// ids, each component's digests, outputs, spec, plan and health
// resources, each drift's details) is read again for an install's page
// (view.install). in is not changed.
func (w *viewWords) slim(in *viewInstall) *viewInstall {
	out := &viewInstall{ID: in.ID, desiredH: in.desiredH, statsH: in.statsH, file: in.file, keyless: in.keyless, key: in.key, Err: in.Err}
	d := in.Desired
	out.Desired = fleet.Desired{Generation: d.Generation, Channel: w.word(d.Channel), Deleted: d.Deleted, Time: d.Time,
		Versions: internLabels(w.versions, d.Versions)}
	if r := in.Status; r != nil {
		s := *r
		s.Install = in.ID
		s.Commit, s.Desired, s.Applied, s.Rendered = "", "", "", ""
		s.Phase, s.State, s.HeartbeatEvery = w.word(r.Phase), w.word(r.State), w.word(r.HeartbeatEvery)
		s.ContactKind, s.Artifacts = w.word(r.ContactKind), w.word(r.Artifacts)
		s.Components = w.components(r.Components)
		out.Status = &s
	}
	return out
}

// components returns what the index keeps of cs: each component's name,
// version, phase, error, health (its status and message), drift (as many
// as found, without their details) and whether it was corrected. A list
// without errors, drift or health messages is shared by every install
// that reports it.
func (w *viewWords) components(cs []fleet.Component) []fleet.Component {
	if len(cs) == 0 {
		return cs
	}
	out := make([]fleet.Component, len(cs))
	plain := true
	var key strings.Builder
	for i, c := range cs {
		s := schemas.ComponentStatus{Phase: w.word(c.Phase), Version: w.word(c.Version), Error: c.Error, Corrected: c.Corrected}
		if c.Health != nil {
			s.Health = &schemas.Health{Status: w.word(c.Health.Status), Message: c.Health.Message}
		}
		if len(c.Drift) > 0 {
			s.Drift = make([]schemas.ResourceDrift, len(c.Drift))
		}
		out[i] = fleet.Component{Name: w.word(c.Name), ComponentStatus: s}
		if c.Error != "" || len(c.Drift) > 0 || c.Corrected || c.Health != nil && c.Health.Message != "" {
			plain = false
			continue
		}
		health := "\x01"
		if c.Health != nil {
			health = c.Health.Status
		}
		for _, f := range []string{c.Name, c.Version, c.Phase, health} {
			key.WriteString(f)
			key.WriteByte(0)
		}
	}
	if !plain {
		return out
	}
	if shared, ok := w.comps[key.String()]; ok {
		return shared
	}
	for i := range out {
		if h := out[i].Health; h != nil {
			if shared, ok := w.health[h.Status]; ok {
				out[i].Health = shared
			} else {
				w.health[h.Status] = h
			}
		}
	}
	w.comps[key.String()] = out
	return out
}
