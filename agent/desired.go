package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// ErrRefused marks a desired commit the agent will not apply. It is final
// for that commit: fetching it again will not help. A *Refusal carries the
// reason.
var ErrRefused = errors.New("refused")

// Refusal is why a desired commit was refused.
type Refusal struct {
	Commit plumbing.Hash
	Reason string
	Err    error
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("refuse %s: %s", short(r.Commit), r.Reason)
}

// Is makes errors.Is(err, ErrRefused) true.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

func (r *Refusal) Unwrap() error { return r.Err }

func refuse(commit plumbing.Hash, err error, format string, args ...any) *Refusal {
	return &Refusal{Commit: commit, Reason: fmt.Sprintf(format, args...), Err: err}
}

// Desired is an install's verified desired state.
type Desired struct {
	Commit     plumbing.Hash
	Generation int64
	// Source is the main commit it was rendered from.
	Source string
	// Signer is who signed it.
	Signer  signature.Verified
	Install schemas.InstallState
	// Components by name; Install.Components gives their order.
	Components map[string]*schemas.ComponentState
	// Expires is the commit's signed freshness bound (schemas.Expires);
	// zero when its tenant sets none.
	Expires time.Time
	// Requests are the install's pending operator requests
	// (schemas.RequestsFile), each still to be verified (package requests).
	Requests []schemas.SignedRequest
	// Approvals are the install's signed approvals of saved plans
	// (schemas.ApprovalsFile), each still to be verified (package policy).
	Approvals []schemas.SignedApproval
	// Policies are the Rego policies on plans (policies/*.rego), by path.
	Policies map[string]string
	// Root is the version of the trust root in force for the commit, for
	// an agent that follows the root (Checks.Root); nil otherwise.
	Root *trust.Root
}

// Expired reports whether d is past its expiry at now.
func (d *Desired) Expired(now time.Time) bool {
	return !d.Expires.IsZero() && !now.Before(d.Expires)
}

// ErrStale marks a desired commit that passed every check but is past its
// signed expiry: the agent keeps running what it applied and applies
// nothing expired. Unlike a refusal it is not final for the state: a fresh
// commit ends it.
var ErrStale = errors.New("stale: the desired state is past its expiry")

// Checks is what Check needs besides the commit.
type Checks struct {
	// Install is the install the state must name.
	Install string
	// Trust holds the keys allowed to sign desired state, when Root is
	// nil (the allowed_signers file, deprecated).
	Trust *signature.AllowedSigners
	// Root, when set, judges the signature by the trust root instead of
	// Trust (see rootJudge).
	Root *RootChecks
	// Applied is the rollback baseline: the install's own verified
	// status (VerifiedStatus.Applied), never an unverified number.
	Applied Applied
	// Now is the time freshness is judged at.
	Now time.Time
}

// Check runs every check the agent makes on a desired commit before it
// applies anything: Verify (signature, install, rollback against
// c.Applied, well-formed state), then freshness. The agent's verify step
// and `nuon verify` both call it. A failure is a *Refusal; an expired
// commit returns its Desired with an error that is ErrStale.
func Check(st storer.EncodedObjectStorer, commit plumbing.Hash, c Checks) (*Desired, error) {
	d, err := verify(st, commit, c.Install, c.judge(st), c.Applied)
	if err != nil {
		return nil, err
	}
	if d.Expired(c.Now) {
		return d, fmt.Errorf("%s: %w (expired %s)", short(commit), ErrStale, d.Expires.Format(time.RFC3339))
	}
	return d, nil
}

// Applied is what the agent applied last, for the rollback check.
type Applied struct {
	Commit     plumbing.Hash
	Generation int64
}

// Verify reads the desired commit from st and checks, before anything is
// applied, that it is signed by a trusted key, that it is this install's
// state, and that it is not older than what was applied. Every failure is a
// *Refusal.
func Verify(st storer.EncodedObjectStorer, commit plumbing.Hash, install string, trust *signature.AllowedSigners, applied Applied) (*Desired, error) {
	return verify(st, commit, install, allowedJudge(trust), applied)
}

// judge is how c judges the signature: by the trust root when it has one,
// by the allowed_signers file otherwise.
func (c Checks) judge(st storer.EncodedObjectStorer) judge {
	if c.Root != nil {
		return rootJudge(st, *c.Root, c.Now)
	}
	return allowedJudge(c.Trust)
}

