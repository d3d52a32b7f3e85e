package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
	"nuon.dev/nuon/trust/maingit"
)

// maxStatusWalk bounds how many commits of a status ref's history
// VerifyStatus examines when the tip is not the install's own: enough for
// years of status commits of one install, small enough that a crafted
// history cannot stall the agent (~0.5 ms per signature checked).
const maxStatusWalk = 1000

// forgedRefPrefix + install + "/" + commit keeps a replaced status commit
// reachable in the agent's own repository, for audit.
const forgedRefPrefix = "refs/nuon/forged/"

// ForgedRef is the local ref that keeps a replaced status commit.
func ForgedRef(install string, commit plumbing.Hash) plumbing.ReferenceName {
	return plumbing.ReferenceName(forgedRefPrefix + install + "/" + commit.String())
}

// ErrNotOwnStatus marks a status commit that is not signed by the
// install's own key or does not name the install.
var ErrNotOwnStatus = errors.New("not signed by this install's key")

// VerifiedStatus is what a status ref says once checked against the
// install's own key: the rollback baseline comes from it, never from a
// commit the install did not sign.
type VerifiedStatus struct {
	// Commit is the install's own status commit with the highest
	// generation found: the tip when the tip is its own, otherwise the
	// best within maxStatusWalk commits of it. Zero when there is none.
	Commit plumbing.Hash
	// Generation and Desired are what Commit reports (its trailers,
	// covered by its signature).
	Generation int64
	Desired    plumbing.Hash
	// Forged says why the tip is not the install's own; nil when it is.
	Forged *schemas.Forged
}

// Applied is the rollback baseline the verified status gives.
func (v *VerifiedStatus) Applied() Applied {
	return Applied{Commit: v.Desired, Generation: v.Generation}
}

// VerifyStatus checks the status commit tip against key, the install's own
// public key (the agent's --key, or the agentKey on main). When the tip is
// signed by it and names install, it is the verified status. Otherwise the
// tip is reported as forged and the history behind it is walked (every
// parent, at most maxStatusWalk commits) for the install's own commit with
// the highest generation. The objects must be in st; a missing one ends
// the walk along that line.
func VerifyStatus(st storer.EncodedObjectStorer, tip plumbing.Hash, install string, key ssh.PublicKey) (*VerifiedStatus, error) {
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{install}, Key: key}}}
	c, err := gitobj.ReadCommit(st, tip)
	if err != nil {
		return nil, fmt.Errorf("read status %s: %w", short(tip), err)
	}
	v := &VerifiedStatus{}
	if err := ownStatus(c, install, trust, v); err == nil {
		v.Commit = tip
		return v, nil
	} else {
		v.Forged = &schemas.Forged{Commit: tip.String(), Reason: err.Error()}
	}
	seen := map[plumbing.Hash]bool{tip: true}
	queue := append([]plumbing.Hash(nil), c.ParentHashes...)
	for n := 0; len(queue) > 0 && n < maxStatusWalk; n++ {
		h := queue[0]
		queue = queue[1:]
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			continue
		}
		var found VerifiedStatus
		if ownStatus(c, install, trust, &found) == nil && (v.Commit.IsZero() || found.Generation > v.Generation) {
			v.Commit, v.Generation, v.Desired = h, found.Generation, found.Desired
		}
		queue = append(queue, c.ParentHashes...)
	}
	return v, nil
}

// ownStatus checks that c is a status commit of install signed by trust
// and reads its generation and desired commit into v.
func ownStatus(c *object.Commit, install string, trust *signature.AllowedSigners, v *VerifiedStatus) error {
	if _, err := trust.VerifyCommit(c); err != nil {
		return fmt.Errorf("%w: %v", ErrNotOwnStatus, err)
	}
	if id, _ := schemas.Trailer(c.Message, schemas.TrailerInstall); id != install {
		return fmt.Errorf("%w: it names install %q", ErrNotOwnStatus, id)
	}
	gen, _ := schemas.Trailer(c.Message, schemas.TrailerGeneration)
	g, err := strconv.ParseInt(gen, 10, 64)
	if err != nil || g < 0 {
		return fmt.Errorf("%w: bad %s trailer %q", ErrNotOwnStatus, schemas.TrailerGeneration, gen)
	}
	v.Generation = g
	v.Desired = plumbing.ZeroHash
	if d, _ := schemas.Trailer(c.Message, schemas.TrailerDesired); d != "none" && plumbing.IsHash(d) {
		v.Desired = plumbing.NewHash(d)
	}
	return nil
}

