package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// ApprovalsPath is where an approver files a signed approval through the
// server (nuon approve|reject --server): POST a schemas.SignedApproval as
// JSON, the HTTP request signed (package internal/signature/request) by
// the approver's own key from trust/approvals on main, under the key id
// requests.KeyID gives it.
const ApprovalsPath = OperatorPath + "/approvals"

// MaxApprovalLife bounds an approval's life (expires - created): it is
// for a plan about to be applied, not a standing permission.
const MaxApprovalLife = 7 * 24 * time.Hour

// Reasons a filed approval is refused, as the refusals metric counts them.
const (
	reasonApproverKey = "approver_key"
	reasonApproval    = "operator_approval"
)

// ApprovalFiled is the answer to POST ApprovalsPath.
type ApprovalFiled struct {
	Install   string    `json:"install"`
	Component string    `json:"component"`
	Plan      string    `json:"plan"`
	Decision  string    `json:"decision"`
	Approver  string    `json:"approver"`
	Expires   time.Time `json:"expires"`
	// Path is the approval's file on schemas.ApprovalsRef, Commit the
	// ref's new tip.
	Path   string `json:"path"`
	Commit string `json:"commit"`
	// Desired is the install's desired commit once rendered with the
	// approval; empty when the server does not render.
	Desired string `json:"desired,omitempty"`
}

// approverTrust is what main says of approvers: trust/approvals, checked,
// with the keys that never approve (the render and request keys, the
// root's render and operators roles) excluded, and its keys by key id.
type approverTrust struct {
	approvers *policy.Approvers
	byID      map[string]signature.AllowedSigner
	root      *trust.Root
}

// approverTrustTTL is how long approverTrust keeps what it read of one
// main: the trust root's chain is judged at a time.
const approverTrustTTL = time.Minute

// approverCache keeps the last approverTrust: every request with a key id
// trust/requests does not know asks for it, and reading it verifies the
// trust root's signatures.
type approverCache struct {
	mu   sync.Mutex
	main plumbing.Hash
	at   time.Time
	t    *approverTrust
	err  error
}

// approverTrust returns the approvers of the main the server follows (nil
// approvers when main has no trust/approvals), read again when main moves
// or after approverTrustTTL.
func (o *operator) approverTrust() (*approverTrust, error) {
	main := o.s.keys.mainCommit()
	c := &o.approvers
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); c.main != main || now.Sub(c.at) > approverTrustTTL || (c.t == nil && c.err == nil) {
		c.t, c.err = o.readApproverTrust(main)
		c.main, c.at = main, now
	}
	return c.t, c.err
}

// readApproverTrust reads the approvers of main.
func (o *operator) readApproverTrust(main plumbing.Hash) (*approverTrust, error) {
	t := &approverTrust{byID: map[string]signature.AllowedSigner{}}
	keys, err := o.s.roleKeysAt(main, trust.RoleApprovers)
	if err != nil {
		return nil, err
	}
	data := keys.Data
	if data == nil {
		return t, nil
	}
	if t.approvers, err = policy.ParseApprovers(keys.From, data); err != nil {
		return nil, err
	}
	if t.root, err = mainRoot(o.s.cfg.Dir, main, o.s.cfg.Now); err != nil {
		return nil, fmt.Errorf("the trust root on main does not verify: %w", err)
	}
	if o.s.cfg.RenderKey != nil {
		t.approvers.Exclude("render", o.s.cfg.RenderKey.PublicKey())
	}
	if reqs, _ := o.keys.current(); reqs != nil {
		for _, s := range reqs.Signers {
			t.approvers.Exclude("request", s.Key)
		}
	}
	t.approvers.ExcludeRoot(t.root)
	t.approvers.Keys(func(name string, key ssh.PublicKey) {
		t.byID[requests.KeyID(key)] = signature.AllowedSigner{Principals: []string{name}, Key: key}
	})
	return t, nil
}

// lookupAny is the operators' request.Verifier key function: a key of
// trust/requests, else an approver's key of trust/approvals. Each
// endpoint then says which it takes (authed, authedRead, authedApprover).
func (o *operator) lookupAny(id string) (ssh.PublicKey, bool) {
	if k, ok := o.keys.lookup(id); ok {
		return k, true
	}
	t, err := o.approverTrust()
	if err != nil {
		return nil, false
	}
	s, ok := t.byID[id]
	return s.Key, ok
}

