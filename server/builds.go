package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust/maingit"
)

// BuildsPath is where the server takes build requests from vendor CI and
// hands them to build agents (see package builder):
//
//	POST BuildsPath/requests        vendor CI files a signed build request
//	GET  BuildsPath/requests/ID     its state and, once built, the result
//	POST BuildsPath/next            a build agent takes the next request (long poll)
//	POST BuildsPath/requests/ID/result  the agent that took it answers
//
// Every HTTP request is signed like an operator's (package
// internal/signature/request) under buildreq.KeyID of its key: vendor CI
// with a key of schemas.BuildTrustFile on main, build agents with a key
// of schemas.BuildAgentTrustFile.
const BuildsPath = "/builds"

// Reasons a build request is refused, as the refusals metric counts them.
const (
	reasonBuildKey     = "build_key"
	reasonBuildRequest = "build_request"
)

// maxBuildLongPoll bounds how long POST BuildsPath/next waits for work.
const maxBuildLongPoll = 30 * time.Second

// buildJob is one build request the server holds.
type buildJob struct {
	sub     schemas.SignedBuildRequest
	status  schemas.BuildStatus
	expires time.Time
	// tip is the request's queue ref (schemas.BuildRef) as last written.
	tip plumbing.Hash
	// changed is closed and replaced at every change of status.
	changed chan struct{}
}

// maxBuildQueue bounds the requests waiting for a build agent.
const maxBuildQueue = 1000

// builds queues build requests for build agents. The queue is durable:
// each request lives on its own ref, schemas.BuildRef(id), one commit
// signed by the server's key per change of its state (filed, taken by an
// agent with a lease, queued again when the lease expired, answered), so
// a restarted server takes up where it stopped and replicas read a
// request's state from their mirror (refreshed only when the writer's
// replica version moves, which a queue write alone does not do yet). The memory holds the same states,
// read from the refs once, and the leases' renewals, which are not
// recorded: a restarted server gives every running build a fresh lease.
type builds struct {
	s                  *Server
	requesters, agents *mainKeys
	verifier           *request.Verifier

	mu     sync.Mutex
	loaded bool
	jobs   map[string]*buildJob
	queue  []string
	wake   chan struct{} // closed and replaced when a request is queued
}

// buildRoutes adds the build endpoints.
func (s *Server) buildRoutes() {
	b := &builds{s: s, jobs: map[string]*buildJob{}, wake: make(chan struct{}),
		requesters: &mainKeys{s: s, file: schemas.BuildTrustFile},
		agents:     &mainKeys{s: s, file: schemas.BuildAgentTrustFile}}
	b.verifier = &request.Verifier{Key: b.lookup, MaxSkew: s.cfg.MaxSkew, Now: s.cfg.Now}
	s.mux.HandleFunc("POST "+BuildsPath+"/requests", b.authed(b.requesters, b.writerOnly(b.file)))
	s.mux.HandleFunc("GET "+BuildsPath+"/requests/{id}", b.authed(nil, b.get))
	s.mux.HandleFunc("POST "+BuildsPath+"/next", b.authed(b.agents, b.writerOnly(b.next)))
	s.mux.HandleFunc("POST "+BuildsPath+"/requests/{id}/lease", b.authed(b.agents, b.writerOnly(b.lease)))
	s.mux.HandleFunc("POST "+BuildsPath+"/requests/{id}/result", b.authed(b.agents, b.writerOnly(b.result)))
	s.mux.HandleFunc(BuildsPath+"/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nuon: not a build endpoint: "+BuildsPath+" serves POST requests, GET requests/ID, POST next, POST requests/ID/lease and POST requests/ID/result", http.StatusNotFound)
	})
}

// writerOnly refuses on a read replica (which still answers a request's
// state from its mirror) and on a server without a key to sign the queue.
func (b *builds) writerOnly(next func(http.ResponseWriter, *http.Request, signature.AllowedSigner)) func(http.ResponseWriter, *http.Request, signature.AllowedSigner) {
	return func(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
		switch {
		case b.s.writer != nil:
			http.Error(w, "nuon: builds are filed, taken and answered at the writer, not at a read replica", http.StatusMisdirectedRequest)
		case b.s.cfg.RenderKey == nil:
			http.Error(w, "nuon: this server has no key (--render-key) to sign the build queue with: it takes no builds", http.StatusServiceUnavailable)
		default:
			next(w, r, who)
		}
	}
}

