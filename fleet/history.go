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
	"nuon.dev/nuon/schemas"
)

// ReadInstall reads one install's row from its status commit h, checked
// against key, as Read does for every install. It lets a caller that
// already knows the refs (the tenant server's ref table) refresh only the
// installs whose status moved. now decides whether its heartbeat is late
// (Unreachable).
func ReadInstall(repo Repository, id string, h plumbing.Hash, key string, now time.Time) (Install, error) {
	row, _, err := readInstall(repo, id, h, key, now)
	return row, err
}

// Desired is what an install's rendered desired state says, for the fleet
// view: its channel and each component's version.
type Desired struct {
	Commit     string            `json:"commit"`
	Generation int64             `json:"generation"`
	Channel    string            `json:"channel"`
	Versions   map[string]string `json:"versions"`
	// Deleted says the state was rendered from an install file marked
	// deleted: true (nuon install delete).
	Deleted bool `json:"deleted,omitempty"`
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
	d.Channel, d.Deleted = in.Channel, in.Deleted
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
	keys := StatusKeys(st, h, key)
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
		// Judged by the key in force where it sits (hand-overs).
		k := keys(h)
		e.Verified, e.VerifyError = Verify(c, id, k)
		if e.Verified && k != key {
			if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err == nil {
				e.Signer = id + " (" + ssh.FingerprintSHA256(pub) + ")"
			}
		}
		if e.Verified && e.Signer == "" {
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