// verify is Verify with the signature judged by judge.
func verify(st storer.EncodedObjectStorer, commit plumbing.Hash, install string, judge judge, applied Applied) (*Desired, error) {
	c, err := gitobj.ReadCommit(st, commit)
	if err != nil {
		return nil, refuse(commit, err, "unreadable commit: %v", err)
	}
	signer, root, err := judge(c)
	if err != nil {
		return nil, refuse(commit, err, "signature: %v", err)
	}
	d := &Desired{Commit: commit, Signer: signer, Root: root, Components: map[string]*schemas.ComponentState{}}
	id, _ := schemas.Trailer(c.Message, schemas.TrailerInstall)
	if id != install {
		return nil, refuse(commit, nil, "the commit is for install %q, not %q", id, install)
	}
	gen, ok := schemas.Trailer(c.Message, schemas.TrailerGeneration)
	if d.Generation, err = strconv.ParseInt(gen, 10, 64); !ok || err != nil || d.Generation < 1 {
		return nil, refuse(commit, err, "missing or bad %s trailer %q", schemas.TrailerGeneration, gen)
	}
	d.Source, _ = schemas.Trailer(c.Message, schemas.TrailerSource)
	if exp, ok, err := schemas.Expires(c.Message); err != nil {
		return nil, refuse(commit, err, "%v", err)
	} else if ok {
		d.Expires = exp
	}
	if commit != applied.Commit && d.Generation <= applied.Generation && !applied.Commit.IsZero() && !refreshes(st, c, d, applied) {
		return nil, refuse(commit, nil, "generation %d is not newer than the applied generation %d (%s): rollback or replay",
			d.Generation, applied.Generation, short(applied.Commit))
	}
	files, err := gitobj.ReadFiles(st, c.TreeHash, 0)
	if err != nil {
		return nil, refuse(commit, err, "unreadable tree: %v", err)
	}
	if err := decodeStrict(files[schemas.InstallStateFile], &d.Install); err != nil {
		return nil, refuse(commit, err, "%s: %v", schemas.InstallStateFile, err)
	}
	if d.Install.Install != install {
		return nil, refuse(commit, nil, schemas.InstallStateFile+" names install %q, not %q", d.Install.Install, install)
	}
	for _, name := range d.Install.Components {
		var cs schemas.ComponentState
		if err := decodeStrict(files[schemas.ComponentStateFile(name)], &cs); err != nil {
			return nil, refuse(commit, err, "component %s: %v", name, err)
		}
		if cs.Name != name {
			return nil, refuse(commit, nil, "%s names component %q", schemas.ComponentStateFile(name), cs.Name)
		}
		d.Components[name] = &cs
	}
	if data, ok := files[schemas.RequestsFile]; ok {
		var ir schemas.InstallRequests
		if err := decodeStrict(data, &ir); err != nil {
			return nil, refuse(commit, err, "%s: %v", schemas.RequestsFile, err)
		}
		d.Requests = ir.Requests
	}
	if data, ok := files[schemas.ApprovalsFile]; ok {
		var ia schemas.InstallApprovals
		if err := schemas.ValidateJSON(schemas.SchemaInstallApprovals, data); err != nil {
			return nil, refuse(commit, err, "%s: %v", schemas.ApprovalsFile, err)
		}
		if err := decodeStrict(data, &ia); err != nil {
			return nil, refuse(commit, err, "%s: %v", schemas.ApprovalsFile, err)
		}
		d.Approvals = ia.Approvals
	}
	for name, data := range files {
		if strings.HasPrefix(name, "policies/") && strings.HasSuffix(name, ".rego") {
			if d.Policies == nil {
				d.Policies = map[string]string{}
			}
			d.Policies[name] = string(data)
		}
	}
	for _, cs := range d.Components {
		for _, dep := range cs.DependsOn {
			if _, ok := d.Components[dep]; !ok {
				return nil, refuse(commit, nil, "component %s depends on %q, which is not in the state", cs.Name, dep)
			}
		}
	}
	return d, nil
}

// refreshes reports whether c re-signs the applied commit's state with a
// later expiry: the same generation, the same tree, a later Nuon-Expires.
// A renderer that keeps an unchanged install fresh may do that rather than
// spend a generation; a replay of an older re-sign has an earlier expiry
// and stays refused.
func refreshes(st storer.EncodedObjectStorer, c *object.Commit, d *Desired, applied Applied) bool {
	if d.Expires.IsZero() || d.Generation != applied.Generation {
		return false
	}
	prev, err := gitobj.ReadCommit(st, applied.Commit)
	if err != nil || prev.TreeHash != c.TreeHash {
		return false
	}
	prevExpires, ok, err := schemas.Expires(prev.Message)
	return ok && err == nil && d.Expires.After(prevExpires)
}

func decodeStrict(data []byte, v any) error {
	if data == nil {
		return errors.New("missing")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return nil
}

func short(h plumbing.Hash) string {
	if h.IsZero() {
		return "none"
	}
	return h.String()[:12]
}