// lookup finds a key in either list.
func (b *builds) lookup(id string) (ssh.PublicKey, bool) {
	if _, byID := b.requesters.current(); byID[id].Key != nil {
		return byID[id].Key, true
	}
	_, byID := b.agents.current()
	s, ok := byID[id]
	return s.Key, ok
}

// authed lets through requests signed by a key of list (of either list
// when nil).
func (b *builds) authed(list *mainKeys, next func(http.ResponseWriter, *http.Request, signature.AllowedSigner)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := b.verifier.Verify(r)
		if err != nil {
			text := refusalText(err)
			reason := authReason(err)
			if errors.Is(err, request.ErrUnknownInstall) {
				text, reason = "the key is not trusted for builds: add it to "+schemas.BuildTrustFile+" (vendor CI) or "+schemas.BuildAgentTrustFile+" (build agents) on main", reasonBuildKey
			}
			b.s.log.Warn("build request refused", "key", id, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
			b.s.metrics.refused(reason)
			w.Header().Set("WWW-Authenticate", request.Scheme)
			http.Error(w, "nuon: "+text, http.StatusUnauthorized)
			return
		}
		lists := []*mainKeys{list}
		if list == nil {
			lists = []*mainKeys{b.requesters, b.agents}
		}
		for _, l := range lists {
			if _, byID := l.current(); byID[id].Key != nil {
				next(w, r, byID[id])
				return
			}
		}
		b.s.metrics.refused(reasonBuildKey)
		http.Error(w, "nuon: the key is not trusted for this: "+list.file+" on main does not list it", http.StatusForbidden)
	}
}

// file queues one signed build request: signed by the key that signs the
// HTTP request, for a component of main, not filed before.
func (b *builds) file(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	data, err := io.ReadAll(io.LimitReader(r.Body, 2*schemas.MaxBuildRequest+1))
	if err != nil {
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	status, job, err := b.check(data, who)
	if err != nil {
		b.s.log.Warn("build request refused", "key", buildreq.KeyID(who.Key), "reason", err.Error())
		b.s.metrics.refused(reasonBuildRequest)
		http.Error(w, "nuon: "+err.Error(), status)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.load(); err != nil {
		http.Error(w, "nuon: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	b.expire()
	if len(b.queue) >= maxBuildQueue {
		http.Error(w, fmt.Sprintf("nuon: %d build requests are waiting for a build agent: try again later", len(b.queue)), http.StatusServiceUnavailable)
		return
	}
	id := job.status.ID
	if _, ok := b.jobs[id]; ok {
		b.s.metrics.refused(reasonBuildRequest)
		http.Error(w, "nuon: "+buildreq.ErrReplayed.Error()+": build request "+id+" was filed before", http.StatusConflict)
		return
	}
	if err := b.write(r.Context(), job, "filed by "+job.status.Requester); err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, gitrepo.ErrStale) {
			// The ref exists: filed before, at this server or another.
			code, err = http.StatusConflict, fmt.Errorf("%w: build request %s was filed before", buildreq.ErrReplayed, id)
			b.s.metrics.refused(reasonBuildRequest)
		}
		http.Error(w, "nuon: "+err.Error(), code)
		return
	}
	b.jobs[id] = job
	b.enqueue(id)
	b.s.log.Info("build request filed", "request", id, "component", job.status.Component, "commit", job.status.Commit, "principal", job.status.Requester, "ref", schemas.BuildRef(id))
	writeJSON(w, http.StatusAccepted, job.status)
}

// enqueue puts id at the end of the queue and wakes the agents waiting.
// b.mu is held.
func (b *builds) enqueue(id string) {
	b.queue = append(b.queue, id)
	close(b.wake)
	b.wake = make(chan struct{})
}

// serverTrust is the server's own key, which signs the queue refs.
func (b *builds) serverTrust() *signature.AllowedSigners {
	if b.s.cfg.RenderKey == nil {
		return nil
	}
	return &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"nuon-server"}, Key: b.s.cfg.RenderKey.PublicKey()}}}
}

