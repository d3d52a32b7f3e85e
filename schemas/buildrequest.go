package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"time"
)

// BuildRequest asks the build agent to build one component of the app on
// main from a source repository at one commit and to release it as
// Version. Vendor CI signs it with a key listed in BuildTrustFile; the
// build agent builds nothing else.
type BuildRequest struct {
	// ID names the request; a build agent builds an ID once (replay).
	ID string `json:"id"`
	// Component is a component of nuon.yaml on main, or "sandbox".
	Component string `json:"component"`
	// Repository is the source repository (a path, file://, https:// or
	// ssh:// URL) and Commit the full commit id to build from it.
	Repository string `json:"repository"`
	Commit     string `json:"commit"`
	// Ref is the ref that named Commit, for the provenance (refs/tags/v1).
	Ref string `json:"ref,omitempty"`
	// Version is the version to record in releases/<component>.yaml.
	Version string `json:"version"`
	// Requester is the principal of the signing key in BuildTrustFile.
	Requester string `json:"requester"`
	// Created and Expires bound when the request may be built.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// SignedBuildRequest is a build request as it travels: the request's JSON
// bytes exactly as signed, and the armored SSH signature over them.
type SignedBuildRequest struct {
	Request   json.RawMessage `json:"request"`
	Signature string          `json:"signature"`
}

// BuildTrustFile lists, in ssh allowed_signers form, the keys main trusts
// to file build requests.
const BuildTrustFile = "trust/builds"

// MaxBuildRequest bounds a signed build request's size.
const MaxBuildRequest = 16 << 10

// MaxBuildRequestLife bounds Expires - Created: a request is short-lived,
// so its ID need only be remembered that long.
const MaxBuildRequestLife = 24 * time.Hour

var (
	buildIDPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	commitPattern   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	versionPattern  = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$`)
	componentPatten = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// Validate checks the request's fields by themselves, not against main.
func (r BuildRequest) Validate() error {
	switch {
	case !buildIDPattern.MatchString(r.ID):
		return fmt.Errorf("build request id %q: want lower-case letters, digits and dashes", r.ID)
	case !componentPatten.MatchString(r.Component):
		return fmt.Errorf("build request %s: component %q is not a component name", r.ID, r.Component)
	case r.Repository == "" || len(r.Repository) > 1024:
		return fmt.Errorf("build request %s: repository is required", r.ID)
	case !commitPattern.MatchString(r.Commit):
		return fmt.Errorf("build request %s: commit %q: want the full 40-hex commit id", r.ID, r.Commit)
	case !versionPattern.MatchString(r.Version):
		return fmt.Errorf("build request %s: version %q is not a version", r.ID, r.Version)
	case r.Requester == "":
		return fmt.Errorf("build request %s: requester is required", r.ID)
	case r.Created.IsZero() || r.Expires.IsZero():
		return fmt.Errorf("build request %s: created and expires are required", r.ID)
	case !r.Expires.After(r.Created):
		return fmt.Errorf("build request %s: expires before it is created", r.ID)
	case r.Expires.Sub(r.Created) > MaxBuildRequestLife:
		return fmt.Errorf("build request %s: lives longer than %s", r.ID, MaxBuildRequestLife)
	}
	return nil
}

// ErrBuildRequestExpired marks a request past its Expires.
var ErrBuildRequestExpired = errors.New("build request expired")

// BuildAgentTrustFile lists, in ssh allowed_signers form, the build
// agents' keys: the keys that may take build requests from the tenant
// server and answer them.
const BuildAgentTrustFile = "trust/build-agents"

// States of a build request on the tenant server.
const (
	BuildQueued    = "queued"
	BuildRunning   = "building"
	BuildSucceeded = "succeeded"
	BuildFailed    = "failed"
)

// BuildStatus is what the tenant server knows of one build request
// (GET /builds/requests/ID): its state, who took it, and the outcome.
type BuildStatus struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Component string `json:"component"`
	Commit    string `json:"commit"`
	Version   string `json:"version"`
	Requester string `json:"requester"`
	Agent     string `json:"agent,omitempty"`
	// Attempt counts the takes by build agents: a take whose lease
	// expired (the agent died or lost the server) is queued again and
	// taken anew, at most MaxBuildAttempts times.
	Attempt int `json:"attempt,omitempty"`
	// Phase is what the agent building it last reported (checkout,
	// build, release); it is not recorded on the queue ref.
	Phase string `json:"phase,omitempty"`
	// LeaseSeconds is the lease the agent took it for and LeaseUntil
	// when it ends unless renewed.
	LeaseSeconds int        `json:"leaseSeconds,omitempty"`
	LeaseUntil   *time.Time `json:"leaseUntil,omitempty"`
	// ReleaseCommit is the commit on main that released the build.
	ReleaseCommit string     `json:"releaseCommit,omitempty"`
	Filed         time.Time  `json:"filed"`
	Started       *time.Time `json:"started,omitempty"`
	Finished      *time.Time `json:"finished,omitempty"`
	// Note says why the state last changed when it is not the plain
	// next step (a lease expired, a release found already on main).
	Note string `json:"note,omitempty"`
	// Error says why the build failed or was refused by the agent.
	Error string `json:"error,omitempty"`
	// Result is the build agent's report of a finished build.
	Result json.RawMessage `json:"result,omitempty"`
}

// BuildRefPrefix + id is a build request's queue ref: its first commit
// files the signed request, each later one records a change of its state
// (taken by an agent with a lease, requeued when the lease expired,
// succeeded with the release commit, failed with the error), every commit
// signed by the tenant server.
const BuildRefPrefix = "refs/heads/nuon/builds/"

// BuildRef is build request id's queue ref.
func BuildRef(id string) string { return BuildRefPrefix + id }

// Files of a build queue commit's tree.
const (
	BuildRequestFile = "request.json"
	BuildStateFile   = "state.json"
)

// MaxBuildAttempts bounds how often a request is taken: after as many
// expired leases it fails.
const MaxBuildAttempts = 3

// Bounds of a build agent's lease on a request it took.
const (
	MinBuildLease     = 2 * time.Second
	MaxBuildLease     = 10 * time.Minute
	DefaultBuildLease = 60 * time.Second
)

// BuildProgress is a build agent's renewal of its lease, with the phase
// the build is in.
type BuildProgress struct {
	Phase string `json:"phase,omitempty"`
}

// BuildOutcome is the build agent's answer to a build request: Error when
// it failed or refused, else Result.
type BuildOutcome struct {
	Error string `json:"error,omitempty"`
	// ReleaseCommit is the commit on main that holds the release (made
	// by this build or found there, made by an earlier attempt).
	ReleaseCommit string          `json:"releaseCommit,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
}

// ValidBuildID reports whether id is a well-formed build request id.
func ValidBuildID(id string) bool { return buildIDPattern.MatchString(id) }

// BuildSourcesFile on main says which source repositories, and which refs
// of them, each component may be built from: the build agent refuses a
// request for any other (and the server refuses to queue it).
const BuildSourcesFile = "trust/build-sources.yaml"

// BuildSources is BuildSourcesFile: per component (or "sandbox") the
// sources it may be built from. A component it does not name is built
// from nowhere.
type BuildSources struct {
	Components map[string][]BuildSource `yaml:"components" json:"components"`
	// From is where the sources were read when not BuildSourcesFile:
	// the trust root version whose provenance sources they are, whose
	// component names are path.Match globs.
	From string `yaml:"-" json:"-"`
}

// Where names the file the sources were read from.
func (s *BuildSources) Where() string {
	if s.From != "" {
		return s.From
	}
	return BuildSourcesFile
}

// For returns the sources allowed for component: its own entry, and from
// a trust root every entry whose glob matches it.
func (s *BuildSources) For(component string) []BuildSource {
	if s.From == "" {
		return s.Components[component]
	}
	var out []BuildSource
	for _, glob := range slices.Sorted(maps.Keys(s.Components)) {
		if ok, _ := path.Match(glob, component); ok {
			out = append(out, s.Components[glob]...)
		}
	}
	return out
}

// BuildSource is one source repository a component may be built from.
type BuildSource struct {
	// Repository is compared with the request's repository exactly (a
	// trailing slash aside).
	Repository string `yaml:"repository" json:"repository"`
	// Refs are the refs (path.Match patterns: refs/tags/v*) a request may
	// name; the build agent checks that the commit is reachable from the
	// ref it names. Empty: the request must name no ref or any ref.
	Refs []string `yaml:"refs,omitempty" json:"refs,omitempty"`
}
