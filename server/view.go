package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

//go:embed view
var viewFiles embed.FS

// viewCookie holds an operator's session: an HMAC of the view token, so
// the cookie never carries the token itself.
const viewCookie = "nuon_view"

// Phase of an install that has a desired ref but no status yet.
const phaseUnreported = "Unreported"

// view is the fleet view: HTML pages for the vendor's operators, built
// from an index of every install's desired state and reported status.
// The index moves when the ref table moved (a render, an accepted push, a
// replica's refresh), reading only the installs whose refs moved, and
// when a heartbeat turns late; its counts and orders move with each
// install, so a page costs the same whatever the size of the fleet.
type view struct {
	s     *Server
	token []byte
	tmpl  *template.Template

	// mu guards the index and what it was built from; pages are
	// computed under it and rendered outside.
	mu      sync.Mutex
	index   *fleetIndex
	version uint64        // of the ref table the index has
	main    plumbing.Hash // the main commit it has (keys, labels)
	labels  viewLabels
	// building is set while the first index is built (buildIndex):
	// update reports its progress to build.
	building bool
	build    *viewBuild
	// cache is the saved index the first build takes installs from
	// (view_cache.go); nil after it.
	cache map[string]viewCached
	// versions are the desired versions of the desired states whose rows
	// pages showed (versionsOf), at most maxVersionsMemo.
	versions map[plumbing.Hash]map[string]string
}

// maxVersionsMemo bounds view.versions: a few pages' rows, many times.
const maxVersionsMemo = 4096

// versionsOf is each component's version in in's desired state, which
// the index does not keep: read for the rows a page shows, and kept for
// the next pages. The caller holds v.mu.
func (v *view) versionsOf(in *viewInstall) map[string]string {
	if in.Desired.Versions != nil || in.desiredH.IsZero() {
		return in.Desired.Versions
	}
	if m, ok := v.versions[in.desiredH]; ok {
		return m
	}
	repo, err := gitrepo.Open(v.s.cfg.Dir)
	if err != nil {
		return nil
	}
	d, err := readIndexDesired(repo.Storer(), in.desiredH, true)
	if err != nil {
		return nil // the row's install says why (Err)
	}
	if v.versions == nil || len(v.versions) >= maxVersionsMemo {
		v.versions = map[plumbing.Hash]map[string]string{}
	}
	m := internLabels(v.index.words.versions, d.Versions)
	v.versions[in.desiredH] = m
	return m
}

// viewBuild is the progress of the first index, built in the background
// when the server starts: pages wait for it a little (viewBuildWait),
// then say how far it is.
type viewBuild struct {
	ready       chan struct{} // closed once the first index is built
	started     time.Time
	done, total atomic.Int64
	reused      atomic.Int64 // installs taken from the saved index
	mu          sync.Mutex
	states      map[string]int // installs read so far, by state
	err         string
	wait        time.Duration // viewBuildWait
}

// viewBuildWait is how long a page waits for the first index before it
// answers with the building page: a small fleet is indexed within it.
const viewBuildWait = 5 * time.Second

// buildIndex builds the first index: every install read and verified
// once, before any operator asks. Pages wait for it (indexed).
func (v *view) buildIndex() {
	b := v.build
	path := v.s.viewCachePath()
	v.mu.Lock()
	cache, labels, err := loadViewCache(path)
	if err != nil {
		v.s.log.Warn("fleet view: the saved index is not read; every install is read again", "error", err)
	}
	v.labels.seed(labels)
	v.cache, v.building = cache, true
	x, err := v.update()
	v.cache, v.building = nil, false
	// An index taken whole from the saved one, no install file parsed,
	// is what the file holds: not written again (5 s at 1,000,000).
	if err == nil && (b.reused.Load() < int64(len(x.entries)) || v.labels.parsed > 0 || len(cache) != len(x.entries)) {
		if serr := saveViewCache(path, x, &v.labels); serr != nil {
			v.s.log.Warn("fleet view: save the index", "error", serr)
		}
	}
	v.mu.Unlock()
	if err != nil {
		v.s.log.Error("fleet view: build the index", "error", err)
		b.mu.Lock()
		b.err = err.Error()
		b.mu.Unlock()
	} else {
		v.s.log.Info("fleet view: index built", "installs", b.total.Load(), "saved", b.reused.Load(), "duration", time.Since(b.started).Round(time.Millisecond))
	}
	close(b.ready)
}