// load reads every queue ref once: queued requests go back on the queue
// in the order they were filed, running ones get a fresh lease (their
// agents may still be building: they renew it or it expires), answered
// ones are kept for their status. A ref the server's key did not sign is
// logged and left alone; its id stays taken. b.mu is held.
func (b *builds) load() error {
	if b.loaded {
		return nil
	}
	repo, err := gitrepo.Open(b.s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("build queue: %w", err)
	}
	refs, err := repo.RefList(schemas.BuildRefPrefix)
	if err != nil {
		return fmt.Errorf("build queue: %w", err)
	}
	trust, now := b.serverTrust(), b.s.cfg.Now().UTC()
	var queued []*buildJob
	for _, ref := range refs {
		id := strings.TrimPrefix(ref.Name, schemas.BuildRefPrefix)
		rec, err := buildreq.ReadRecord(repo.Storer(), id, ref.Hash, trust)
		if err != nil {
			b.s.log.Error("build queue ref refused: the request is not served", "ref", ref.Name, "error", err)
			b.jobs[id] = &buildJob{tip: ref.Hash, changed: make(chan struct{}), status: schemas.BuildStatus{ID: id, State: schemas.BuildFailed, Error: "the queue ref is not readable: " + err.Error()}}
			continue
		}
		var req schemas.BuildRequest
		_ = json.Unmarshal(rec.Request.Request, &req)
		job := &buildJob{sub: rec.Request, status: rec.Status, expires: req.Expires, tip: ref.Hash, changed: make(chan struct{})}
		switch job.status.State {
		case schemas.BuildQueued:
			queued = append(queued, job)
		case schemas.BuildRunning:
			if fresh := now.Add(time.Duration(job.status.LeaseSeconds) * time.Second); job.status.LeaseUntil.Before(fresh) {
				job.status.LeaseUntil = &fresh
			}
		}
		b.jobs[id] = job
	}
	slices.SortStableFunc(queued, func(x, y *buildJob) int { return x.status.Filed.Compare(y.status.Filed) })
	for _, job := range queued {
		b.queue = append(b.queue, job.status.ID)
	}
	b.loaded = true
	if len(refs) > 0 {
		b.s.log.Info("build queue read", "requests", len(refs), "queued", len(queued))
	}
	return nil
}

// write records job's status as a commit on its queue ref (the first
// one when job.tip is zero: the ref must not exist then). b.mu is held.
func (b *builds) write(ctx context.Context, job *buildJob, subject string) error {
	repo, err := gitrepo.Open(b.s.cfg.Dir)
	if err != nil {
		return err
	}
	batch := gitobj.NewBatch()
	who := object.Signature{Name: "nuon build queue", Email: "builds@nuon.invalid", When: b.s.cfg.Now().UTC().Truncate(time.Second)}
	h, err := buildreq.CommitRecord(batch, job.tip, buildreq.Record{Request: job.sub, Status: job.status}, b.s.cfg.RenderKey, who, subject)
	if err != nil {
		return err
	}
	if err := batch.Flush(repo.Storer()); err != nil {
		return fmt.Errorf("build queue: write objects: %w", err)
	}
	ref := schemas.BuildRef(job.status.ID)
	if err := repo.Apply(ctx, []gitrepo.Update{{Name: plumbing.ReferenceName(ref), Old: job.tip, New: h}}); err != nil {
		return fmt.Errorf("build queue: %s: %w", ref, err)
	}
	job.tip = h
	if b.s.mirror != nil {
		b.s.mirror.add(ref)
	}
	b.s.sideRefMoved()
	b.changed(job)
	return nil
}

// changed wakes those waiting on job's state. b.mu is held.
func (b *builds) changed(job *buildJob) {
	close(job.changed)
	job.changed = make(chan struct{})
}

// expire queues again the requests whose agent's lease ran out, or fails
// those taken MaxBuildAttempts times. b.mu is held.
func (b *builds) expire() {
	now := b.s.cfg.Now().UTC()
	for _, job := range b.jobs {
		st := job.status
		if st.State != schemas.BuildRunning || st.LeaseUntil == nil || !now.After(*st.LeaseUntil) {
			continue
		}
		note := fmt.Sprintf("the lease of build agent %s expired at %s (attempt %d)", st.Agent, st.LeaseUntil.Format(time.RFC3339), st.Attempt)
		next := st
		next.Agent, next.LeaseUntil, next.LeaseSeconds, next.Phase, next.Started = "", nil, 0, "", nil
		subject := "queued again: " + note
		if st.Attempt >= schemas.MaxBuildAttempts {
			next.State, next.Finished, next.Error = schemas.BuildFailed, &now, note+": no attempt left"
			subject = "failed: " + note
		} else {
			next.State, next.Note = schemas.BuildQueued, note+": queued again"
		}
		job.status = next
		if err := b.write(context.Background(), job, subject); err != nil {
			job.status = st
			b.s.log.Error("build queue: requeue", "request", st.ID, "error", err)
			continue
		}
		b.s.log.Warn("build lease expired", "request", st.ID, "agent", st.Agent, "attempt", st.Attempt, "state", next.State)
		if next.State == schemas.BuildQueued {
			b.queue = append([]string{st.ID}, b.queue...)
			close(b.wake)
			b.wake = make(chan struct{})
		}
	}
}