// authedRead lets through the operators and the approvers: an approver
// reads the plans that wait (nuon approvals) before approving one.
func (o *operator) authedRead(next func(http.ResponseWriter, *http.Request, signature.AllowedSigner)) http.HandlerFunc {
	return o.authedAs(func(id string) (signature.AllowedSigner, string) {
		if _, byID := o.keys.current(); byID[id].Key != nil {
			return byID[id], ""
		}
		t, err := o.approverTrust()
		if err != nil {
			return signature.AllowedSigner{}, "the key is not trusted: " + err.Error()
		}
		if s, ok := t.byID[id]; ok {
			return s, ""
		}
		return signature.AllowedSigner{}, "the key is not trusted for requests or approvals: add it to " + requests.TrustFile + " or " + schemas.ApproversPath + " on main"
	}, next)
}

// authedApprover lets through the approvers' keys only: listed in
// trust/approvals on main and none of the render or request keys.
func (o *operator) authedApprover(next func(http.ResponseWriter, *http.Request, signature.AllowedSigner)) http.HandlerFunc {
	return o.authedAs(func(id string) (signature.AllowedSigner, string) {
		if _, byID := o.keys.current(); byID[id].Key != nil {
			return signature.AllowedSigner{}, "a request key never approves: sign with your approver key, listed in " + schemas.ApproversPath + " on main and nowhere else"
		}
		t, err := o.approverTrust()
		if err != nil {
			return signature.AllowedSigner{}, "the approvers on main cannot be read: " + err.Error()
		}
		if s, ok := t.byID[id]; ok {
			return s, ""
		}
		return signature.AllowedSigner{}, "the key is not trusted for approvals: add it to " + schemas.ApproversPath + " on main"
	}, next)
}

// fileApproval files one signed approval on schemas.ApprovalsRef (here
// and upstream) and renders its install at once.
func (o *operator) fileApproval(w http.ResponseWriter, r *http.Request, who signature.AllowedSigner) {
	if o.s.writer != nil {
		o.s.forward(w, r, "approver "+requests.KeyID(who.Key))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, requests.MaxSubmission+1))
	if err != nil {
		o.s.metrics.refused(reasonBodyDigest)
		http.Error(w, "nuon: read approval: "+err.Error(), http.StatusBadRequest)
		return
	}
	status, res, err := o.fileSignedApproval(r.Context(), data, who)
	if err != nil {
		o.s.log.Warn("approval refused", "key", requests.KeyID(who.Key), "approver", strings.Join(who.Principals, ","), "reason", err.Error())
		reason := reasonApproval
		if status >= 500 {
			reason = reasonOther
		}
		o.s.metrics.refused(reason)
		http.Error(w, "nuon: "+err.Error(), status)
		return
	}
	o.s.log.Info("approval filed", "install", res.Install, "component", res.Component, "plan", res.Plan, "decision", res.Decision, "approver", res.Approver, "commit", res.Commit)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// fileSignedApproval checks and files one submitted approval; on error it
