package schemas

import (
	"fmt"
	"strconv"
	"time"
)

// The tenant repository's refs (see DESIGN.md, "The repository").
const (
	// MainRef holds the source: nuon.yaml, channels/, releases/,
	// installs/.
	MainRef = "refs/heads/main"
	// RenderedRef holds one signed commit per render whose tree has every
	// install's rendered state under InstallsDir.
	RenderedRef = "refs/heads/nuon/rendered"
	// InstallRefPrefix + id is an install's desired state: the one ref its
	// agent reads.
	InstallRefPrefix = "refs/heads/nuon/installs/"
	// StatusRefPrefix + id is an install's status: the one ref its agent
	// writes.
	StatusRefPrefix = "refs/heads/nuon/status/"
)

// InstallRef is the ref of an install's desired state.
func InstallRef(id string) string { return InstallRefPrefix + id }

// StatusRef is the ref of an install's status.
func StatusRef(id string) string { return StatusRefPrefix + id }

// Trailers of the commits nuon writes. A per-install commit carries
// TrailerInstall, TrailerGeneration and TrailerSource; the rendered commit
// carries TrailerSource, TrailerChanged and one TrailerInstall per changed
// install (up to a limit); a status commit carries TrailerInstall,
// TrailerGeneration, TrailerDesired and TrailerPhase.
const (
	TrailerInstall    = "Nuon-Install"
	TrailerGeneration = "Nuon-Generation"
	TrailerSource     = "Nuon-Source"
	TrailerChanged    = "Nuon-Installs-Changed"
	TrailerDesired    = "Nuon-Desired"
	TrailerPhase      = "Nuon-Phase"
	// TrailerExpires bounds how long a per-install commit is fresh: an
	// RFC 3339 UTC time after which the agent reports its desired state
	// Stale (a frozen or withheld ref) instead of trusting it as current.
	TrailerExpires = "Nuon-Expires"
	// TrailerReplaces names, on a per-install commit, the commit it
	// replaced on the install's ref because the renderer had not signed it.
	TrailerReplaces = "Nuon-Replaces"
)

// Paths of the rendered tree: InstallsDir/<id>/ in the rendered commit
// (the same folder name as the source's installs/ on main), and the whole
// tree of an install's desired ref. The source's paths are in source.go.
// IssuedDir/<id> in the rendered commit records the last per-install
// commit the renderer signed for that install and its generation, as
// "GENERATION COMMIT\n": the renderer's own, signed memory of what it
// issued, never read from an install ref.
const (
	IssuedDir        = "issued"
	InstallStateFile = "install.json"
	ComponentsDir    = "components"
)

// ComponentStateFile is the path of a component's file in an install's
// rendered tree.
func ComponentStateFile(name string) string { return ComponentsDir + "/" + name + ".json" }

// Paths of a status commit's tree.
const (
	// StatusFile is the Status.
	StatusFile = "status.json"
	// AppliedDir holds <component>.json, the resolved ComponentState each
	// component's last job ran with.
	AppliedDir = "applied"
	// JobsDir holds <job id>.json, the manifests of the jobs the status
	// commit reports.
	JobsDir = "jobs"
	// The status tree's answers/<request id>.txt are request answers
	// (AnswersDir); an install's rendered tree may hold requests.json, its
	// pending requests (RequestsFile).
)

// Generation reads the generation trailer of a commit message: a positive
// decimal number.
func Generation(msg string) (int64, error) {
	v, ok := Trailer(msg, TrailerGeneration)
	if !ok {
		return 0, fmt.Errorf("no %s trailer", TrailerGeneration)
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil || g < 1 || strconv.FormatInt(g, 10) != v {
		return 0, fmt.Errorf("bad %s trailer %q: want a positive decimal number", TrailerGeneration, v)
	}
	return g, nil
}

// Expires reads the freshness bound of a commit message. ok is false when
// the commit has none (freshness is off for its tenant).
func Expires(msg string) (t time.Time, ok bool, err error) {
	v, ok := Trailer(msg, TrailerExpires)
	if !ok {
		return time.Time{}, false, nil
	}
	t, err = time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, true, fmt.Errorf("bad %s trailer %q: want an RFC 3339 time", TrailerExpires, v)
	}
	return t.UTC(), true, nil
}
