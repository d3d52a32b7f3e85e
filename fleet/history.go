package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// ReadInstall reads one install's row from its status commit h, checked
// against key, as Read does for every install. It lets a caller that
// already knows the refs (the tenant server's ref table) refresh only the
// installs whose status moved.
func ReadInstall(repo Repository, id string, h plumbing.Hash, key string) (Install, error) {
	return readInstall(repo, id, h, key)
}

// Desired is what an install's rendered desired state says, for the fleet
// view: its channel and each component's version.
type Desired struct {
	Commit     string            `json:"commit"`
	Generation int64             `json:"generation"`
	Channel    string            `json:"channel"`
	Versions   map[string]string `json:"versions"`
	// Time is when the commit was rendered.
	Time time.Time `json:"time"`
}

// ReadDesired reads the rendered desired state at commit h (the tip of
// refs/heads/nuon/installs/<id>).
func ReadDesired(st storer.EncodedObjectStorer, h plumbing.Hash) (Desired, error) {
	d := Desired{Commit: h.String(), Versions: map[string]string{}}
	c, files, err := gitobj.ReadCommitFiles(st, h, 0)
	if err != nil {
		return d, fmt.Errorf("desired state %s: %w", h, err)
	}
	d.Time = c.Committer.When
	if g, ok := schemas.Trailer(c.Message, schemas.TrailerGeneration); ok {
		d.Generation, _ = strconv.ParseInt(g, 10, 64)
	}
	var in schemas.InstallState
	if err := json.Unmarshal(files[schemas.InstallStateFile], &in); err != nil {
		return d, fmt.Errorf("desired state %s: %s: %w", h, schemas.InstallStateFile, err)
	}
	d.Channel = in.Channel
	for _, name := range in.Components {
		var cs schemas.ComponentState
		if json.Unmarshal(files[schemas.ComponentStateFile(name)], &cs) == nil {
			d.Versions[name] = cs.Version
		}
	}
	return d, nil
}

// Entry is one status commit of an install's audit log.
type Entry struct {
	Commit     string    `json:"commit"`
	Time       time.Time `json:"time"`
	Generation int64     `json:"generation"`
	Phase      string    `json:"phase"`
	// Summary is the commit message without its trailers.
	Summary string `json:"summary"`
	// Verified says whether the install's own agentKey signed the commit;
	// Signer names the key (the install and its key's fingerprint) when
	// it did, VerifyError says why not.
	Verified    bool   `json:"verified"`
	Signer      string `json:"signer,omitempty"`
	VerifyError string `json:"verifyError,omitempty"`
}

// History walks an install's status ref from h along first parents and
// returns at most max entries (0: 50), newest first, each checked against
// key.
func History(st storer.EncodedObjectStorer, id string, h plumbing.Hash, key string, max int) ([]Entry, error) {
	if max <= 0 {
		max = 50
	}
	signer := ""
	if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key)); err == nil {
		signer = id + " (" + ssh.FingerprintSHA256(pub) + ")"
	}
	var out []Entry
	for !h.IsZero() && len(out) < max {
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			return out, fmt.Errorf("status history of %s: %w", id, err)
		}
		e := Entry{Commit: h.String(), Time: c.Committer.When, Summary: summary(c.Message)}
		if g, ok := schemas.Trailer(c.Message, schemas.TrailerGeneration); ok {
			e.Generation, _ = strconv.ParseInt(g, 10, 64)
		}
		e.Phase, _ = schemas.Trailer(c.Message, schemas.TrailerPhase)
		e.Verified, e.VerifyError = Verify(c, id, key)
		if e.Verified {
			e.Signer = signer
		}
		out = append(out, e)
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return out, nil
}

// summary is a commit message without its trailer block.
func summary(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.LastIndex(msg, "\n\n"); i >= 0 {
		last := msg[i+2:]
		trailers := true
		for _, l := range strings.Split(last, "\n") {
			if k, _, ok := strings.Cut(l, ": "); !ok || strings.ContainsAny(k, " \t") {
				trailers = false
				break
			}
		}
		if trailers {
			msg = strings.TrimSpace(msg[:i])
		}
	}
	return msg
}

// Generation is one rendered generation of an install's desired state and
// its difference from the one before.
type Generation struct {
	Commit     string    `json:"commit"`
	Generation int64     `json:"generation"`
	Time       time.Time `json:"time"`
	Subject    string    `json:"subject"`
	// Diff is the unified diff of the rendered files from the parent
	// commit (everything added for the first generation).
	Diff string `json:"diff"`
}

// Generations walks an install's desired ref from h along first parents
// and returns at most max generations (0: 10), newest first, each with
// its rendered diff.
func Generations(st storer.EncodedObjectStorer, h plumbing.Hash, max int) ([]Generation, error) {
	if max <= 0 {
		max = 10
	}
	var out []Generation
	for !h.IsZero() && len(out) < max {
		c, files, err := gitobj.ReadCommitFiles(st, h, 0)
		if err != nil {
			return out, fmt.Errorf("generations: %w", err)
		}
		g := Generation{Commit: h.String(), Time: c.Committer.When, Subject: strings.SplitN(strings.TrimSpace(c.Message), "\n", 2)[0]}
		if v, ok := schemas.Trailer(c.Message, schemas.TrailerGeneration); ok {
			g.Generation, _ = strconv.ParseInt(v, 10, 64)
		}
		var prev map[string][]byte
		next := plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			next = c.ParentHashes[0]
			if _, pf, err := gitobj.ReadCommitFiles(st, next, 0); err == nil {
				prev = pf
			}
		}
		if g.Diff, err = renderer.UnifiedDiff("", prev, files); err != nil {
			return out, err
		}
		out = append(out, g)
		h = next
	}
	return out, nil
}
