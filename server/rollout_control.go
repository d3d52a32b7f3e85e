package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// reasonRolloutRequest counts refused rollout requests.
const reasonRolloutRequest = "operator_rollout_request"

// RolloutControlled is the answer to POST requests.RolloutPath.
type RolloutControlled struct {
	Channel string `json:"channel"`
	Action  string `json:"action"`
	// Rollout is the rollout's number and Phase its phase now.
	Rollout int    `json:"rollout"`
	Phase   string `json:"phase"`
	// Commit is the decision commit, now the tip of the channel's
	// rollout ref; Request the operator's request commit it carries.
	Commit  string `json:"commit"`
	Request string `json:"request"`
	By      string `json:"by"`
}

// controlRollout carries out an operator's signed rollout request (nuon
// rollout pause|resume|abort): the request must be signed by the key
// that signed the HTTP request, for a channel with a rollout, within its
// deadline and never carried out before; it becomes a signed decision on
// the channel's rollout ref that keeps the request.
func (o *operator) controlRollout(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	if o.s.writer != nil {
		o.s.forward(w, r, "operator "+requests.KeyID(who.Key))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, requests.MaxSubmission+1))
	if err != nil {
		o.s.metrics.refused(reasonBodyDigest)
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	status, res, err := o.s.rollouts.control(r.Context(), data, who)
	if err != nil {
		o.s.log.Warn("rollout request refused", "key", requests.KeyID(who.Key), "principal", strings.Join(who.Principals, ","), "reason", err.Error())
		reason := reasonRolloutRequest
		if status >= 500 {
			reason = reasonOther
		}
		o.s.metrics.refused(reason)
		http.Error(w, "nuon: "+err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// control checks one submitted rollout request and carries it out; on
// error it returns the HTTP status to answer with, and nothing moved.
func (r *rollouts) control(ctx context.Context, data []byte, who signature.AllowedSigner) (int, *RolloutControlled, error) {
	s := r.s
	if len(data) > requests.MaxSubmission {
		return http.StatusRequestEntityTooLarge, nil, fmt.Errorf("the request is larger than %d bytes", requests.MaxSubmission)
	}
	var sub schemas.SignedRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sub); err != nil {
		return http.StatusBadRequest, nil, fmt.Errorf("the body is not a signed request (JSON with file and commit): %v", err)
	}
	req, commit, err := requests.VerifyRollout(sub, &signature.AllowedSigners{Signers: []signature.AllowedSigner{who}})
	if err != nil {
		st := http.StatusBadRequest
		if errors.Is(err, requests.ErrUntrusted) {
			st = http.StatusForbidden
		}
		return st, nil, fmt.Errorf("%w (the request must be signed by the key that signs the HTTP request, listed in %s on main)", err, requests.TrustFile)
	}
	now := s.cfg.Now()
	switch {
	case !now.Before(req.Deadline):
		return http.StatusForbidden, nil, fmt.Errorf("request %s: expired: its deadline %s has passed", req.ID, req.Deadline.UTC().Format(time.RFC3339))
	case req.Created.After(now.Add(s.cfg.MaxSkew)):
		return http.StatusForbidden, nil, fmt.Errorf("request %s: created %s, in the future of the server's clock", req.ID, req.Created.UTC().Format(time.RFC3339))
	}
	if err := rolloutInScope(s, req, who); err != nil {
		return http.StatusForbidden, nil, err
	}
	if s.cfg.RenderKey == nil {
		return http.StatusServiceUnavailable, nil, fmt.Errorf("this server renders nothing (no render key), so it runs no rollout")
	}
	// Bring the controller up to main and the statuses first: the request
	// acts on the rollout as it stands now.
	if _, err := r.evaluate(ctx, true); err != nil {
		s.log.Error("rollout evaluation before a request", "error", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.channels[req.Channel]
	switch {
	case !ok:
		return http.StatusNotFound, nil, fmt.Errorf("channel %s has no rollout: main has no channels/%s.yaml, or it declares no rollout", req.Channel, req.Channel)
	case c.err != nil:
		return http.StatusConflict, nil, fmt.Errorf("channel %s: its rollout ref cannot be read, nothing moves until it is fixed: %w", req.Channel, c.err)
	case c.state == nil:
		return http.StatusConflict, nil, fmt.Errorf("channel %s has no rollout yet", req.Channel)
	}
	repo, err := gitrepo.Open(s.cfg.Dir)
	if err != nil {
		return http.StatusInternalServerError, nil, err
	}
	if done, err := carriedOut(repo, c.tip, commit, req.Created.Add(-s.cfg.MaxSkew)); err != nil {
		return http.StatusInternalServerError, nil, err
	} else if done != "" {
		return http.StatusConflict, nil, fmt.Errorf("request %s (commit %s) was carried out already, by decision %s: a request is carried out once", req.ID, commit, done)
	}
	key := requests.KeyID(who.Key)
	next, err := rollout.Control(c.state, req.Action, req.Reason, schemas.RolloutRequestRef{
		ID: req.ID, Principal: req.Requester, Key: key, Commit: commit.String(), Signed: sub}, now)
	if err != nil {
		return http.StatusConflict, nil, fmt.Errorf("channel %s: %w", req.Channel, err)
	}
	tip, err := r.write(ctx, repo, c, next)
	if err != nil {
		return http.StatusConflict, nil, err
	}
	s.log.Info("rollout decision", "channel", req.Channel, "decision", next.Decision.Kind, "by", next.Decision.By, "request", commit.String(), "commit", tip.String())
	c.state, c.tip = next, tip
	if next.Phase == schemas.RolloutRunning {
		// Resumed: statuses pushed while it was paused were not read.
		if k := rollout.Opened(next); k > 0 {
			for _, id := range next.Waves[k-1].Installs {
				r.readStatus(repo.Storer(), id)
			}
		}
	}
	r.decisions.WithLabelValues(next.Decision.Kind).Inc()
	r.gauges()
	if s.mirror != nil {
		s.mirror.add(schemas.RolloutRef(req.Channel))
	}
	// The render's trailer names each rollout ref's tip: render again.
	s.renderMu.Lock()
	s.rendered = plumbing.ZeroHash
	s.renderMu.Unlock()
	if err := s.Sync(ctx); err != nil {
		s.log.Error("render after a rollout request", "channel", req.Channel, "error", err)
	}
	return http.StatusOK, &RolloutControlled{Channel: req.Channel, Action: req.Action, Rollout: next.Rollout, Phase: next.Phase,
		Commit: tip.String(), Request: commit.String(), By: next.Decision.By}, nil
}

// carriedOut returns the decision commit of the rollout ref (from tip,
// first parents, back to decisions made before since) that carried out
// request commit req, "" when none did.
func carriedOut(repo *gitrepo.Repo, tip, req plumbing.Hash, since time.Time) (string, error) {
	for h, n := tip, 0; !h.IsZero() && n < 100000; n++ {
		c, err := gitobj.ReadCommit(repo.Storer(), h)
		if err != nil {
			return "", err
		}
		if v, ok := schemas.Trailer(c.Message, rollout.TrailerRolloutRequest); ok && strings.HasPrefix(v, req.String()+" ") {
			return h.String(), nil
		}
		if c.Author.When.Before(since.Add(-time.Second)) {
			return "", nil
		}
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return "", nil
}

// rolloutInScope judges a rollout request against the trust root on main,
// when main has one: the operators role's key must be valid now and its
// scopes must allow the channel and the kind "rollout".
func rolloutInScope(s *Server, req *schemas.RolloutRequest, who signature.AllowedSigner) error {
	root, err := mainRoot(s.cfg.Dir, s.keys.mainCommit(), s.cfg.Now)
	if err != nil {
		return fmt.Errorf("%w: the trust root on main does not verify, so no scope can be checked: %w", ErrOutOfScope, err)
	}
	if root == nil {
		return nil
	}
	t := trust.Target{Channel: req.Channel, RequestKind: trust.KindRollout}
	if _, err := root.Authorize(trust.RoleOperators, ssh.FingerprintSHA256(who.Key), s.cfg.Now(), t); err != nil {
		return fmt.Errorf("%w: rollout %s of %s: %w", ErrOutOfScope, req.Action, req.Channel, err)
	}
	return nil
}
