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
	"sort"
	"strconv"
	"strings"
	"sync"
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
// from a snapshot of every install's desired state and reported status.
// The snapshot is rebuilt when the ref table moved (a render, an accepted
// push, a replica's refresh), reading only the installs whose refs moved.
type view struct {
	s     *Server
	token []byte
	tmpl  *template.Template

	mu    sync.Mutex
	snap  *snapshot
	cache map[string]*viewInstall // by install id, reused while its refs are unchanged
}

// snapshot is the fleet at one version of the ref table.
type snapshot struct {
	version  uint64
	main     plumbing.Hash
	installs []*viewInstall // by id
	channels []string
}

// viewInstall is one install in the fleet view.
type viewInstall struct {
	ID               string
	desiredH, statsH plumbing.Hash
	key              string
	Desired          fleet.Desired
	Status           *fleet.Install // nil: no status yet
	Err              string         // reading its refs failed
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
		"stale": func(t time.Time) bool { return s.cfg.Now().Sub(t) > s.cfg.ViewStaleAfter },
		"lower": strings.ToLower,
	}).ParseFS(viewFiles, "view/*.tmpl")
	if err != nil {
		return nil, err
	}
	return &view{s: s, token: []byte(token), tmpl: t, cache: map[string]*viewInstall{}}, nil
}

