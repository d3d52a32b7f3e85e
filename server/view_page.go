package server

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/schemas"
)

// pageSize is how many installs one page of the fleet list shows: a page
// stays a few hundred kilobytes at most however large the fleet.
const pageSize = 100

// Bounds on what one row shows; the install's own page shows all of it.
const (
	rowComponents = 12  // components listed in a row
	rowProblems   = 4   // problems listed in a row
	rowText       = 240 // characters of one error or reason
	summaryTop    = 8   // versions listed per component, components failing
)

// fleetQuery is what the fleet list is asked for: every field is a query
// parameter, so a filtered list is a link to share.
type fleetQuery struct {
	// Q is an install id prefix, or a label as key=value.
	Q string
	// State is the install's state, in the CLI's words.
	State   string
	Channel string
	// Component keeps installs that run it; with Version, that run this
	// version of it; with Phase, where it is in this phase.
	Component, Version, Phase string
	// Is keeps installs with one trait: out-of-sync, drifted, corrected,
	// unverified, awaiting-approval.
	Is string
	// Sort is "problems" (the default: what needs a person first) or "id".
	Sort string
	Page int // from 1
}

// Traits a list can be narrowed to (fleetQuery.Is).
const (
	isOutOfSync  = "out-of-sync"
	isDrifted    = "drifted"
	isCorrected  = "corrected"
	isUnverified = "unverified"
	isAwaiting   = "awaiting-approval"
	sortID       = "id"
	sortProblems = "problems"
)

func parseFleetQuery(v url.Values) fleetQuery {
	q := fleetQuery{Q: strings.TrimSpace(v.Get("q")), State: v.Get("state"), Channel: v.Get("channel"),
		Component: v.Get("component"), Version: v.Get("version"), Phase: v.Get("phase"), Is: v.Get("is"), Sort: v.Get("sort")}
	if q.Sort != sortID {
		q.Sort = sortProblems
	}
	q.Page, _ = strconv.Atoi(v.Get("page"))
	q.Page = max(q.Page, 1)
	return q
}

// Filtered says whether the query narrows the list.
func (q fleetQuery) Filtered() bool {
	return q.Q != "" || q.State != "" || q.Channel != "" || q.Component != "" || q.Version != "" || q.Phase != "" || q.Is != ""
}

// URL is the list's address for the query, with one parameter changed
// (key, value pairs; an empty value drops it) and the page back to 1
// unless page is among them.
func (q fleetQuery) URL(kv ...string) string {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("q", q.Q)
	set("state", q.State)
	set("channel", q.Channel)
	set("component", q.Component)
	set("version", q.Version)
	set("phase", q.Phase)
	set("is", q.Is)
	if q.Sort == sortID {
		v.Set("sort", sortID)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Del(kv[i])
		set(kv[i], kv[i+1])
	}
	if v.Get("sort") == sortProblems {
		v.Del("sort")
	}
	if v.Get("page") == "1" {
		v.Del("page")
	}
	if len(v) == 0 {
		return "/fleet"
	}
	return "/fleet?" + v.Encode()
}

// matcher is a query compiled against an index: its words as the
// index's symbols, so that walking the fleet compares numbers.
type matcher struct {
	none                             bool // a word the fleet does not have: nothing matches
	prefix, labelKey, labelValue     string
	label                            bool
	state, channel, comp, ver, phase uint32
	is                               uint8
}

// compile turns q into a matcher for x's entries.
func (x *fleetIndex) compile(q fleetQuery) matcher {
	var m matcher
	sym := func(s string) uint32 {
		if s == "" {
			return 0
		}
		id, ok := x.syms[s]
		if !ok {
			m.none = true
		}
		return id
	}
	m.state, m.channel, m.comp, m.ver, m.phase = sym(q.State), sym(q.Channel), sym(q.Component), sym(q.Version), sym(q.Phase)
	if k, v, ok := strings.Cut(q.Q, "="); ok {
		m.label, m.labelKey, m.labelValue = true, k, v
	} else {
		m.prefix = q.Q
	}
	switch q.Is {
	case "":
	case isOutOfSync:
		m.is = traitOutOfSync
	case isUnverified:
		m.is = traitUnverified
	case isDrifted:
		m.is = traitDrifted
	case isCorrected:
		m.is = traitCorrected
	case isAwaiting:
		m.is = traitAwaiting
	default:
		m.none = true
	}
	return m
}