// nextExpiry is when the first lease runs out (zero: none). b.mu is held.
func (b *builds) nextExpiry() time.Time {
	var first time.Time
	for _, job := range b.jobs {
		if job.status.State == schemas.BuildRunning && job.status.LeaseUntil != nil && (first.IsZero() || job.status.LeaseUntil.Before(first)) {
			first = *job.status.LeaseUntil
		}
	}
	return first
}

// check judges a submission; on error it returns the HTTP status.
func (b *builds) check(data []byte, who signature.AllowedSigner) (int, *buildJob, error) {
	if len(data) > 2*schemas.MaxBuildRequest {
		return http.StatusRequestEntityTooLarge, nil, fmt.Errorf("the build request is larger than %d bytes", 2*schemas.MaxBuildRequest)
	}
	var sub schemas.SignedBuildRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sub); err != nil {
		return http.StatusBadRequest, nil, fmt.Errorf("the body is not a signed build request (JSON with request and signature): %v", err)
	}
	req, err := buildreq.VerifyRequest(sub, &signature.AllowedSigners{Signers: []signature.AllowedSigner{who}}, b.s.cfg.Now())
	if err != nil {
		return http.StatusForbidden, nil, fmt.Errorf("%w (the build request must be signed by the key that signs the HTTP request)", err)
	}
	main := b.s.keys.mainCommit()
	app, err := readMainFile(b.s.cfg.Dir, main, schemas.AppFile)
	if err != nil {
		return http.StatusServiceUnavailable, nil, fmt.Errorf("read %s on main: %w", schemas.AppFile, err)
	}
	src, err := schemas.Load(fstest.MapFS{schemas.AppFile: {Data: app}})
	if err != nil {
		return http.StatusServiceUnavailable, nil, fmt.Errorf("%s on main: %w", schemas.AppFile, err)
	}
	if !appHas(src.App, req.Component) {
		return http.StatusNotFound, nil, fmt.Errorf("%w: no component %q in %s on main", buildreq.ErrRefused, req.Component, schemas.AppFile)
	}
	sources, err := b.mainSources(main)
	if err != nil {
		return http.StatusServiceUnavailable, nil, fmt.Errorf("main: %w", err)
	}
	if err := buildreq.CheckSource(sources, req); err != nil {
		return http.StatusForbidden, nil, err
	}
	return 0, &buildJob{sub: sub, expires: req.Expires, changed: make(chan struct{}), status: schemas.BuildStatus{
		ID: req.ID, State: schemas.BuildQueued, Component: req.Component, Commit: req.Commit, Version: req.Version,
		Requester: req.Requester, Filed: b.s.cfg.Now().UTC()}}, nil
}

func appHas(app schemas.App, name string) bool {
	if name == schemas.SandboxComponent {
		return app.Sandbox != nil
	}
	for _, c := range app.Components {
		if c.Name == name {
			return true
		}
	}
	return false
}

