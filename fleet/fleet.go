package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// Install is what one install's agent reported; its JSON form is what
// `nuon status -o json` prints.
type Install struct {
	Install    string `json:"install"`
	Commit     string `json:"commit"`
	Desired    string `json:"desired"`
	Applied    string `json:"applied"`
	Generation int64  `json:"generation"`
	Phase      string `json:"phase"`
	// State is what `nuon status` shows: StateStale while the agent's
	// desired state is past its expiry, otherwise Phase.
	State   string           `json:"state"`
	Refusal *schemas.Refusal `json:"refusal,omitempty"`
	// Stale and Expires are the agent's freshness report (see
	// schemas.Status).
	Stale   bool       `json:"stale"`
	Expires *time.Time `json:"expires,omitempty"`
	// Forged names a commit the agent found on its status ref and
	// replaced: its key did not sign it.
	Forged *schemas.Forged `json:"forged,omitempty"`
	// Deferred is the change the install holds back on purpose (a
	// customer hold, no open maintenance window): deferred, not failed
	// (see schemas.Deferred).
	Deferred *schemas.Deferred `json:"deferred,omitempty"`
	// Components are sorted by name.
	Components []Component `json:"components"`
	// Verified says whether the status commit is signed by the agentKey
	// of the install on main; VerifyError says why not.
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verifyError,omitempty"`
	// Rendered is the install's desired ref now; InSync is whether the
	// agent has reported on it.
	Rendered string `json:"rendered,omitempty"`
	InSync   bool   `json:"inSync"`
	// Vetoed lists the kinds of operations the install's own settings
	// turned off (see schemas.Status).
	Vetoed []string `json:"vetoed,omitempty"`
	// Drifted is how many components the last drift checks found
	// different from their desired state (each component's Drift says
	// how).
	Drifted int `json:"drifted"`
	// HeartbeatEvery is how often, at the least, the agent writes a
	// status commit. Unreachable is set when Time is older than twice
	// that (see At).
	HeartbeatEvery string `json:"heartbeatEvery,omitempty"`
	Unreachable    bool   `json:"unreachable"`
	// Contact is the install's last signed contact when something saw
	// one: a request signed by its key that the tenant server checked (a
	// poll of its desired ref, a push), or the tip of its liveness ref
	// on a plain git host (ReadLiveness). ContactKind says which (poll,
	// push, heartbeat). Nil: only the status commit's time is known. An
	// install is Unreachable when neither is newer than twice its
	// heartbeat (see LastSeen).
	Contact     *time.Time `json:"contact,omitempty"`
	ContactKind string     `json:"contactKind,omitempty"`
	// Artifacts is the agent's artifact verification, as its status says:
	// Verified, Unverified (--insecure-skip-artifact-verification), or
	// empty from an agent that predates the field.
	Artifacts string `json:"artifacts,omitempty"`
	// Time is when the agent made the status commit (its committer
	// time): how fresh the report is, and when the agent was last seen.
	Time time.Time `json:"time"`
}

// StateUnreachable is Install.State when the agent's heartbeat is late:
// neither its last signed contact nor its newest status commit is newer
// than twice the heartbeat interval it announced. It says nothing about the desired state (see StateStale);
// the rest of the row is what the agent last said.
const StateUnreachable = "Unreachable"

// lateFactor is how many heartbeat intervals may pass without a status
// commit before an install is Unreachable: one beat may be lost to a
// poll's jitter or a failed push.
const lateFactor = 2

// StateStale is Install.State while the agent reports its desired state
// past its signed expiry: a frozen or withheld ref, or a renderer that
// stopped re-signing.
const StateStale = "Stale"

// StateHeld is Install.State while the install holds a change back
// because its customer's policy holds every change (or cannot be read).
// It is not a failure.
const StateHeld = "Held"

// StateWaiting is Install.State while the install holds a change back
// until its customer's next maintenance window opens (Deferred.Until). It
// is not a failure.
const StateWaiting = "Waiting"

// Component is one component's reported status.
type Component struct {
	Name string `json:"name"`
	schemas.ComponentStatus
}

// Repository is what Read needs of the tenant repository.
type Repository interface {
	Storer() storer.Storer
	Refs(prefix string) (map[plumbing.ReferenceName]plumbing.Hash, error)
	Ref(name plumbing.ReferenceName) (plumbing.Hash, error)
}

// Read returns the reported status of every install that has a status
// ref (only install, when it is not empty), sorted by install id, each
// checked against keys (install id → agentKey, see AgentKeys). Heartbeats
// are judged at the time of the call (see ReadAt).
func Read(repo Repository, keys map[string]string, install string) ([]Install, error) {
	return ReadAt(repo, keys, install, time.Now())
}