// returns the HTTP status to answer with, and nothing moved.
func (o *operator) fileSignedApproval(ctx context.Context, data []byte, who signature.AllowedSigner) (int, *ApprovalFiled, error) {
	s, a, status, err := decodeApprovalSubmission(data)
	if err != nil {
		return status, nil, err
	}
	t, err := o.approverTrust()
	if err != nil {
		return http.StatusServiceUnavailable, nil, err
	}
	main := o.s.keys.mainCommit()
	known, err := o.s.keys.known(a.Install)
	if err != nil {
		return http.StatusServiceUnavailable, nil, fmt.Errorf("read main: %w", err)
	}
	if !known {
		if o.s.isArchived(a.Install) {
			return http.StatusNotFound, nil, fmt.Errorf("install %s is archived (nuon install delete): it takes no approvals", a.Install)
		}
		return http.StatusNotFound, nil, fmt.Errorf("no install %s on main (installs/%s.yaml)", a.Install, a.Install)
	}
	in, err := installOnMainOf(o.s.cfg.Dir, main, a.Install)
	if err != nil {
		return http.StatusServiceUnavailable, nil, err
	}
	now := o.s.cfg.Now()
	// The checks the agent makes, with the install's channel: the key,
	// its window and scope, the approver's name, the install, the expiry.
	if _, err := t.approvers.Verify(s, policy.Target{Install: a.Install, Channel: in.Channel, Labels: in.Labels, LabelsKnown: true}, now); err != nil {
		return http.StatusForbidden, nil, err
	}
	if name, _ := t.approvers.Name(who.Key); name != a.Approver {
		return http.StatusForbidden, nil, fmt.Errorf("%w: the approval is %s's, the HTTP request is signed by %s: file your own approval", policy.ErrApprovalUntrusted, a.Approver, name)
	}
	switch {
	case a.Expires.Sub(a.Created) > MaxApprovalLife:
		return http.StatusForbidden, nil, fmt.Errorf("the approval is valid for %s, more than %s: an approval is for a plan about to be applied", a.Expires.Sub(a.Created), MaxApprovalLife)
	case a.Created.After(now.Add(o.s.cfg.MaxSkew)):
		return http.StatusForbidden, nil, fmt.Errorf("the approval was created %s, in the future of the server's clock", a.Created.UTC().Format(time.RFC3339))
	}
	if t.root != nil && t.root.Role(trust.RoleApprovers) != nil {
		target := trust.Target{Labels: in.Labels, Channel: in.Channel}
		if _, err := t.root.Authorize(trust.RoleApprovers, ssh.FingerprintSHA256(who.Key), now, target); err != nil {
			return http.StatusForbidden, nil, fmt.Errorf("%w: approve for %s: %w", ErrOutOfScope, a.Install, err)
		}
	}
	repo, err := gitrepo.Open(o.s.cfg.Dir)
	if err != nil {
		return http.StatusInternalServerError, nil, err
	}
	if st, err := revParse(ctx, o.s.cfg.Dir, schemas.StatusRef(a.Install)); err != nil {
		return http.StatusConflict, nil, fmt.Errorf("%s has reported no status: no plan of it waits for approval", a.Install)
	} else if plans, err := WaitingPlans(repo.Storer(), st); err != nil {
		return http.StatusInternalServerError, nil, err
	} else if !slices.ContainsFunc(plans, func(p PendingPlan) bool { return p.Component == a.Component && p.Plan.Hash == a.Plan }) {
		return http.StatusConflict, nil, fmt.Errorf("%w: no plan %s of %s/%s waits for approval in its status (nuon approvals lists the waiting ones)", policy.ErrApprovalOtherPlan, a.Plan, a.Install, a.Component)
	}

	file, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return http.StatusInternalServerError, nil, err
	}
	file = append(file, '\n')
	p := schemas.ApprovalPath(a)
	o.fileMu.Lock()
	defer o.fileMu.Unlock()
	// The server builds the commit: when the upstream's approvals ref
	// moved since the last fetch, fileCommit fetched it; build again on it.
	for attempt := 0; ; attempt++ {
		h, status, err := o.commitApproval(ctx, repo, s, a, p, file, now)
		if status == http.StatusConflict && attempt < 3 && errors.Is(err, errMovedUpstream) {
			continue
		}
		if err != nil {
			return status, nil, err
		}
		res := &ApprovalFiled{Install: a.Install, Component: a.Component, Plan: a.Plan, Decision: a.Decision, Approver: a.Approver,
			Expires: a.Expires, Path: p, Commit: h.String()}
		if d, ok := o.s.refs.get(schemas.InstallRef(a.Install)); ok {
			res.Desired = d.String()
		}
		return http.StatusOK, res, nil
	}
}

// commitApproval files the approval at p on the approvals ref as it is
// now, unless the same signed approval is there already.
func (o *operator) commitApproval(ctx context.Context, repo *gitrepo.Repo, s schemas.SignedApproval, a *schemas.Approval, p string, file []byte, now time.Time) (plumbing.Hash, int, error) {
	head, err := revParse(ctx, o.s.cfg.Dir, schemas.ApprovalsRef)
	if err != nil {
		head = plumbing.ZeroHash
	}
	if !head.IsZero() {
		_, files, err := gitobj.ReadCommitFiles(repo.Storer(), head, 64<<10)
		if err != nil {
			return plumbing.ZeroHash, http.StatusInternalServerError, err
		}
		for _, f := range files {
			var old schemas.SignedApproval
			if json.Unmarshal(f, &old) == nil && old.Signature == s.Signature {
				return plumbing.ZeroHash, http.StatusConflict, fmt.Errorf("this approval is filed already (%s on %s): sign a new one to file it again", p, schemas.ApprovalsRef)
			}
		}
	}
	b := gitobj.NewBatch()
	var signer gitobj.Signer
	if o.s.cfg.RenderKey != nil {
		signer = o.s.cfg.RenderKey
	}
	h, err := ApprovalCommit(repo.Storer(), b, head, p, file, a, signer, now)
	if err != nil {
		return plumbing.ZeroHash, http.StatusInternalServerError, err
	}
	if status, err := o.fileCommit(ctx, repo, schemas.ApprovalsRef, head, b, h, "approval"); err != nil {
		return plumbing.ZeroHash, status, err
	}
	return h, http.StatusOK, nil
}

// decodeApprovalSubmission reads the body of POST ApprovalsPath: one
// schemas.SignedApproval, nothing else, whose file is an approval. It
// checks no signature. On error it returns the HTTP status to answer with.
func decodeApprovalSubmission(data []byte) (schemas.SignedApproval, *schemas.Approval, int, error) {
	var s schemas.SignedApproval
	if len(data) > requests.MaxSubmission {
		return s, nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the approval is larger than %d bytes", requests.MaxSubmission)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, nil, http.StatusBadRequest, fmt.Errorf("the body is not a signed approval (JSON with file and signature): %v", err)
	}
	if dec.More() {
		return s, nil, http.StatusBadRequest, fmt.Errorf("the body is not a signed approval: more than one JSON value")
	}
	a, err := schemas.DecodeApproval([]byte(s.File))
	if err != nil {
		return s, nil, http.StatusBadRequest, err
	}
	return s, a, http.StatusOK, nil
}

