package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// OperatorPath is where the server answers operators (nuon status, logs,
// debug and requests with --server): git smart HTTP, read-only, of the
// repository's branches under OperatorPath, and POST OperatorPath/requests
// to file a request. Every request is signed like an agent's (package
// internal/signature/request) with an operator's key from trust/requests
// on main, under the key id requests.KeyID gives it.
const OperatorPath = requests.ServerPath

// Reasons an operator's request is refused, as the refusals metric counts
// them.
const (
	reasonOperatorKey     = "operator_key"
	reasonOperatorRequest = "operator_request"
	reasonOperatorFiled   = "operator_request_filed"
)

// lookup is the operators' request.Verifier key function.
func (k *mainKeys) lookup(id string) (ssh.PublicKey, bool) {
	_, byID := k.current()
	s, ok := byID[id]
	return s.Key, ok
}

// readMainFile reads one file of a main commit.
func readMainFile(dir string, main plumbing.Hash, name string) ([]byte, error) {
	if main.IsZero() {
		return nil, object.ErrFileNotFound
	}
	repo, err := gitrepo.Open(dir)
	if err != nil {
		return nil, err
	}
	c, err := object.GetCommit(repo.Storer(), main)
	if err != nil {
		return nil, err
	}
	f, err := c.File(name)
	if err != nil {
		return nil, err
	}
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, 1<<20))
}

// operator serves operators.
type operator struct {
	s         *Server
	keys      *mainKeys
	verifier  *request.Verifier
	fileMu    sync.Mutex // one filing at a time: each builds on the last
	approvers approverCache
}

// operatorRoutes adds the operators' endpoints.
func (s *Server) operatorRoutes() {
	o := &operator{s: s, keys: &mainKeys{s: s, file: requests.TrustFile}}
	o.verifier = &request.Verifier{Key: o.lookupAny, MaxSkew: s.cfg.MaxSkew, Now: s.cfg.Now}
	// Approvers read the branches too: the plans that wait are in the
	// installs' statuses (nuon approvals).
	s.mux.HandleFunc("GET "+OperatorPath+"/info/refs", o.authedRead(o.advertise))
	s.mux.HandleFunc("POST "+OperatorPath+"/git-upload-pack", o.authedRead(o.uploadPack))
	s.mux.HandleFunc("POST "+OperatorPath+"/requests", o.authed(o.file))
	s.mux.HandleFunc("POST "+ApprovalsPath, o.authedApprover(o.fileApproval))
	s.mux.HandleFunc("POST "+requests.RolloutPath, o.authed(o.controlRollout))
	// Every install's last signed contact, for nuon status --server.
	s.mux.HandleFunc("GET "+OperatorPath+"/liveness", o.authed(func(w http.ResponseWriter, r *http.Request, _ signature.AllowedSigner) {
		s.serveLiveness(w, r)
	}))
	s.mux.HandleFunc(OperatorPath+"/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nuon: not an operator endpoint: "+OperatorPath+" serves GET info/refs, POST git-upload-pack, POST requests, POST approvals, POST rollouts and GET liveness", http.StatusNotFound)
	})
}

// authed lets through requests signed by an operator key that
// trust/requests on main lists. An install's key is refused here, as an
// operator's key is on the installs' endpoints; so is an approver's key.
func (o *operator) authed(next func(http.ResponseWriter, *http.Request, signature.AllowedSigner)) http.HandlerFunc {
	return o.authedAs(func(id string) (signature.AllowedSigner, string) {
		_, byID := o.keys.current()
		if who, ok := byID[id]; ok {
			return who, ""
		}
		// An approver's key, or main moved between the two reads and
		// dropped the key.
		return signature.AllowedSigner{}, "the key is not trusted for requests: add it to " + requests.TrustFile + " on main"
	}, next)
}