// counted is one install read by the first build.
func (b *viewBuild) counted(state string) {
	b.done.Add(1)
	b.mu.Lock()
	b.states[state]++
	b.mu.Unlock()
}

// indexed serves next once the first index is built; until then, after
// viewBuildWait, the building page: how many installs are read of how
// many, and their states so far.
func (v *view) indexed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b := v.build
		select {
		case <-b.ready:
			next(w, r)
			return
		default:
		}
		t := time.NewTimer(b.wait)
		defer t.Stop()
		select {
		case <-b.ready:
			next(w, r)
			return
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		states := maps.Clone(b.states)
		b.mu.Unlock()
		data := map[string]any{"Done": b.done.Load(), "Total": b.total.Load(), "States": states,
			"Order": slices.SortedFunc(maps.Keys(states), compareStates), "Took": time.Since(b.started).Round(time.Second)}
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		if err := v.tmpl.ExecuteTemplate(w, "building.tmpl", data); err != nil {
			v.s.log.Error("fleet view", "page", "building.tmpl", "error", err)
		}
	}
}

// viewInstall is one install in the fleet view.
type viewInstall struct {
	ID               string
	desiredH, statsH plumbing.Hash
	// file is the blob of installs/<id>.yaml on the main the install was
	// read at (zero: none). The key its status is checked against, the
	// key in force, is what that file and the status history from statsH
	// give (keyTable.lookup; a hand-over moves the status ref), so
	// (desiredH, statsH, file) says what the install was read from, and
	// a restart takes a saved install without parsing its file for the
	// key. keyless: its status was read with no key in force, which may
	// be a history that could not be read: such a reading is not taken
	// from the saved index.
	file    plumbing.Hash
	keyless bool
	// key is the key in force its status was checked against (zero: no
	// status read, or taken from the saved index): a file changed for
	// its labels or channel keeps the status as checked (view.kept).
	key     viewKey
	Desired fleet.Desired
	Status  *fleet.Install // nil: no status yet
	Err     string         // reading its refs failed
}

// viewKey names an install's key (as authorizedKey writes it) by the
// first 16 bytes of its SHA-256; zero: none.
type viewKey [16]byte

func keyOf(key string) viewKey {
	var k viewKey
	if key != "" {
		s := sha256.Sum256([]byte(key))
		copy(k[:], s[:])
	}
	return k
}

// readFrom says whether in was read from the refs and install file given.
func (in *viewInstall) readFrom(desired, status, file plumbing.Hash) bool {
	return in.desiredH == desired && in.statsH == status && in.file == file && !(in.keyless && !status.IsZero())
}

// kept is in as it stands with the refs and install file given without
// reading it again, or nil when it must be read: its refs moved, or its
// file did and with it the key in force. A file changed for its labels
// or channel keeps the status as checked, where a label added to every
// install's file would read the fleet again. The caller holds v.mu.
func (v *view) kept(in *viewInstall, desired, status, file plumbing.Hash) *viewInstall {
	switch {
	case in.readFrom(desired, status, file):
		return in
	case in.desiredH != desired || in.statsH != status || in.keyless && !status.IsZero():
		return nil
	case !status.IsZero():
		key := ""
		if k, ok := v.s.keys.lookup(in.ID); ok {
			key = authorizedKey(k)
		}
		if in.key == (viewKey{}) || keyOf(key) != in.key {
			return nil
		}
	}
	out := *in
	out.file = file
	return &out
}

// State is the install's state as the view shows it.
func (in *viewInstall) State() string {
	if in.Status == nil {
		return phaseUnreported
	}
	if in.Status.State == "" {
		return phaseUnreported
	}
	return in.Status.State
}