// isAncestor reports whether anc is from or one of its ancestors, looking
// at most maxStatusWalk commits back.
func isAncestor(st storer.EncodedObjectStorer, anc, from plumbing.Hash) bool {
	if anc == from {
		return true
	}
	if st.HasEncodedObject(anc) != nil {
		return false
	}
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{from}
	for n := 0; len(queue) > 0 && n < maxStatusWalk; n++ {
		h := queue[0]
		queue = queue[1:]
		if h == anc {
			return true
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			continue
		}
		queue = append(queue, c.ParentHashes...)
	}
	return false
}

// RootFile is where, in its workdir, the agent keeps the newest version
// of the trust root it has verified. The version it was given at install
// creation (Config.TrustRoot) is only the start of the chain: once a
// newer version is verified, a restart resumes from this file, never from
// the older given one, so a rolled-back root stays refused.
const RootFile = "trust-root.json"

// openRoot returns the version the agent holds: the newest of the given
// one (checked to be signed by a threshold of its own root keys) and the
// one kept in the workdir.
func openRoot(workdir string, given *trust.Root) (*trust.Root, error) {
	if err := trust.SelfSigned(given); err != nil {
		return nil, fmt.Errorf("agent trust root: %w", err)
	}
	path := filepath.Join(workdir, RootFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return given, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent trust root: %w", err)
	}
	kept, err := trust.Parse(path, data)
	if err != nil {
		return nil, fmt.Errorf("agent trust root kept in the workdir: %w", err)
	}
	if kept.Version < given.Version {
		return given, nil
	}
	return kept, nil
}

// keepRoot makes r the version the agent holds when it is newer, and
// writes it to the workdir (atomically: a crash leaves the old or the new
// file, never half of one).
func (a *Agent) keepRoot(r *trust.Root) error {
	held := a.root.Load()
	if r == nil || held == nil || r.Version <= held.Version {
		return nil
	}
	data, err := r.Encoded()
	if err != nil {
		return err
	}
	path := filepath.Join(a.cfg.Workdir, RootFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("keep trust root: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("keep trust root: %w", err)
	}
	a.root.Store(r)
	a.log.Info("trust root moved", "from", held.Version, "to", r.Version, "expires", r.Expires.UTC().Format(time.RFC3339))
	return nil
}

// Root is the version of the trust root the agent holds; nil when it
// judges desired state by an allowed_signers file (Config.Trust).
func (a *Agent) Root() *trust.Root { return a.root.Load() }

// judge decides whose signature a desired commit carries and whether
// that key may sign desired state; it returns the signer and, for an
// agent that follows the trust root, the version in force after the
// commit (nil otherwise).
type judge func(c *object.Commit) (signature.Verified, *trust.Root, error)

// allowedJudge judges by an allowed_signers file: any key listed there
// signs desired state, forever (the behaviour before the trust root).
func allowedJudge(as *signature.AllowedSigners) judge {
	return func(c *object.Commit) (signature.Verified, *trust.Root, error) {
		v, err := as.VerifyCommit(c)
		return v, nil, err
	}
}

// RootChecks is how a desired commit is judged by the trust root.
type RootChecks struct {
	// Held is the newest version the verifier already trusts.
	Held *trust.Root
	// Floor is the earliest time a signature is judged at: the time of
	// the commit the install applied last (see trust.SignedAt). Zero when
	// nothing was applied.
	Floor time.Time
}

// rootJudge judges a desired commit by the trust root:
//
//   - the version in force is the newest the chain reaches from held
//     through the versions the commit's tree carries (trust/root/<n>.json,
//     as the renderer copies them from main); a version there that does
//     not chain refuses the commit, older ones change nothing, and the
//     version in force must not have expired at now;
//   - the signature must verify, by whatever key made it;
//   - that key must be one of the render role's keys of the version in
//     force, inside its window and not revoked, at the time the commit
//     claims but never before floor (trust.SignedAt), for the install's
//     channel; the render role's threshold must be 1 or less, since a
//     commit carries one signature.
func rootJudge(st storer.EncodedObjectStorer, rc RootChecks, now time.Time) judge {
	return func(c *object.Commit) (signature.Verified, *trust.Root, error) {
		files, err := gitobj.ReadFiles(st, c.TreeHash, 0)
		if err != nil {
			return signature.Verified{}, nil, fmt.Errorf("unreadable tree: %w", err)
		}
		carried, err := trust.LoadFiles(files)
		if err != nil {
			return signature.Verified{}, nil, fmt.Errorf("trust root carried by the commit: %w", err)
		}
		inForce, err := trust.InForce(rc.Held, carried, now)
		if err != nil {
			return signature.Verified{}, nil, err
		}
		if c.PGPSignature == "" {
			return signature.Verified{}, nil, signature.ErrUnsigned
		}
		sig, err := sshsig.Unarmor([]byte(c.PGPSignature))
		if err != nil {
			return signature.Verified{}, nil, fmt.Errorf("%w: malformed SSH signature: %v", signature.ErrInvalid, err)
		}
		as := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Key: sig.PublicKey}}}
		v, err := as.VerifyCommit(c)
		if err != nil {
			return signature.Verified{}, nil, err
		}
		var state struct {
			Channel string `json:"channel"`
		}
		_ = json.Unmarshal(files[schemas.InstallStateFile], &state)
		target := trust.Target{Channel: state.Channel}
		at := trust.SignedAt(c.Committer.When, rc.Floor)
		if err := inForce.Meets(trust.RoleRender, []string{v.Fingerprint}, at, target); err != nil {
			return signature.Verified{}, nil, fmt.Errorf("%w (judged by %s)", err, inForce)
		}
		k, err := inForce.Authorize(trust.RoleRender, v.Fingerprint, at, target)
		if err != nil {
			return signature.Verified{}, nil, err
		}
		v.Principal = k.Name
		return v, inForce, nil
	}
}