// match says whether the list keeps e.
func (m *matcher) match(e *viewEntry) bool {
	switch {
	case m.none:
		return false
	case m.state != 0 && e.stateSym != m.state:
		return false
	case m.channel != 0 && e.channelSym != m.channel:
		return false
	case m.is != 0 && e.traits&m.is == 0:
		return false
	case m.prefix != "" && !strings.HasPrefix(e.in.ID, m.prefix):
		return false
	}
	if m.label {
		if v, ok := e.labels[m.labelKey]; !ok || v != m.labelValue {
			return false
		}
	}
	if m.comp == 0 && m.ver == 0 && m.phase == 0 {
		return true
	}
	for _, c := range e.comps {
		if (m.comp == 0 || c.name == m.comp) && (m.ver == 0 || c.version == m.ver) && (m.phase == 0 || c.phase == m.phase) {
			return true
		}
	}
	return false
}

// fleetList is the fleet page: the summary and one page of the list.
type fleetList struct {
	Summary fleetSummary
	Query   fleetQuery
	Rows    []listRow
	Matches int // installs the query keeps
	Pages   int
	From    int // 1-based position of the first row
	Main    string
	// States, Channels, Components are the filters' choices.
	States, Channels, Components []string
}

// listRow is one install in the list, copied out of the index.
type listRow struct {
	ID       string
	Channel  string
	Labels   []string
	State    string
	Reason   string
	Reported bool
	InSync   bool
	// Generation is the one the agent reported on; Desired, the one
	// rendered now.
	Generation, Desired int64
	Components          []listComponent
	More                int // components not listed
	Problems            []string
	Time                time.Time
	Quiet               bool // no status for longer than ViewStaleAfter, and no heartbeat announced
	Verified            bool
	VerifyError         string
}

type listComponent struct {
	Name, Desired, Applied, Phase string
}

func (v *view) fleetPage(w http.ResponseWriter, r *http.Request) {
	q := parseFleetQuery(r.URL.Query())
	list, err := v.list(q)
	if err != nil {
		http.Error(w, "nuon: read the fleet: "+err.Error(), http.StatusInternalServerError)
		return
	}
	v.render(w, "fleet.tmpl", list)
}

// list computes a page of the fleet under the view's lock: counts from the
// summary, rows from an order already sorted, each walked only as far as
// the page needs when nothing narrows it.
func (v *view) list(q fleetQuery) (*fleetList, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	x, err := v.update()
	if err != nil {
		return nil, err
	}
	order := x.order
	if q.Sort == sortID {
		order = x.byID
	}
	out := &fleetList{Summary: x.summary.clone(), Query: q, Main: v.main.String()}
	first := (q.Page - 1) * pageSize
	var page []*viewEntry
	if !q.Filtered() {
		out.Matches = len(order)
		if first < len(order) {
			page = order[first:min(first+pageSize, len(order))]
		}
	} else {
		m := x.compile(q)
		if m.prefix != "" {
			// An id prefix is one run of the id order: walk only it,
			// ordered as asked.
			lo, _ := slices.BinarySearchFunc(x.byID, m.prefix, func(e *viewEntry, p string) int { return strings.Compare(e.in.ID, p) })
			hi := lo + firstPast(x.byID[lo:], func(e *viewEntry) bool { return !strings.HasPrefix(e.in.ID, m.prefix) })
			order = x.byID[lo:hi]
			if q.Sort != sortID {
				order = slices.SortedFunc(slices.Values(order), compareProblems)
			}
		}
		for _, e := range order {
			if !m.match(e) {
				continue
			}
			if out.Matches >= first && out.Matches < first+pageSize {
				page = append(page, e)
			}
			out.Matches++
		}
	}
	out.Pages = max(1, (out.Matches+pageSize-1)/pageSize)
	out.From = first + 1
	now := x.now
	for _, e := range page {
		out.Rows = append(out.Rows, v.listRow(e, now))
	}
	out.States = slices.SortedFunc(maps.Keys(out.Summary.States), compareStates)
	out.Channels = slices.Sorted(maps.Keys(out.Summary.Channels))
	out.Components = slices.Sorted(maps.Keys(out.Summary.Versions))
	return out, nil
}

// firstPast returns the index of the first element of s for which past is
// true, s being ordered so that past never turns false again.
func firstPast(s []*viewEntry, past func(*viewEntry) bool) int {
	i, _ := slices.BinarySearchFunc(s, true, func(e *viewEntry, _ bool) int {
		if past(e) {
			return 1
		}
		return -1
	})
	return i
}