func newView(s *Server, token string) (*view, error) {
	t, err := template.New("").Funcs(template.FuncMap{
		"short": func(s string) string {
			if len(s) > 10 {
				return s[:10]
			}
			return s
		},
		"ago":   func(t time.Time) string { return ago(s.cfg.Now().Sub(t)) },
		"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		// quiet: no status for longer than ViewStaleAfter from an agent
		// that announces no heartbeat (one that does turns Unreachable).
		"quiet": func(in *fleet.Install) bool {
			return in != nil && in.HeartbeatEvery == "" && s.cfg.Now().Sub(in.Time) > s.cfg.ViewStaleAfter
		},
		"top": func(m map[string]int) map[string]any {
			t, more := top(m)
			return map[string]any{"Top": t, "More": more}
		},
		"inc":   func(i int) int { return i + 1 },
		"dec":   func(i int) int { return i - 1 },
		"lower": strings.ToLower,
	}).ParseFS(viewFiles, "view/*.tmpl")
	if err != nil {
		return nil, err
	}
	return &view{s: s, token: []byte(token), tmpl: t,
		build: &viewBuild{ready: make(chan struct{}), started: s.cfg.Now(), states: map[string]int{}, wait: viewBuildWait}}, nil
}

// routes adds the view's pages to mux, each behind the operator check.
func (v *view) routes(mux *http.ServeMux) {
	css, _ := fs.Sub(viewFiles, "view")
	mux.Handle("GET /fleet/static/", http.StripPrefix("/fleet/static/", http.FileServerFS(css)))
	mux.HandleFunc("GET /fleet/login", v.loginPage)
	mux.HandleFunc("POST /fleet/login", v.login)
	mux.HandleFunc("GET /fleet", v.operator(v.indexed(v.fleetPage)))
	mux.HandleFunc("GET /fleet/{$}", v.operator(v.indexed(v.fleetPage)))
	mux.HandleFunc("GET /fleet/installs/{id}", v.operator(v.indexed(v.installPage)))
	mux.HandleFunc("GET /fleet/rollouts", v.operator(v.rolloutsPage))
	mux.HandleFunc("GET /fleet/rollouts/{channel}", v.operator(v.rolloutPage))
}