// ReadAt is Read with heartbeats judged at now.
func ReadAt(repo Repository, keys map[string]string, install string, now time.Time) ([]Install, error) {
	refs, err := repo.Refs(schemas.StatusRefPrefix)
	if err != nil {
		return nil, err
	}
	live, err := repo.Refs(schemas.LivenessRefPrefix)
	if err != nil {
		return nil, err
	}
	rows := []Install{}
	for name, h := range refs {
		id := strings.TrimPrefix(name.String(), schemas.StatusRefPrefix)
		if install != "" && id != install {
			continue
		}
		row, key, err := readInstall(repo, id, h, keys[id], now)
		if err != nil {
			return nil, err
		}
		if l, ok := live[plumbing.ReferenceName(schemas.LivenessRef(id))]; ok {
			if at, err := ReadLiveness(repo.Storer(), id, l, key); err == nil {
				row.Contact, row.ContactKind = &at, ContactHeartbeat
				row = row.At(now)
			}
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Install < rows[j].Install })
	return rows, nil
}

// readInstall reads install id's status at h, judged by the key in force
// there (main's key, or the key it handed over to: StatusKeys), which it
// returns.
func readInstall(repo Repository, id string, h plumbing.Hash, key string, now time.Time) (Install, string, error) {
	row := Install{Install: id, Commit: h.String(), Components: []Component{}}
	c, files, err := gitobj.ReadCommitFiles(repo.Storer(), h, 0)
	if err != nil {
		return row, key, fmt.Errorf("status of %s: %w", id, err)
	}
	key = keyAt(repo.Storer(), c, key)
	var st schemas.Status
	if err := json.Unmarshal(files[schemas.StatusFile], &st); err != nil {
		return row, key, fmt.Errorf("status of %s: %s:%s: %w", id, schemas.StatusRef(id), schemas.StatusFile, err)
	}
	row.Time = c.Committer.When.UTC()
	row.Desired, row.Applied, row.Generation, row.Phase, row.Refusal, row.Artifacts = st.Desired, st.Applied, st.Generation, st.Phase, st.Refusal, st.Artifacts
	row.Stale, row.Expires, row.Forged, row.Deferred = st.Stale, st.Expires, st.Forged, st.Deferred
	for _, name := range slices.Sorted(maps.Keys(st.Components)) {
		cs := st.Components[name]
		row.Components = append(row.Components, Component{Name: name, ComponentStatus: cs})
		if len(cs.Drift) > 0 {
			row.Drifted++
		}
	}
	row.Vetoed, row.HeartbeatEvery = st.Vetoed, st.HeartbeatEvery
	row.Verified, row.VerifyError = Verify(c, id, key)
	if rendered, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(id))); err == nil && !rendered.IsZero() {
		row.Rendered = rendered.String()
		row.InSync = rendered.String() == st.Desired || (st.Refusal != nil && st.Refusal.Commit == rendered.String())
	}
	return row.At(now), key, nil
}

// At returns the row as it stands at now: its State is the phase, Held or
// Waiting while the agent defers a change on purpose, Stale while the
// agent reports its desired state expired, or Unreachable once
// its heartbeat is late, which only time makes so. A row kept across
// reads (the fleet view's cache) is brought up to date with it.
func (i Install) At(now time.Time) Install {
	i.State, i.Unreachable = i.Phase, false
	if d := i.Deferred; d != nil && i.Phase != schemas.InstallRefused {
		i.State = StateHeld
		if d.Reason == schemas.DeferredWindow {
			i.State = StateWaiting
		}
	}
	if i.Stale {
		i.State = StateStale
	}
	if every, err := time.ParseDuration(i.HeartbeatEvery); err == nil && every > 0 && now.Sub(i.LastSeen()) > lateFactor*every {
		i.State, i.Unreachable = StateUnreachable, true
	}
	return i
}

// LastSeen is when the install was last heard from: its last signed
// contact or its newest status commit, whichever is later. A status push
// is a signed contact too; the commit's time counts so that a reader who
// knows no contact (a git host, a server just restarted without its
// liveness file) judges as before.
func (i Install) LastSeen() time.Time {
	if i.Contact != nil && i.Contact.After(i.Time) {
		return i.Contact.UTC()
	}
	return i.Time
}

