package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
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
	done    chan struct{}
}

// maxBuildQueue bounds the requests waiting for a build agent.
const maxBuildQueue = 1000

// builds queues build requests for build agents. The queue lives in the
// server's memory: a restart loses requests not yet answered, and vendor
// CI files them again under new IDs (the build agent's own ledger refuses
// an ID it took before).
type builds struct {
	s                  *Server
	requesters, agents *mainKeys
	verifier           *request.Verifier

	mu    sync.Mutex
	jobs  map[string]*buildJob
	queue []string
	wake  chan struct{} // closed and replaced when a request is queued
}

// buildRoutes adds the build endpoints.
func (s *Server) buildRoutes() {
	b := &builds{s: s, jobs: map[string]*buildJob{}, wake: make(chan struct{}),
		requesters: &mainKeys{s: s, file: schemas.BuildTrustFile},
		agents:     &mainKeys{s: s, file: schemas.BuildAgentTrustFile}}
	b.verifier = &request.Verifier{Key: b.lookup, MaxSkew: s.cfg.MaxSkew, Now: s.cfg.Now}
	s.mux.HandleFunc("POST "+BuildsPath+"/requests", b.authed(b.requesters, b.file))
	s.mux.HandleFunc("GET "+BuildsPath+"/requests/{id}", b.authed(nil, b.get))
	s.mux.HandleFunc("POST "+BuildsPath+"/next", b.authed(b.agents, b.next))
	s.mux.HandleFunc("POST "+BuildsPath+"/requests/{id}/result", b.authed(b.agents, b.result))
	s.mux.HandleFunc(BuildsPath+"/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nuon: not a build endpoint: "+BuildsPath+" serves POST requests, GET requests/ID, POST next and POST requests/ID/result", http.StatusNotFound)
	})
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
		if b.s.writer != nil {
			http.Error(w, "nuon: builds are served by the writer, not by a read replica", http.StatusMisdirectedRequest)
			return
		}
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
	b.prune()
	if len(b.queue) >= maxBuildQueue {
		b.mu.Unlock()
		http.Error(w, fmt.Sprintf("nuon: %d build requests are waiting for a build agent: try again later", len(b.queue)), http.StatusServiceUnavailable)
		return
	}
	if _, ok := b.jobs[job.status.ID]; ok {
		b.mu.Unlock()
		b.s.metrics.refused(reasonBuildRequest)
		http.Error(w, "nuon: "+buildreq.ErrReplayed.Error()+": build request "+job.status.ID+" was filed before", http.StatusConflict)
		return
	}
	b.jobs[job.status.ID] = job
	b.queue = append(b.queue, job.status.ID)
	close(b.wake)
	b.wake = make(chan struct{})
	st := job.status
	b.mu.Unlock()
	b.s.log.Info("build request filed", "request", st.ID, "component", st.Component, "commit", st.Commit, "principal", st.Requester)
	writeJSON(w, http.StatusAccepted, st)
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
	return 0, &buildJob{sub: sub, expires: req.Expires, done: make(chan struct{}), status: schemas.BuildStatus{
		ID: req.ID, State: schemas.BuildQueued, Component: req.Component, Commit: req.Commit, Version: req.Version,
		Requester: req.Requester, Filed: b.s.cfg.Now().UTC()}}, nil
}

// prune forgets answered requests past their expiry: filed again, they
// are refused as expired, so their ids need no remembering. b.mu is held.
func (b *builds) prune() {
	now := b.s.cfg.Now()
	for id, job := range b.jobs {
		if job.status.Finished != nil && now.After(job.expires) {
			delete(b.jobs, id)
		}
	}
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
// that long for the build to finish first.
func (b *builds) get(w http.ResponseWriter, r *http.Request, _ signature.AllowedSigner) {
	b.mu.Lock()
	job, ok := b.jobs[r.PathValue("id")]
	b.mu.Unlock()
	if !ok {
		http.Error(w, "nuon: no build request "+r.PathValue("id"), http.StatusNotFound)
		return
	}
	if wait := longPoll(r); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-job.done:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	b.mu.Lock()
	st := job.status
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

// next hands the oldest queued request to the calling build agent,
// waiting up to ?wait=SECONDS for one; 204 when none came.
func (b *builds) next(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	deadline := time.NewTimer(longPoll(r))
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if len(b.queue) > 0 {
			job := b.jobs[b.queue[0]]
			b.queue = b.queue[1:]
			now := b.s.cfg.Now().UTC()
			job.status.State, job.status.Agent, job.status.Started = schemas.BuildRunning, principal(who), &now
			sub := job.sub
			b.mu.Unlock()
			b.s.log.Info("build request taken", "request", job.status.ID, "agent", principal(who))
			writeJSON(w, http.StatusOK, sub)
			return
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
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
	b.mu.Lock()
	defer b.mu.Unlock()
	job, ok := b.jobs[r.PathValue("id")]
	switch {
	case !ok:
		http.Error(w, "nuon: no build request "+r.PathValue("id"), http.StatusNotFound)
		return
	case job.status.State != schemas.BuildRunning || job.status.Agent != principal(who):
		http.Error(w, "nuon: build request "+job.status.ID+" is not being built by "+principal(who), http.StatusConflict)
		return
	}
	now := b.s.cfg.Now().UTC()
	job.status.Finished = &now
	job.status.State, job.status.Error, job.status.Result = schemas.BuildSucceeded, out.Error, out.Result
	if out.Error != "" {
		job.status.State = schemas.BuildFailed
	}
	close(job.done)
	b.s.log.Info("build request answered", "request", job.status.ID, "state", job.status.State)
	writeJSON(w, http.StatusOK, job.status)
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
