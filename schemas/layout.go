package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
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
	// ArchiveRefPrefix + id + "/" holds a deleted install's refs: nuon
	// install delete moves its InstallRef and StatusRef there (ArchiveGenRef)
	// as its audit log, out of refs/heads/ where agents and mirrors look.
	// An id deleted again (an install created again under the same id)
	// gets a new generation beside the earlier ones: nothing is
	// overwritten (ArchiveGenRef).
	ArchiveRefPrefix = "refs/nuon/archive/"
	// LivenessRefPrefix + id is an install's liveness on a plain git host:
	// one parentless commit signed by the install's key, force-updated at
	// each heartbeat, so it keeps only its tip and adds no history. An
	// agent that talks to nuon server writes none: its signed polls are
	// its liveness.
	LivenessRefPrefix = "refs/heads/nuon/liveness/"
)

// LivenessRef is the ref of an install's liveness on a plain git host.
func LivenessRef(id string) string { return LivenessRefPrefix + id }

// InstallRef is the ref of an install's desired state.
func InstallRef(id string) string { return InstallRefPrefix + id }

// StatusRef is the ref of an install's status.
func StatusRef(id string) string { return StatusRefPrefix + id }

// ArchiveGenRef is where generation gen of install id's archive keeps
// live. Each deletion of an id archives its refs as a new generation, the
// one after the newest there (1 for the first): generation 1 is
// ArchiveRefPrefix + id + "/installs" and "/status" (the names before
// generations, so older archives read as generation 1); generation n > 1
// is ArchiveRefPrefix + id + "/<n>/installs" and "/<n>/status". The
// newest generation is the current archive; the earlier ones are kept
// as they were, each the history of an install that once had the id.
func ArchiveGenRef(id string, gen int, live string) string {
	kind := strings.TrimPrefix(strings.TrimSuffix(live, "/"+id), "refs/heads/nuon/")
	if gen <= 1 {
		return ArchiveRefPrefix + id + "/" + kind
	}
	return ArchiveRefPrefix + id + "/" + strconv.Itoa(gen) + "/" + kind
}

// MaxArchiveGen bounds the generation ParseArchiveRef accepts.
const MaxArchiveGen = 1 << 30

// ParseArchiveRef parses an archived ref's name (ArchiveGenRef): the
// install id, the generation and the live ref it keeps (InstallRef or
// StatusRef of id). ok is false for any other name: an id is not empty
// and has no "/", a generation past 1 is written in decimal without
// leading zeros, at most MaxArchiveGen.
func ParseArchiveRef(name string) (id string, gen int, live string, ok bool) {
	rest, found := strings.CutPrefix(name, ArchiveRefPrefix)
	if !found {
		return "", 0, "", false
	}
	parts := strings.Split(rest, "/")
	gen = 1
	switch len(parts) {
	case 2:
	case 3:
		g, err := strconv.Atoi(parts[1])
		if err != nil || g < 2 || g > MaxArchiveGen || strconv.Itoa(g) != parts[1] {
			return "", 0, "", false
		}
		gen = g
	default:
		return "", 0, "", false
	}
	id = parts[0]
	if id == "" {
		return "", 0, "", false
	}
	switch parts[len(parts)-1] {
	case "installs":
		live = InstallRef(id)
	case "status":
		live = StatusRef(id)
	default:
		return "", 0, "", false
	}
	return id, gen, live, true
}

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

// Paths of the rendered tree: RenderedInstallPath(id), that is
// InstallsDir/<shard>/<id>/ in the rendered commit (the same top folder
// name as the source's installs/ on main), and the whole tree of an
// install's desired ref. The source's paths are in source.go.
// IssuedPath(id), IssuedDir/<shard>/<id> in the rendered commit, records
// the last per-install commit the renderer signed for that install and its
// generation, as "GENERATION COMMIT\n": the renderer's own, signed memory
// of what it issued, never read from an install ref.
//
// Both folders are split into Shards folders named by Shard(id), so that
// a render that changes one install of a large fleet writes one small
// folder and the top one, not a folder with an entry per install.
// Rendered commits made before (renderer Format 2 and older) hold
// InstallsDir/<id>/ and IssuedDir/<id> directly: a reader of history
// tells them apart by that Format (see FlatLayout).
const (
	IssuedDir        = "issued"
	InstallStateFile = "install.json"
	ComponentsDir    = "components"
)

// Shards is the number of folders the rendered InstallsDir and IssuedDir
// are split into: at 100,000 installs, some 400 entries each.
const Shards = 256

// Shard is the folder of install id in the rendered InstallsDir and
// IssuedDir: the first byte of the SHA-256 of the id, as two lower-case
// hex digits. A hash spreads any naming scheme evenly; `nuon status` and
// RenderedInstallPath spare people computing it.
func Shard(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:1])
}

// RenderedInstallPath is the folder of install id in the rendered tree.
func RenderedInstallPath(id string) string { return InstallsDir + "/" + Shard(id) + "/" + id }

// IssuedPath is the issued record of install id in the rendered tree.
func IssuedPath(id string) string { return IssuedDir + "/" + Shard(id) + "/" + id }

// FlatLayout reports whether a rendered commit made with renderer format
// format (its Nuon-Render-Format trailer; 0 when it has none) holds
// InstallsDir/<id> and IssuedDir/<id> without shards.
func FlatLayout(format int) bool { return format < ShardedFormat }

// ShardedFormat is the first renderer format whose rendered tree is split
// into shards.
const ShardedFormat = 3

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
