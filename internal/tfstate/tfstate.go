package tfstate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"nuon.dev/nuon/schemas"
)

// The environment that sends a job's state to Terraform's kubernetes
// backend instead of the local state file. The Kubernetes Job runner
// (agent/jobs.Kube) sets it on the job's container; the terraform plugin
// (reconciler/terraform) reads it unless its Backend is set.
const (
	// EnvStateNamespace is the namespace of the state Secret and lock
	// Lease: the install's own (the runner's Jobs namespace).
	EnvStateNamespace = "NUON_TF_STATE_NAMESPACE"
	// EnvStateSecretSuffix is the backend's secret_suffix
	// (StateSecretSuffix of the install and component).
	EnvStateSecretSuffix = "NUON_TF_STATE_SECRET_SUFFIX"
	// EnvStaleLock is the ID of a state lock the agent found held by a
	// job it knows is dead; the job breaks that lock, and only that one.
	EnvStaleLock = "NUON_TF_STATE_STALE_LOCK"
)

// Names Terraform's kubernetes backend gives its objects in the default
// workspace, the only one nuon uses.
const (
	stateSecretPrefix = "tfstate-default-"
	stateLeasePrefix  = "lock-tfstate-default-"
	// LeaseLockAnnotation holds the lock's LockInfo as JSON on the Lease.
	LeaseLockAnnotation = "app.terraform.io/lock-info"
)

// StateSecretSuffix is the kubernetes backend's secret_suffix for a
// component of an install: a label value of at most 59 characters, unique
// per install and component (a hash of both), that never ends in
// -<number> (which the backend refuses: it numbers its chunks so).
func StateSecretSuffix(install, component string) string {
	sum := sha256.Sum256([]byte(install + "\x00" + component))
	name := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(install+"-"+component), "-"), "-")
	if len(name) > 44 {
		name = strings.TrimRight(name[:44], "-")
	}
	if name != "" {
		name += "-"
	}
	return name + hex.EncodeToString(sum[:])[:8] + "-state"
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// StateSecretName is the Secret that holds the state of suffix.
func StateSecretName(suffix string) string { return stateSecretPrefix + suffix }

// StateLeaseName is the Lease that locks the state of suffix.
func StateLeaseName(suffix string) string { return stateLeasePrefix + suffix }

// LockInfo is a state lock as Terraform describes it: in the error of a
// command that could not take the lock, and in the lock itself (the
// kubernetes backend's Lease annotation LeaseLockAnnotation).
type LockInfo struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation,omitempty"`
	Who       string    `json:"Who,omitempty"`
	Version   string    `json:"Version,omitempty"`
	Created   time.Time `json:"Created,omitzero"`
	Info      string    `json:"Info,omitempty"`
}

// Schema is the lock as a JobResult reports it; nil for nil.
func (l *LockInfo) Schema() *schemas.StateLock {
	if l == nil {
		return nil
	}
	s := &schemas.StateLock{ID: l.ID, Operation: l.Operation, Who: l.Who}
	if !l.Created.IsZero() {
		s.Created = l.Created.UTC().Format(time.RFC3339Nano)
	}
	return s
}

func (l LockInfo) String() string {
	s := "lock " + l.ID
	if l.Operation != "" {
		s += ", " + l.Operation
	}
	if l.Who != "" {
		s += " by " + l.Who
	}
	if !l.Created.IsZero() {
		s += " since " + l.Created.UTC().Format(time.RFC3339)
	}
	return s
}

// ParseLeaseLock reads the LockInfo a kubernetes backend Lease holds in
// its LeaseLockAnnotation.
func ParseLeaseLock(annotation string) (LockInfo, error) {
	var l LockInfo
	if err := json.Unmarshal([]byte(annotation), &l); err != nil {
		return LockInfo{}, fmt.Errorf("lease lock info: %w", err)
	}
	if l.ID == "" {
		return LockInfo{}, fmt.Errorf("lease lock info: no ID")
	}
	return l, nil
}

// lockLine matches one field of the "Lock Info:" block terraform prints
// when it cannot take the state lock.
var lockLine = regexp.MustCompile(`(?m)^\s*(ID|Path|Operation|Who|Version|Created|Info):[ \t]*(.*?)\s*$`)

// ParseLockError reads the lock from the output of a terraform command
// that failed because the state is locked ("Error acquiring the state
// lock" and its "Lock Info:" block). ok is false for any other failure.
func ParseLockError(out string) (l LockInfo, ok bool) {
	i := strings.Index(out, "Error acquiring the state lock")
	if i < 0 {
		return LockInfo{}, false
	}
	j := strings.Index(out[i:], "Lock Info:")
	if j < 0 {
		return LockInfo{}, false
	}
	block := out[i+j+len("Lock Info:"):]
	// The block ends at the first blank line after its fields.
	if k := strings.Index(strings.TrimLeft(block, "\n"), "\n\n"); k >= 0 {
		block = strings.TrimLeft(block, "\n")[:k]
	}
	for _, m := range lockLine.FindAllStringSubmatch(block, -1) {
		switch m[1] {
		case "ID":
			l.ID = m[2]
		case "Operation":
			l.Operation = m[2]
		case "Who":
			l.Who = m[2]
		case "Version":
			l.Version = m[2]
		case "Info":
			l.Info = m[2]
		case "Created":
			// Go's time.Time String, as terraform prints it.
			if t, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", m[2]); err == nil {
				l.Created = t
			}
		}
	}
	if l.ID == "" || strings.ContainsAny(l.ID, " \t\r") {
		return LockInfo{}, false
	}
	return l, true
}