// silence says since when an install whose heartbeat is late has been
// silent, in the words of Reason.
func (i Install) silence() string {
	if i.Contact != nil && i.Contact.After(i.Time) {
		return "no signed contact since " + i.Contact.UTC().Format(time.RFC3339)
	}
	return "no status commit since " + i.Time.UTC().Format(time.RFC3339)
}

// ContactHeartbeat is Install.ContactKind for a beat on the install's
// liveness ref (a plain git host).
const ContactHeartbeat = "heartbeat"

// ErrLiveness is a liveness commit that does not count as the install's
// contact: not signed by its key, not naming it, or not a lone commit.
var ErrLiveness = errors.New("liveness commit refused")

// ReadLiveness reads the tip of install id's liveness ref (h) and returns
// its time, verified as a status is: signed by the install's agentKey
// (key), naming the install in its Nuon-Install trailer, without parents
// (the ref keeps only its tip, so it carries no history to read). A
// commit anyone else could have written says nothing of the install.
func ReadLiveness(st storer.EncodedObjectStorer, id string, h plumbing.Hash, key string) (time.Time, error) {
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return time.Time{}, fmt.Errorf("liveness of %s: %w", id, err)
	}
	if len(c.ParentHashes) != 0 {
		return time.Time{}, fmt.Errorf("liveness of %s: %w: %s has parents", id, ErrLiveness, h)
	}
	if ok, why := Verify(c, id, key); !ok {
		return time.Time{}, fmt.Errorf("liveness of %s: %w: %s", id, ErrLiveness, why)
	}
	if got, _ := schemas.Trailer(c.Message, schemas.TrailerInstall); got != id {
		return time.Time{}, fmt.Errorf("liveness of %s: %w: it names install %q", id, ErrLiveness, got)
	}
	return c.Committer.When.UTC(), nil
}

// Verify says whether the status commit c is signed by key, the agentKey
// of install id, and why not.
func Verify(c *object.Commit, id, key string) (bool, string) {
	if key == "" {
		return false, "no agentKey for this install on main"
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return false, "agentKey on main: " + err.Error()
	}
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{id}, Key: pub}}}
	if _, err := trust.VerifyCommit(c); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// AgentKeys reads each install's agentKey from installs/<id>.yaml in the
// source commit. A file that does not parse gives no key, so that
// install's rows are unverified rather than the whole fleet unreadable.
func AgentKeys(st storer.EncodedObjectStorer, source plumbing.Hash) (map[string]string, error) {
	keys := map[string]string{}
	c, err := gitobj.ReadCommit(st, source)
	if err != nil {
		return keys, err
	}
	root, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return keys, err
	}
	e, err := root.FindEntry(schemas.InstallsDir)
	if err != nil {
		return keys, nil
	}
	dir, err := gitobj.ReadTree(st, e.Hash)
	if err != nil {
		return keys, err
	}
	for _, e := range dir.Entries {
		id, ok := strings.CutSuffix(e.Name, ".yaml")
		if !ok || !e.Mode.IsFile() {
			continue
		}
		data, err := gitobj.ReadBlob(st, e.Hash, maxInstallFile)
		if err != nil {
			continue
		}
		var in struct {
			AgentKey string `yaml:"agentKey"`
		}
		if yaml.Unmarshal(data, &in) == nil {
			keys[id] = in.AgentKey
		}
	}
	return keys, nil
}

// maxInstallFile bounds what AgentKeys reads of one installs/<id>.yaml.
const maxInstallFile = 1 << 20

// Reason says why an install is in its State, in the words `nuon status`
// prints in its last column: when an Unreachable agent last wrote, when a
// Stale desired state expired, what a Held or Waiting install defers, what
// a Refused one refused. It is empty for a state that needs no reason.
func (i Install) Reason() string {
	switch {
	case i.State == StateUnreachable:
		return i.silence() + " (heartbeat " + i.HeartbeatEvery + ")"
	case i.State == StateStale && i.Expires != nil:
		return "desired state expired " + i.Expires.UTC().Format(time.RFC3339)
	case i.State == StateStale:
		return "desired state expired"
	case (i.State == StateHeld || i.State == StateWaiting) && i.Deferred != nil:
		r := "deferred " + short(i.Deferred.Commit) + ": " + i.Deferred.Message
		if i.Deferred.Until != nil {
			r += " (window opens at " + i.Deferred.Until.UTC().Format(time.RFC3339) + ")"
		}
		return r
	case i.Refusal != nil:
		return "refused " + short(i.Refusal.Commit) + ": " + i.Refusal.Reason
	}
	return ""
}

// short is a commit id as `nuon status` prints it.
func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