// authedAs checks the HTTP signature with a key of trust/requests or
// trust/approvals on main (lookupAny), then asks role whether this
// endpoint takes that key: a refusal says why and how to fix it.
func (o *operator) authedAs(role func(id string) (signature.AllowedSigner, string), next func(http.ResponseWriter, *http.Request, signature.AllowedSigner)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := o.verifier.Verify(r)
		if err != nil {
			text := refusalText(err)
			if errors.Is(err, request.ErrUnknownInstall) {
				text = "the key is not trusted for requests: add it to " + requests.TrustFile + " on main"
			}
			o.s.log.Warn("operator request refused", "key", id, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
			reason := authReason(err)
			if errors.Is(err, request.ErrUnknownInstall) {
				reason = reasonOperatorKey
			}
			o.s.metrics.refused(reason)
			w.Header().Set("WWW-Authenticate", request.Scheme)
			http.Error(w, "nuon: "+text, http.StatusUnauthorized)
			return
		}
		who, refusal := role(id)
		if refusal != "" {
			o.s.log.Warn("operator request refused", "key", id, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", refusal)
			o.s.metrics.refused(reasonOperatorKey)
			http.Error(w, "nuon: "+refusal, http.StatusUnauthorized)
			return
		}
		next(w, r, who)
	}
}

// operatorHideRefs hide every ref but the branches from an operator's
// fetch: main, the rendered, install, status and requests refs. The
// archive and the server's own refs stay out.
var operatorHideRefs = []string{"-c", "uploadpack.hideRefs=refs/", "-c", "uploadpack.hideRefs=!refs/heads/"}

func (o *operator) advertise(w http.ResponseWriter, r *http.Request, _ signature.AllowedSigner) {
	if r.URL.Query().Get("service") != "git-upload-pack" {
		http.Error(w, "nuon: operators only fetch; file requests with POST "+OperatorPath+"/requests", http.StatusForbidden)
		return
	}
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, "nuon: "+err.Error(), http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache")
	o.runUploadPack(w, r, nil, true)
}

func (o *operator) uploadPack(w http.ResponseWriter, r *http.Request, _ signature.AllowedSigner) {
	raw, err := body(r)
	if err != nil {
		o.s.metrics.refused(reasonBodyDigest)
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	o.runUploadPack(w, r, raw, false)
}

// runUploadPack runs git upload-pack on the repository's branches.
func (o *operator) runUploadPack(w http.ResponseWriter, r *http.Request, in []byte, advertise bool) {
	release, err := o.s.gitSlot(r.Context())
	if err != nil {
		return
	}
	defer release()
	args := append(append([]string{}, operatorHideRefs...), "upload-pack", "--stateless-rpc")
	if advertise {
		args = append(args, "--advertise-refs")
	}
	cmd := exec.CommandContext(r.Context(), "git", append(args, o.s.cfg.Dir)...)
	cmd.Env = os.Environ()
	if p := r.Header.Get("Git-Protocol"); p != "" {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+p)
	}
	if advertise && !strings.Contains(r.Header.Get("Git-Protocol"), "version=2") {
		w.Write(append(pkt(nil, "# service=git-upload-pack\n"), pktFlush...))
	}
	cmd.Stdin = strings.NewReader(string(in))
	cmd.Stdout = w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil && r.Context().Err() == nil {
		o.s.log.Error("operator upload-pack failed", "error", err, "stderr", strings.TrimSpace(stderr.String()))
	}
}

// Filed is the answer to POST OperatorPath/requests.
type Filed struct {
	// ID and Install name the request.
	ID      string `json:"id"`
	Install string `json:"install"`
	// Commit is the filing commit, now the tip of requests.Ref.
	Commit string `json:"commit"`
	// Desired is the install's desired commit once rendered with the
	// request; empty when the server does not render.
	Desired string `json:"desired,omitempty"`
}

// file files one signed request: the operator's own, for an install on
// main, not filed before, on top of requests.Ref as it is; then renders
// at once so the install's next poll finds it.
func (o *operator) file(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	if o.s.writer != nil {
		// A replica files nothing: the writer checks the signature again
		// (with its own replay cache) and files, as with a status push.
		o.s.forward(w, r, "operator "+requests.KeyID(who.Key))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, requests.MaxSubmission+1))
	if err != nil {
		o.s.metrics.refused(reasonBodyDigest)
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	status, res, err := o.fileSigned(r.Context(), data, who)
	if err != nil {
		o.s.log.Warn("operator request refused", "key", requests.KeyID(who.Key), "principal", strings.Join(who.Principals, ","), "reason", err.Error())
		reason := reasonOperatorRequest
		if errors.Is(err, requests.ErrFiled) {
			reason = reasonOperatorFiled
		}
		if status >= 500 {
			reason = reasonOther
		}
		o.s.metrics.refused(reason)
		http.Error(w, "nuon: "+err.Error(), status)
		return
	}
	o.s.log.Info("request filed", "install", res.Install, "request", res.ID, "commit", res.Commit, "principal", strings.Join(who.Principals, ","))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// fileSigned checks and files one submission; on error it returns the
// HTTP status to answer with.
func (o *operator) fileSigned(ctx context.Context, data []byte, who signature.AllowedSigner) (int, *Filed, error) {
	if len(data) > requests.MaxSubmission {
		return http.StatusRequestEntityTooLarge, nil, fmt.Errorf("the request is larger than %d bytes", requests.MaxSubmission)
	}
	var sub schemas.SignedRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sub); err != nil {
		return http.StatusBadRequest, nil, fmt.Errorf("the body is not a signed request (JSON with file and commit): %v", err)
	}
	objs, err := requests.Rebuild(sub)
	if err != nil {
		return http.StatusBadRequest, nil, err
	}
	// The same checks as the renderer's, with this key alone: the request
	// must be signed by the key that signed the HTTP request.
	req, err := requests.Verify(sub, &signature.AllowedSigners{Signers: []signature.AllowedSigner{who}})
	if err != nil {
		return http.StatusForbidden, nil, fmt.Errorf("%w (the request must be signed by the key that signs the HTTP request, listed in %s on main)", err, requests.TrustFile)
	}
	if objs.Path != schemas.RequestPath(req.Install, req.ID) {
		return http.StatusBadRequest, nil, fmt.Errorf("%s %q is not %s", requests.TrailerRequest, objs.Path, schemas.RequestPath(req.Install, req.ID))
	}
	now := o.s.cfg.Now()
	if err := requests.Check(req, req.Install, now); err != nil {
		return http.StatusForbidden, nil, fmt.Errorf("request %s: %w", req.ID, err)
	}
	if req.Created.After(now.Add(o.s.cfg.MaxSkew)) {
		return http.StatusForbidden, nil, fmt.Errorf("request %s: created %s, in the future of the server's clock", req.ID, req.Created.UTC().Format(time.RFC3339))
	}
	if err := o.inScope(req, who); err != nil {
		return http.StatusForbidden, nil, err
	}
	known, err := o.s.keys.known(req.Install)
	if err != nil {
		return http.StatusServiceUnavailable, nil, fmt.Errorf("read main: %w", err)
	}
	if !known {
		if o.s.isArchived(req.Install) {
			return http.StatusNotFound, nil, fmt.Errorf("install %s is archived (nuon install delete): it takes no requests", req.Install)
		}
		return http.StatusNotFound, nil, fmt.Errorf("no install %s on main (installs/%s.yaml)", req.Install, req.Install)
	}

	o.fileMu.Lock()
	defer o.fileMu.Unlock()
	head, err := revParse(ctx, o.s.cfg.Dir, requests.Ref)
	if err != nil {
		head = plumbing.ZeroHash
	}
	repo, err := gitrepo.Open(o.s.cfg.Dir)
	if err != nil {
		return http.StatusInternalServerError, nil, err
	}
	if filed, err := requests.FiledAt(repo.Storer(), head, objs.Path); err != nil {
		return http.StatusInternalServerError, nil, err
	} else if filed {
		return http.StatusConflict, nil, fmt.Errorf("%w: %s is on %s already", requests.ErrFiled, objs.Path, requests.Ref)
	}
	if objs.Parent != head {
		return http.StatusConflict, nil, fmt.Errorf("%s is at %s, the request builds on %s: fetch it and file on top", requests.Ref, describeHash(head), describeHash(objs.Parent))
	}
	if status, err := o.fileCommit(ctx, repo, requests.Ref, head, objs.Batch, objs.Commit, "request"); err != nil {
		return status, nil, err
	}
	res := &Filed{ID: req.ID, Install: req.Install, Commit: objs.Commit.String()}
	if h, ok := o.s.refs.get(schemas.InstallRef(req.Install)); ok {
		res.Desired = h.String()
	}
	return http.StatusOK, res, nil
}

// fileCommit moves ref from head to commit, whose objects are in b: on
// the upstream first when the server has one (the server's next fetch
// reads the ref from there), under a lease, then here; then renders at
// once, so the install's next poll finds what was filed, not after the
// server's own poll interval. what names it in messages. On error it
// returns the HTTP status to answer with.
func (o *operator) fileCommit(ctx context.Context, repo *gitrepo.Repo, ref string, head plumbing.Hash, b *gitobj.Batch, commit plumbing.Hash, what string) (int, error) {
	if err := b.Flush(repo.Storer()); err != nil {
		return http.StatusInternalServerError, fmt.Errorf("write the %s's objects: %w", what, err)
	}
	if o.s.cfg.Upstream != "" {
		lease := "--force-with-lease=" + ref + ":"
		if !head.IsZero() {
			lease += head.String()
		}
		if err := gitEnv(ctx, o.s.cfg.Dir, o.s.upstreamEnv, "push", "--quiet", lease, o.s.cfg.Upstream, commit.String()+":"+ref); err != nil {
			if msg := err.Error(); strings.Contains(msg, "stale info") || strings.Contains(msg, "rejected") {
				// Filed upstream by someone else since the last fetch:
				// fetch now, so the next try builds on it.
				if err := o.s.Sync(ctx); err != nil {
					o.s.log.Error("follow main after a refused push", "ref", ref, "error", err)
				}
				return http.StatusConflict, fmt.Errorf("%s %w: fetch it and file on top", ref, errMovedUpstream)
			}
			return http.StatusBadGateway, upstreamError("file the "+what+" on", o.s.cfg.Upstream, o.s.cfg.UpstreamAuth, err)
		}
	}
	old := head.String()
	if head.IsZero() {
		old = ""
	}
	if err := git(ctx, o.s.cfg.Dir, "update-ref", ref, commit.String(), old); err != nil {
		return http.StatusConflict, fmt.Errorf("move %s: %w", ref, err)
	}
	if err := o.s.Sync(ctx); err != nil {
		o.s.log.Error("render after filing", "ref", ref, "commit", commit.String(), "error", err)
	}
	return http.StatusOK, nil
}

// errMovedUpstream marks a filing refused because the ref moved on the
// upstream since the server last fetched it (it has fetched it since).
var errMovedUpstream = errors.New("moved upstream")

func describeHash(h plumbing.Hash) string {
	if h.IsZero() {
		return "nothing (no request filed yet)"
	}
	return h.String()
}