// commitTime is the committer time of h in st; zero when h is zero or
// not there.
func commitTime(st storer.EncodedObjectStorer, h plumbing.Hash) time.Time {
	if h.IsZero() {
		return time.Time{}
	}
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return time.Time{}
	}
	return c.Committer.When
}

// checks are the Checks of a desired commit against applied, by the
// trust root the agent holds or by its allowed_signers file.
func (a *Agent) checks(applied Applied) Checks {
	c := Checks{Install: a.cfg.Install, Trust: a.cfg.Trust, Applied: applied, Now: a.cfg.Now()}
	if held := a.root.Load(); held != nil {
		c.Root = &RootChecks{Held: held, Floor: commitTime(a.store, applied.Commit)}
	}
	return c
}

// verifyRecorded verifies again a desired commit the agent recorded as
// applied (after a restart): judged at its own time, it stays valid
// whatever was rotated or revoked since.
func (a *Agent) verifyRecorded(h plumbing.Hash) (*Desired, error) {
	c := a.checks(Applied{})
	return verify(a.store, h, c.Install, c.judge(a.store), Applied{})
}

// NewRootChecks is how a verifier outside the agent (nuon verify) judges
// a desired commit by the root: held is the newest version it trusts, and
// the floor is the time of the commit the install applied last.
func NewRootChecks(st storer.EncodedObjectStorer, held *trust.Root, applied Applied) *RootChecks {
	return &RootChecks{Held: held, Floor: commitTime(st, applied.Commit)}
}

// ReadRootFiles reads the versions of the trust root a commit's tree
// holds under trust/root, path to content (each at most 1 MiB); none when
// it holds no such folder.
func ReadRootFiles(st storer.EncodedObjectStorer, commit plumbing.Hash) (map[string][]byte, error) {
	m, err := maingit.Open(st, commit)
	if err != nil {
		return nil, err
	}
	return m.RootFiles()
}

// ComponentSyncer is a Syncer that judges artifacts per component: the
// trust root allows sources per component (provenance.sources) and
// requires distinct builders per channel (provenance.builders).
type ComponentSyncer interface {
	SyncComponent(ctx context.Context, channel, component string, artifacts []schemas.Artifact) error
}

// syncArtifacts syncs one component's artifacts, naming the install's
// channel and the component when the Syncer judges by them.
func syncArtifacts(ctx context.Context, s Syncer, channel, component string, artifacts []schemas.Artifact) error {
	if cs, ok := s.(ComponentSyncer); ok {
		return cs.SyncComponent(ctx, channel, component, artifacts)
	}
	return s.Sync(ctx, artifacts)
}