// get answers a build request's state; with ?wait=SECONDS it waits up to
// that long for the state to change first. A read replica answers from
// the queue ref in its mirror.
func (b *builds) get(w http.ResponseWriter, r *http.Request, _ signature.AllowedSigner) {
	id := r.PathValue("id")
	if b.s.writer != nil {
		b.getMirrored(w, r, id)
		return
	}
	b.mu.Lock()
	if err := b.load(); err != nil {
		b.mu.Unlock()
		http.Error(w, "nuon: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	b.expire()
	job, ok := b.jobs[id]
	if !ok {
		b.mu.Unlock()
		http.Error(w, "nuon: no build request "+id, http.StatusNotFound)
		return
	}
	changed, finished := job.changed, job.status.Finished != nil
	b.mu.Unlock()
	if wait := longPoll(r); wait > 0 && !finished {
		t := time.NewTimer(wait)
		// A lease may run out while waiting: look again then.
		b.mu.Lock()
		lease := b.nextExpiry()
		b.mu.Unlock()
		var expiry <-chan time.Time
		if !lease.IsZero() {
			e := time.NewTimer(max(lease.Sub(b.s.cfg.Now()), 0) + 10*time.Millisecond)
			defer e.Stop()
			expiry = e.C
		}
		select {
		case <-changed:
		case <-t.C:
		case <-expiry:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	b.mu.Lock()
	b.expire()
	st := job.status
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

// getMirrored answers from the replica's mirror, looking again every
// half second while ?wait lasts.
func (b *builds) getMirrored(w http.ResponseWriter, r *http.Request, id string) {
	if !schemas.ValidBuildID(id) {
		http.Error(w, "nuon: no build request "+id, http.StatusNotFound)
		return
	}
	deadline := time.Now().Add(longPoll(r))
	var first *schemas.BuildStatus
	for {
		st, code, err := b.readMirrored(id)
		if err != nil {
			http.Error(w, "nuon: "+err.Error(), code)
			return
		}
		if first == nil {
			first = st
		}
		if st.Finished != nil || st.State != first.State || st.Attempt != first.Attempt || !time.Now().Before(deadline) {
			writeJSON(w, http.StatusOK, st)
			return
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
}

func (b *builds) readMirrored(id string) (*schemas.BuildStatus, int, error) {
	repo, err := gitrepo.Open(b.s.cfg.Dir)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	tip, err := repo.Ref(plumbing.ReferenceName(schemas.BuildRef(id)))
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	if tip.IsZero() {
		return nil, http.StatusNotFound, errors.New("no build request " + id + " (in this replica's mirror)")
	}
	// A replica given the writer's key checks the record with it; one
	// without shows what its writer's copy holds.
	var rec *buildreq.Record
	if trust := b.serverTrust(); trust != nil {
		rec, err = buildreq.ReadRecord(repo.Storer(), id, tip, trust)
	} else {
		rec, err = buildreq.ReadMirrored(repo.Storer(), id, tip)
	}
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	return &rec.Status, 0, nil
}

// next hands the oldest queued request to the calling build agent under a
// lease of ?lease=SECONDS (schemas.DefaultBuildLease when absent, within
// schemas.MinBuildLease..MaxBuildLease), waiting up to ?wait=SECONDS for
// one; 204 when none came.
func (b *builds) next(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	lease := schemas.DefaultBuildLease
	if n, err := strconv.Atoi(r.URL.Query().Get("lease")); err == nil {
		lease = min(max(time.Duration(n)*time.Second, schemas.MinBuildLease), schemas.MaxBuildLease)
	}
	// Read the body to its end first: only then does net/http watch the
	// connection and cancel r.Context() when the agent goes away, so that
	// a request is not handed to a long poll whose agent died.
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<10)); err != nil {
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	deadline := time.NewTimer(longPoll(r))
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if err := b.load(); err != nil {
			b.mu.Unlock()
			http.Error(w, "nuon: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		b.expire()
		for len(b.queue) > 0 && r.Context().Err() == nil {
			job := b.jobs[b.queue[0]]
			if job == nil || job.status.State != schemas.BuildQueued {
				b.queue = b.queue[1:]
				continue
			}
			prev := job.status
			now := b.s.cfg.Now().UTC()
			until := now.Add(lease)
			job.status.State, job.status.Agent, job.status.Started = schemas.BuildRunning, principal(who), &now
			job.status.Attempt++
			job.status.LeaseSeconds, job.status.LeaseUntil, job.status.Phase, job.status.Note = int(lease/time.Second), &until, "", ""
			if err := b.write(r.Context(), job, fmt.Sprintf("taken by %s (attempt %d, lease %s)", principal(who), job.status.Attempt, lease)); err != nil {
				job.status = prev
				b.mu.Unlock()
				b.s.log.Error("build queue: take", "request", prev.ID, "error", err)
				http.Error(w, "nuon: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			b.queue = b.queue[1:]
			sub, st := job.sub, job.status
			b.mu.Unlock()
			b.s.log.Info("build request taken", "request", st.ID, "agent", st.Agent, "attempt", st.Attempt, "lease", lease)
			writeJSON(w, http.StatusOK, sub)
			return
		}
		wake, first := b.wake, b.nextExpiry()
		b.mu.Unlock()
		var expiry <-chan time.Time
		if !first.IsZero() {
			e := time.NewTimer(max(first.Sub(b.s.cfg.Now()), 0) + 10*time.Millisecond)
			defer e.Stop()
			expiry = e.C
		}
		select {
		case <-wake:
		case <-expiry:
		case <-deadline.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// building finds request id being built by who, or answers why not.
// b.mu is held.
func (b *builds) building(w http.ResponseWriter, id string, who signature.AllowedSigner) *buildJob {
	if err := b.load(); err != nil {
		http.Error(w, "nuon: "+err.Error(), http.StatusServiceUnavailable)
		return nil
	}
	b.expire()
	job, ok := b.jobs[id]
	switch {
	case !ok:
		http.Error(w, "nuon: no build request "+id, http.StatusNotFound)
		return nil
	case job.status.State != schemas.BuildRunning || job.status.Agent != principal(who):
		http.Error(w, "nuon: build request "+id+" is not being built by "+principal(who)+" (its lease may have expired)", http.StatusConflict)
		return nil
	}
	return job
}

// lease renews the calling agent's lease on a request it builds and
// records the phase it reports; not written to the queue ref.
func (b *builds) lease(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	var p schemas.BuildProgress
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		http.Error(w, "nuon: the body is not a build progress: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(p.Phase) > 64 {
		http.Error(w, "nuon: the phase is longer than 64 bytes", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	job := b.building(w, r.PathValue("id"), who)
	if job == nil {
		return
	}
	until := b.s.cfg.Now().UTC().Add(time.Duration(job.status.LeaseSeconds) * time.Second)
	job.status.LeaseUntil = &until
	if p.Phase != job.status.Phase {
		job.status.Phase = p.Phase
		b.changed(job)
	}
	writeJSON(w, http.StatusOK, job.status)
}

// result records the answer of the agent that took the request.
func (b *builds) result(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	var out schemas.BuildOutcome
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		http.Error(w, "nuon: the body is not a build outcome: "+err.Error(), http.StatusBadRequest)
		return
	}
	if out.ReleaseCommit != "" && !commitHex(out.ReleaseCommit) {
		http.Error(w, "nuon: releaseCommit is not a commit id", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	job := b.building(w, r.PathValue("id"), who)
	if job == nil {
		return
	}
	prev := job.status
	now := b.s.cfg.Now().UTC()
	job.status.Finished, job.status.LeaseUntil, job.status.Phase = &now, nil, ""
	job.status.State, job.status.Error, job.status.Result, job.status.ReleaseCommit = schemas.BuildSucceeded, out.Error, out.Result, out.ReleaseCommit
	subject := "succeeded"
	if out.ReleaseCommit != "" {
		subject += ": released in " + out.ReleaseCommit
	}
	if out.Error != "" {
		job.status.State, subject = schemas.BuildFailed, "failed"
	}
	if err := b.write(r.Context(), job, subject+" (by "+principal(who)+")"); err != nil {
		job.status = prev
		b.s.log.Error("build queue: answer", "request", prev.ID, "error", err)
		http.Error(w, "nuon: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	b.s.log.Info("build request answered", "request", job.status.ID, "state", job.status.State, "release", job.status.ReleaseCommit)
	writeJSON(w, http.StatusOK, job.status)
}

func commitHex(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func principal(who signature.AllowedSigner) string {
	if len(who.Principals) > 0 {
		return who.Principals[0]
	}
	return buildreq.KeyID(who.Key)
}

// longPoll reads ?wait=SECONDS, bounded by maxBuildLongPoll.
func longPoll(r *http.Request) time.Duration {
	n, err := strconv.Atoi(r.URL.Query().Get("wait"))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxBuildLongPoll)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// mainSources reads the sources main allows builds from
// (buildreq.MainSources).
func (b *builds) mainSources(main plumbing.Hash) (*schemas.BuildSources, error) {
	repo, err := gitrepo.Open(b.s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	m, err := maingit.Open(repo.Storer(), main)
	if err != nil {
		return nil, err
	}
	return buildreq.MainSources(m, b.s.cfg.Now())
}