// operator lets a request through when it carries the view token as a
// bearer token or the session cookie that logging in sets. An install's
// request signature is never accepted here.
func (v *view) operator(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v.authorized(r) {
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Frame-Options", "DENY")
			w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'")
			next(w, r)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/fleet/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="nuon fleet view"`)
		http.Error(w, "nuon: the fleet view needs the operator token", http.StatusUnauthorized)
	}
}

func (v *view) authorized(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), v.token) == 1
	}
	if c, err := r.Cookie(viewCookie); err == nil {
		return hmac.Equal([]byte(c.Value), []byte(v.session()))
	}
	return false
}

// session is the cookie value of a logged-in operator.
func (v *view) session() string {
	m := hmac.New(sha256.New, v.token)
	m.Write([]byte("nuon fleet view session"))
	return hex.EncodeToString(m.Sum(nil))
}

func (v *view) loginPage(w http.ResponseWriter, r *http.Request) {
	v.render(w, "login.tmpl", map[string]any{"Next": safeNext(r.URL.Query().Get("next")), "Failed": r.URL.Query().Has("failed")})
}

func (v *view) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := safeNext(r.FormValue("next"))
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.FormValue("token"))), v.token) != 1 {
		v.s.log.Warn("fleet view login refused", "remote", r.RemoteAddr)
		v.s.metrics.refused(reasonViewLogin)
		http.Redirect(w, r, "/fleet/login?failed=1&next="+url.QueryEscape(next), http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: viewCookie, Value: v.session(), Path: "/fleet", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: 12 * 3600})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// fleetHome is where a login goes when its next is missing or refused.
const fleetHome = "/fleet"

// safeNext keeps a login's redirect target on the view: a path under
// /fleet on this server, cleaned, with its query. Anything that a browser
// could read as another host or scheme (a backslash, which browsers take
// for a slash; "//"; a scheme; a control character; dot segments that
// climb out of /fleet, encoded or not) is refused for fleetHome rather
// than repaired.
func safeNext(n string) string {
	if n == "" || len(n) > 2048 || n[0] != '/' {
		return fleetHome
	}
	if unsafeInPath(n) {
		return fleetHome
	}
	u, err := url.Parse(n)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return fleetHome
	}
	// u.Path is decoded: %2F, %5C and %2E are judged as what they mean.
	if unsafeInPath(u.Path) || strings.Contains(u.Path, "//") {
		return fleetHome
	}
	p := path.Clean(u.Path)
	if p != fleetHome && !strings.HasPrefix(p, fleetHome+"/") {
		return fleetHome
	}
	return (&url.URL{Path: p, RawQuery: u.RawQuery}).String()
}

// unsafeInPath reports a control character or a backslash in s.
func unsafeInPath(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return true
		}
	}
	return false
}

func (v *view) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := v.tmpl.ExecuteTemplate(w, name, data); err != nil {
		v.s.log.Error("fleet view", "page", name, "error", err)
	}
}

// fleetRow is one component row of an install's page.
type fleetRow struct {
	Install   *viewInstall
	Component string
	Desired   string // version
	Applied   string
	Phase     string
	Error     string
	Drift     []schemas.ResourceDrift
	Corrected bool
	Health    *schemas.Health
	// Plan is the component's saved plan when it waits for approval
	// (or was refused or rejected).
	Plan *schemas.PlanRecord
}

// Approve is the command line that approves the row's waiting plan.
func (r fleetRow) Approve() string {
	if r.Plan == nil || r.Phase != schemas.PhaseAwaitingApproval {
		return ""
	}
	return "nuon approve " + r.Install.ID + " " + r.Component + " --plan " + r.Plan.Hash + " --key ~/.ssh/approver"
}

// installRows are an install's rows, one per component desired or
// reported, by name.
func installRows(in *viewInstall) []fleetRow {
	names := map[string]bool{}
	for n := range in.Desired.Versions {
		names[n] = true
	}
	reported := map[string]fleet.Component{}
	if in.Status != nil {
		for _, c := range in.Status.Components {
			names[c.Name] = true
			reported[c.Name] = c
		}
	}
	var rows []fleetRow
	for _, n := range slices.Sorted(maps.Keys(names)) {
		row := fleetRow{Install: in, Component: n, Desired: in.Desired.Versions[n], Phase: phaseUnreported}
		if c, ok := reported[n]; ok {
			row.Applied, row.Phase, row.Error, row.Drift, row.Corrected, row.Health, row.Plan = c.Version, c.Phase, c.Error, c.Drift, c.Corrected, c.Health, c.Plan
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		rows = append(rows, fleetRow{Install: in, Phase: in.State()})
	}
	return rows
}

func (v *view) installPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	in, labels, key, err := v.install(id)
	if err != nil {
		http.Error(w, "nuon: read the fleet: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if in == nil {
		http.NotFound(w, r)
		return
	}
	repo, err := gitrepo.Open(v.s.cfg.Dir)
	if err != nil {
		http.Error(w, "nuon: open the repository: "+err.Error(), http.StatusInternalServerError)
		return
	}
	data := map[string]any{"In": in, "Rows": installRows(in), "Labels": labelList(labels), "QuietAfter": v.s.cfg.ViewStaleAfter}
	if !in.statsH.IsZero() {
		h, err := fleet.History(repo.Storer(), in.ID, in.statsH, key, 100)
		data["History"], data["HistoryErr"] = h, errText(err)
	}
	if !in.desiredH.IsZero() {
		g, err := generations(repo.Storer(), in.desiredH, 10)
		data["Generations"], data["GenerationsErr"] = g, errText(err)
	}
	v.render(w, "install.tmpl", data)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// update brings the index to the ref table and main as they are now,
// re-reading only the installs whose refs (or file) moved, and to the
// time now (heartbeats turn late with time alone). The caller holds v.mu.
func (v *view) update() (*fleetIndex, error) {
	now, main := v.s.cfg.Now(), v.s.keys.mainCommit()
	if v.index != nil && v.version == v.s.refs.stamp() && v.main == main {
		v.index.advance(now)
		return v.index, nil
	}
	repo, err := gitrepo.Open(v.s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	if v.index != nil {
		if names, version, ok := v.s.refs.changes(v.version); ok {
			ids := make([]string, 0, len(names))
			for _, name := range names {
				if id, ok := strings.CutPrefix(name, schemas.InstallRefPrefix); ok {
					ids = append(ids, id)
				} else if id, ok := strings.CutPrefix(name, schemas.StatusRefPrefix); ok {
					ids = append(ids, id)
				}
			}
			if main != v.main {
				// A new main changes the keys and labels of the
				// installs whose file it changed, and no others.
				ids = append(ids, v.labels.read(repo.Storer(), main)...)
			}
			v.take(repo, ids, now)
			v.version, v.main = version, main
			v.index.advance(now)
			return v.index, nil
		}
	}
	refs, version := v.s.refs.snapshot()
	if v.index == nil {
		v.index = newFleetIndex()
		v.index.live = v.s.live
	}
	v.labels.read(repo.Storer(), main)
	changed := map[string]*viewEntry{}
	if v.building {
		v.build.total.Store(int64(len(refs)))
	}
	// In the order of the ids, which is the order the render wrote the
	// installs' objects in and main's installs/ folder lists their files:
	// objects read in the order of their pack share its delta bases,
	// where the order of a map read a million installs' at random.
	for _, id := range slices.Sorted(maps.Keys(refs)) {
		d, st := refs[id].desired, refs[id].status
		file := v.labels.blob(id)
		if old := v.index.entries[id]; old != nil {
			if in := v.kept(old.in, d, st, file); in != nil {
				old.in = in // labels: relabel, below
				continue
			}
		}
		in := v.cached(id, d, st, file)
		if in == nil {
			in = v.readIndexInstall(repo.Storer(), id, d, st, file)
		} else {
			v.build.reused.Add(1)
		}
		in = v.index.words.slim(in)
		e := newEntry(in, v.labels.of(id), now, v.s.live)
		changed[id] = e
		if v.building {
			v.build.counted(e.state)
		}
	}
	for id := range v.index.entries {
		if _, ok := refs[id]; !ok {
			changed[id] = nil
		}
	}
	v.index.apply(changed)
	v.index.relabel(&v.labels)
	v.index.advance(now)
	v.version, v.main = version, main
	return v.index, nil
}

// readIndexInstall reads what the index keeps of install id (view_read.go),
// its status checked against its key in force.
func (v *view) readIndexInstall(st storer.Storer, id string, desired, status, file plumbing.Hash) *viewInstall {
	in := &viewInstall{ID: id, desiredH: desired, statsH: status, file: file}
	var errs []string
	if !desired.IsZero() {
		d, err := readIndexDesired(st, desired, false)
		if err != nil {
			errs = append(errs, err.Error())
		}
		in.Desired = d
	}
	if !status.IsZero() {
		key := ""
		if k, ok := v.s.keys.lookup(id); ok {
			key = authorizedKey(k)
		}
		in.keyless, in.key = key == "", keyOf(key)
		row, err := readIndexStatus(st, id, status, desired, key)
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			in.Status = &row
		}
	}
	in.Err = strings.Join(errs, "; ")
	return in
}

// take re-reads the installs ids (whose refs moved, or whose file on
// main changed) when their refs or file differ from what the index has,
// and gives each its labels: the cost of a status pushed, a render or a
// new main is the installs it moved, not the fleet.
func (v *view) take(repo *gitrepo.Repo, ids []string, now time.Time) {
	changed := map[string]*viewEntry{}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		d, _ := v.s.refs.get(schemas.InstallRef(id))
		st, _ := v.s.refs.get(schemas.StatusRef(id))
		old := v.index.entries[id]
		if d.IsZero() && st.IsZero() {
			if old != nil {
				changed[id] = nil
			}
			continue
		}
		file := v.labels.blob(id)
		if old != nil {
			if in := v.kept(old.in, d, st, file); in != nil {
				old.in = in
				old.labels = v.labels.of(id) // labels move neither counts nor orders
				continue
			}
		}
		in := v.readIndexInstall(repo.Storer(), id, d, st, file)
		changed[id] = newEntry(v.index.words.slim(in), v.labels.of(id), now, v.s.live)
	}
	v.index.apply(changed)
}

// install returns one install as it stands now, its labels and its key
// (as authorizedKey writes it); nil when the fleet has no such install.
// The index keeps what its lists show (viewWords.slim): the install's
// page reads the install whole again, from the refs and key the index
// has.
func (v *view) install(id string) (*viewInstall, map[string]string, string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	x, err := v.update()
	if err != nil {
		return nil, nil, "", err
	}
	e := x.entries[id]
	if e == nil {
		return nil, nil, "", nil
	}
	repo, err := gitrepo.Open(v.s.cfg.Dir)
	if err != nil {
		return nil, nil, "", err
	}
	key := ""
	if k, ok := v.s.keys.lookup(id); ok {
		key = authorizedKey(k) // the index's, as update just brought it to main
	}
	refs := map[string]installTips{id: {desired: e.in.desiredH, status: e.in.statsH}}
	whole := readViewInstall(tableRepo{st: repo.Storer(), refs: refs}, repo.Storer(), id, e.in.desiredH, e.in.statsH, key)
	whole.file = e.in.file
	in := *whole
	if whole.Status != nil && e.row != nil {
		// As the index has it at its time: its last signed contact and
		// its state.
		row := *whole.Status
		row.Contact, row.ContactKind, row.State, row.Unreachable = e.row.Contact, e.row.ContactKind, e.row.State, e.row.Unreachable
		in.Status = &row
	}
	return &in, e.labels, key, nil
}

func readViewInstall(repo fleet.Repository, st storer.EncodedObjectStorer, id string, desired, status plumbing.Hash, key string) *viewInstall {
	in := &viewInstall{ID: id, desiredH: desired, statsH: status, keyless: key == ""}
	var errs []string
	if !desired.IsZero() {
		d, err := fleet.ReadDesired(st, desired)
		if err != nil {
			errs = append(errs, err.Error())
		}
		in.Desired = d
	}
	if !status.IsZero() {
		row, err := fleet.ReadInstall(repo, id, status, key, time.Time{})
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			in.Status = &row
		}
	}
	in.Err = strings.Join(errs, "; ")
	return in
}

// tableRepo is a fleet.Repository whose refs are the ref table's: each
// install's desired and status tips, by install.
type tableRepo struct {
	st   storer.Storer
	refs map[string]installTips
}

func (t tableRepo) Storer() storer.Storer { return t.st }

func (t tableRepo) Refs(prefix string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	for id, tips := range t.refs {
		for _, r := range [2]struct {
			name string
			h    plumbing.Hash
		}{{schemas.InstallRef(id), tips.desired}, {schemas.StatusRef(id), tips.status}} {
			if !r.h.IsZero() && strings.HasPrefix(r.name, prefix) {
				out[plumbing.ReferenceName(r.name)] = r.h
			}
		}
	}
	return out, nil
}

func (t tableRepo) Ref(name plumbing.ReferenceName) (plumbing.Hash, error) {
	id, status, ok := splitRef(name.String())
	if !ok {
		return plumbing.ZeroHash, nil
	}
	if status {
		return t.refs[id].status, nil
	}
	return t.refs[id].desired, nil
}

var _ fleet.Repository = tableRepo{}

// ago is a duration as a person reads it.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return d.Round(time.Second).String() + " ago"
	case d < time.Hour:
		return d.Round(time.Minute).String() + " ago"
	case d < 48*time.Hour:
		return d.Round(time.Hour).String() + " ago"
	}
	return strconv.Itoa(int(d.Hours()/24)) + " days ago"
}