// routes adds the view's pages to mux, each behind the operator check.
func (v *view) routes(mux *http.ServeMux) {
	css, _ := fs.Sub(viewFiles, "view")
	mux.Handle("GET /fleet/static/", http.StripPrefix("/fleet/static/", http.FileServerFS(css)))
	mux.HandleFunc("GET /fleet/login", v.loginPage)
	mux.HandleFunc("POST /fleet/login", v.login)
	mux.HandleFunc("GET /fleet", v.operator(v.fleetPage))
	mux.HandleFunc("GET /fleet/{$}", v.operator(v.fleetPage))
	mux.HandleFunc("GET /fleet/installs/{id}", v.operator(v.installPage))
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

// fleetRow is one install × component row of the fleet page.
type fleetRow struct {
	Install   *viewInstall
	Component string
	Desired   string // version
	Applied   string
	Phase     string
	Error     string
	Drift     []schemas.ResourceDrift
	Health    *schemas.Health
	First     bool // first row of its install
}

func (v *view) fleetPage(w http.ResponseWriter, r *http.Request) {
	snap, err := v.snapshot()
	if err != nil {
		http.Error(w, "nuon: read the fleet: "+err.Error(), http.StatusInternalServerError)
		return
	}
	channel, phase := r.URL.Query().Get("channel"), r.URL.Query().Get("phase")
	var rows []fleetRow
	phases := map[string]bool{}
	installs := 0
	for _, in := range snap.installs {
		inRows := installRows(in)
		for _, row := range inRows {
			phases[row.Phase] = true
		}
		phases[in.State()] = true
		if channel != "" && in.Desired.Channel != channel {
			continue
		}
		if phase != "" && in.State() != phase {
			kept := inRows[:0]
			for _, row := range inRows {
				if row.Phase == phase {
					kept = append(kept, row)
				}
			}
			inRows = kept
		}
		if len(inRows) == 0 {
			continue
		}
		inRows[0].First = true
		installs++
		rows = append(rows, inRows...)
	}
	delete(phases, "")
	v.render(w, "fleet.tmpl", map[string]any{
		"Rows": rows, "Installs": installs, "Total": len(snap.installs),
		"Channels": snap.channels, "Phases": slices.Sorted(maps.Keys(phases)),
		"Channel": channel, "Phase": phase, "Main": snap.main.String(),
	})
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
			row.Applied, row.Phase, row.Error, row.Drift, row.Health = c.Version, c.Phase, c.Error, c.Drift, c.Health
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
	snap, err := v.snapshot()
	if err != nil {
		http.Error(w, "nuon: read the fleet: "+err.Error(), http.StatusInternalServerError)
		return
	}
	i, ok := slices.BinarySearchFunc(snap.installs, id, func(in *viewInstall, id string) int { return strings.Compare(in.ID, id) })
	if !ok {
		http.NotFound(w, r)
		return
	}
	in := snap.installs[i]
	repo, err := gitrepo.Open(v.s.cfg.Dir)
	if err != nil {
		http.Error(w, "nuon: open the repository: "+err.Error(), http.StatusInternalServerError)
		return
	}
	data := map[string]any{"In": in, "Rows": installRows(in)}
	if !in.statsH.IsZero() {
		h, err := fleet.History(repo.Storer(), in.ID, in.statsH, in.key, 100)
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

// snapshot returns the fleet as the ref table has it now, rebuilt when the
// table or main moved since the last one.
func (v *view) snapshot() (*snapshot, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	main := v.s.keys.mainCommit()
	if v.snap != nil && v.snap.version == v.s.refs.stamp() && v.snap.main == main {
		return v.snap.at(v.s.cfg.Now()), nil
	}
	refs, version := v.s.refs.snapshot()
	repo, err := gitrepo.Open(v.s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for name := range refs {
		if id, ok := strings.CutPrefix(name, schemas.InstallRefPrefix); ok {
			ids[id] = true
		} else if id, ok := strings.CutPrefix(name, schemas.StatusRefPrefix); ok {
			ids[id] = true
		}
	}
	snap := &snapshot{version: version, main: main}
	channels := map[string]bool{}
	next := make(map[string]*viewInstall, len(ids))
	rr := tableRepo{st: repo.Storer(), refs: refs}
	for id := range ids {
		d, st := refs[schemas.InstallRef(id)], refs[schemas.StatusRef(id)]
		key := ""
		if k, ok := v.s.keys.lookup(id); ok {
			key = authorizedKey(k)
		}
		in := v.cache[id]
		if in == nil || in.desiredH != d || in.statsH != st || in.key != key {
			in = readViewInstall(rr, repo.Storer(), id, d, st, key)
		}
		next[id] = in
		snap.installs = append(snap.installs, in)
		if in.Desired.Channel != "" {
			channels[in.Desired.Channel] = true
		}
	}
	sort.Slice(snap.installs, func(i, j int) bool { return snap.installs[i].ID < snap.installs[j].ID })
	snap.channels = slices.Sorted(maps.Keys(channels))
	v.cache, v.snap = next, snap
	return snap.at(v.s.cfg.Now()), nil
}

// at returns the snapshot as it stands at now: the rows read when refs
// last moved, each install's state brought up to date (a heartbeat turns
// late with time alone, no ref moving).
func (s *snapshot) at(now time.Time) *snapshot {
	out := *s
	out.installs = make([]*viewInstall, len(s.installs))
	for i, in := range s.installs {
		c := *in
		if in.Status != nil {
			row := in.Status.At(now)
			c.Status = &row
		}
		out.installs[i] = &c
	}
	return &out
}

func readViewInstall(repo fleet.Repository, st storer.EncodedObjectStorer, id string, desired, status plumbing.Hash, key string) *viewInstall {
	in := &viewInstall{ID: id, desiredH: desired, statsH: status, key: key}
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

// tableRepo is a fleet.Repository whose refs are the ref table's.
type tableRepo struct {
	st   storer.Storer
	refs map[string]plumbing.Hash
}

func (t tableRepo) Storer() storer.Storer { return t.st }

func (t tableRepo) Refs(prefix string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	for n, h := range t.refs {
		if strings.HasPrefix(n, prefix) {
			out[plumbing.ReferenceName(n)] = h
		}
	}
	return out, nil
}

func (t tableRepo) Ref(name plumbing.ReferenceName) (plumbing.Hash, error) {
	return t.refs[name.String()], nil
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