// installOnMain is what main says of one install that scopes judge.
type installOnMain struct {
	Channel string            `yaml:"channel"`
	Labels  map[string]string `yaml:"labels"`
}

func installOnMainOf(dir string, main plumbing.Hash, id string) (*installOnMain, error) {
	file := path.Join(schemas.InstallsDir, id+".yaml")
	data, err := readMainFile(dir, main, file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	var in installOnMain
	if err := yaml.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &in, nil
}

// ApprovalCommit commits the approval file at path (approvals/<install>/…)
// on top of head, the tip of schemas.ApprovalsRef: the tree is head's
// with the file added (or replacing the same decision filed before) and
// the approvals expired at now dropped; the commit is signed by key when
// not nil. nuon approve --repo and the server's ApprovalsPath both file
// with it.
func ApprovalCommit(st storer.EncodedObjectStorer, b *gitobj.Batch, head plumbing.Hash, path string, file []byte, a *schemas.Approval, key gitobj.Signer, now time.Time) (plumbing.Hash, error) {
	files := map[string][]byte{}
	if !head.IsZero() {
		var err error
		if _, files, err = gitobj.ReadCommitFiles(st, head, 64<<10); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	for name, data := range files {
		var s schemas.SignedApproval
		if json.Unmarshal(data, &s) != nil {
			continue
		}
		if old, err := schemas.DecodeApproval([]byte(s.File)); err == nil && !now.Before(old.Expires) {
			delete(files, name)
		}
	}
	files[path] = file
	byDir := map[string][]gitobj.Entry{}
	for name, data := range files {
		dir, base := splitLast(name)
		byDir[dir] = append(byDir[dir], gitobj.Entry{Name: base, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, data)})
	}
	var installs []gitobj.Entry
	for _, dir := range slices.Sorted(maps.Keys(byDir)) {
		_, id := splitLast(dir)
		installs = append(installs, gitobj.Entry{Name: id, Mode: filemode.Dir, Hash: b.Tree(byDir[dir])})
	}
	root := b.Tree([]gitobj.Entry{{Name: schemas.ApprovalsDir, Mode: filemode.Dir, Hash: b.Tree(installs)}})
	var parents []plumbing.Hash
	if !head.IsZero() {
		parents = append(parents, head)
	}
	past := "Approved"
	if a.Decision == schemas.DecisionReject {
		past = "Rejected"
	}
	msg := fmt.Sprintf("nuon: %s %s/%s plan %s\n\n%s by %s, valid until %s.\n", a.Decision, a.Install, a.Component, a.Plan,
		past, a.Approver, a.Expires.Format(time.RFC3339))
	if a.Reason != "" {
		msg += "\n" + a.Reason + "\n"
	}
	who := object.Signature{Name: a.Approver, Email: "approver@nuon.invalid", When: now}
	return b.Commit(gitobj.Commit{Tree: root, Parents: parents, Author: who, Message: msg}, key)
}

func splitLast(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// PendingPlan is one plan that waits for approval (or was rejected) in an
// install's status.
type PendingPlan struct {
	Install   string              `json:"install"`
	Component string              `json:"component"`
	Phase     string              `json:"phase"`
	Status    string              `json:"status"`
	Plan      *schemas.PlanRecord `json:"plan"`
}

// WaitingPlans reads the plans waiting (or rejected) in the status commit
// h, by component.
func WaitingPlans(st storer.EncodedObjectStorer, h plumbing.Hash) ([]PendingPlan, error) {
	c, files, err := gitobj.ReadCommitFiles(st, h, 4<<20)
	if err != nil {
		return nil, err
	}
	var s schemas.Status
	if err := json.Unmarshal(files[schemas.StatusFile], &s); err != nil {
		return nil, fmt.Errorf("status %s %s: %w", h, schemas.StatusFile, err)
	}
	var out []PendingPlan
	for _, comp := range slices.Sorted(maps.Keys(s.Components)) {
		cs := s.Components[comp]
		if cs.Plan == nil || cs.Phase != schemas.PhaseAwaitingApproval && cs.Phase != schemas.PhaseRejected {
			continue
		}
		out = append(out, PendingPlan{Install: s.Install, Component: comp, Phase: cs.Phase, Status: c.Hash.String(), Plan: cs.Plan})
	}
	return out, nil
}