func (v *view) listRow(e *viewEntry, now time.Time) listRow {
	in := e.in
	row := listRow{ID: in.ID, Channel: in.Desired.Channel, Labels: labelList(e.labels), State: e.state, Desired: in.Desired.Generation}
	names := map[string]bool{}
	versions := v.versionsOf(in)
	for n := range versions {
		names[n] = true
	}
	reported := map[string]fleet.Component{}
	if r := e.row; r != nil {
		row.Reported, row.InSync, row.Generation = true, r.InSync, r.Generation
		row.Time, row.Verified, row.VerifyError = r.Time, r.Verified, clip(r.VerifyError)
		row.Reason = clip(r.Reason())
		row.Quiet = r.HeartbeatEvery == "" && now.Sub(r.Time) > v.s.cfg.ViewStaleAfter
		for _, c := range r.Components {
			names[c.Name] = true
			reported[c.Name] = c
		}
	}
	var problems []string
	for _, n := range slices.Sorted(maps.Keys(names)) {
		c := reported[n]
		if len(row.Components) < rowComponents {
			row.Components = append(row.Components, listComponent{Name: n, Desired: versions[n], Applied: c.Version, Phase: c.Phase})
		} else {
			row.More++
		}
		if p := componentProblem(c); p != "" {
			problems = append(problems, p)
		}
	}
	if in.Err != "" {
		problems = append([]string{clip(in.Err)}, problems...)
	}
	if e.row != nil && len(e.row.Vetoed) > 0 {
		problems = append(problems, "turned off by the customer: "+strings.Join(e.row.Vetoed, ","))
	}
	if len(problems) > rowProblems {
		problems = append(problems[:rowProblems], fmt.Sprintf("and %d more", len(problems)-rowProblems))
	}
	row.Problems = problems
	return row
}

// componentProblem is what needs a look in one component, in the words of
// `nuon status`: its phase when not Applied, its health when not Ready,
// drift found ("drift 2") or corrected ("drift 1 corrected"), its error.
func componentProblem(c fleet.Component) string {
	var notes []string
	if c.Phase != "" && c.Phase != schemas.PhaseApplied {
		notes = append(notes, c.Phase)
	}
	if c.Health != nil && c.Health.Status != schemas.HealthReady {
		h := "health " + c.Health.Status
		if c.Health.Message != "" {
			h += ": " + c.Health.Message
		}
		notes = append(notes, h)
	}
	if n := len(c.Drift); n > 0 {
		d := fmt.Sprintf("drift %d", n)
		if c.Corrected {
			d += " corrected"
		}
		notes = append(notes, d)
	}
	if len(notes) == 0 {
		return ""
	}
	p := c.Name + " (" + strings.Join(notes, ", ") + ")"
	if c.Error != "" {
		p += ": " + c.Error
	}
	return clip(p)
}

// clip bounds a text shown in a row.
func clip(s string) string {
	if len(s) <= rowText {
		return s
	}
	cut := rowText
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// labelList is labels as sorted key=value strings.
func labelList(labels map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return out
}

// compareStates orders state words as the list orders installs: problems
// first, Ready last.
func compareStates(a, b string) int {
	return cmp.Or(cmp.Compare(stateOrder(a), stateOrder(b)), strings.Compare(a, b))
}

func stateOrder(s string) int {
	switch s {
	case schemas.InstallRefused, schemas.PhaseFailed, schemas.InstallDegraded:
		return rankFailing
	case fleet.StateUnreachable:
		return rankUnreachable
	case fleet.StateStale:
		return rankStale
	case fleet.StateHeld, fleet.StateWaiting:
		return rankDeferred
	case phaseUnreported:
		return rankUnreported
	case schemas.InstallReady:
		return rankReady
	}
	return rankBusy
}

// count is one key of a summary's counts and its installs.
type count struct {
	Key string
	N   int
}

// top is the summaryTop keys of m with the most installs, and how many
// other keys there are.
func top(m map[string]int) ([]count, int) {
	var out []count
	for k, n := range m {
		out = append(out, count{k, n})
	}
	slices.SortFunc(out, func(a, b count) int { return cmp.Or(b.N-a.N, strings.Compare(a.Key, b.Key)) })
	if len(out) > summaryTop {
		return out[:summaryTop], len(out) - summaryTop
	}
	return out, 0
}
