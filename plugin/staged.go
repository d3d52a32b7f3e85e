package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// A job whose side may not reach the install registry (the Kubernetes
// runner's process form: its pod has no network unless the plugin is
// granted it) gets everything it reads staged beside it by the agent, in
// one directory its pod mounts read-only:
//
//	artifacts/<i>-<name>/       the job's artifacts, extracted (Process.Stage)
//	plugin/blobs/sha256/<hex>   the plugin's artifact as the agent verified
//	                            it: its OCI manifest, config and content
//	                            layer, each named by its digest (Artifact.Stage)
//
// The job's side (Staged) reads the plugin from there only after checking
// that the manifest hashes to the digest the job pins, and each blob to
// the digest the manifest names; it unpacks the content into a directory
// of its own and runs the executable from there. A file changed or
// swapped on the volume is refused before anything of it runs.
const (
	// StagedPluginBlobs holds the plugin artifact's blobs in a staged
	// directory.
	StagedPluginBlobs = "plugin/blobs/sha256"
	// maxStagedManifest bounds a staged OCI manifest.
	maxStagedManifest = 4 << 20
)

// ErrStagedDigest: a staged plugin whose files do not hash to the digests
// the job pins: changed on the volume, or staged for another job.
var ErrStagedDigest = errors.New("the staged plugin is not the one the job pins")

// Artifact is a plugin artifact admitted for a job (Admit): pinned by
// digest, its signature verified with the vendor's key, its signed
// manifest checked against the job's grants. Its OCI manifest and config
// are kept as read, and Stage reads its content from the registry.
type Artifact struct {
	// Ref is the artifact, by digest.
	Ref name.Digest
	// Manifest is the plugin's signed manifest.
	Manifest schemas.PluginManifest

	c           *oci.Client
	man         *v1.Manifest
	raw, config []byte
}

// Stage writes the artifact, verified, into the staged directory in
// (StagedPluginBlobs): its manifest and config as Admit read and checked
// them, its content layer read from the registry, its size and digest
// checked as it is written. A layer that does not match leaves no file
// under its name.
func (a *Artifact) Stage(ctx context.Context, in string) error {
	dir := filepath.Join(in, filepath.FromSlash(StagedPluginBlobs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, a.Ref.DigestStr()[len("sha256:"):]), a.raw, 0o644); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, a.man.Config.Digest.Hex), a.config, 0o644); err != nil {
		return err
	}
	layer := a.man.Layers[0]
	rc, err := a.c.Blob(ctx, a.Ref.Context(), layer)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", a.Ref, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(dir, ".layer-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("plugin %s: %w", a.Ref, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, layer.Digest.Hex))
}

// Staged is the plugin a job of a vendor's plugin pins, from the staged
// directory in, where the agent wrote it (Artifact.Stage) and the job's
// artifacts (Process.Stage): the staged manifest must hash to the digest
// the job pins, its config and content to the digests it names; the
// config is the plugin's signed manifest, which must name job.Plugin,
// speak a protocol this side speaks and need nothing job.Grants does not
// give, as Pinned checks it. The content is unpacked into work, which must
// be the caller's to remove. The signature is the agent's to have
// verified, with the same pin: no registry is read here.
//
// The Process runs the executable from work and takes the job's artifacts
// from in, extracted, instead of extracting them itself.
func Staged(ctx context.Context, job *schemas.Job, in, work string) (*Process, error) {
	ref, err := pinnedDigest(job)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(in, filepath.FromSlash(StagedPluginBlobs))
	want, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	raw, err := readStaged(dir, v1.Descriptor{Digest: want, Size: -1}, maxStagedManifest)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", job.Plugin, err)
	}
	man, pm, _, err := checkArtifact(ref, raw, func(desc v1.Descriptor) (io.ReadCloser, error) {
		b, err := readStaged(dir, desc, maxConfig)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	})
	if err != nil {
		return nil, err
	}
	granted, err := admit(job, ref, pm)
	if err != nil {
		return nil, err
	}
	exe, ok := pm.Executables[Platform()]
	if !ok {
		return nil, fmt.Errorf("plugin %s %s has no executable for %s", pm.Name, pm.Version, Platform())
	}
	layer := man.Layers[0]
	f, err := os.Open(filepath.Join(dir, layer.Digest.Hex))
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w: no staged content %s: %w", job.Plugin, ErrStagedDigest, layer.Digest, err)
	}
	defer f.Close()
	if err := oci.Extract(ctx, f, layer, work, oci.ExtractOptions{}); err != nil {
		if errors.Is(err, oci.ErrDigestMismatch) {
			err = fmt.Errorf("%w: %w", ErrStagedDigest, err)
		}
		return nil, fmt.Errorf("plugin %s: the staged content: %w", job.Plugin, err)
	}
	return &Process{Runner: Runner{Path: filepath.Join(work, filepath.FromSlash(exe))}, Granted: granted, Manifest: pm,
		Artifact: ref.DigestStr(), Staged: in}, nil
}

// readStaged reads the staged blob desc from dir, at most max bytes, and
// checks its digest (and its size, when known).
func readStaged(dir string, desc v1.Descriptor, max int64) ([]byte, error) {
	if desc.Digest.Algorithm != "sha256" || len(desc.Digest.Hex) != 64 {
		return nil, fmt.Errorf("staged blob: unsupported digest %q", desc.Digest)
	}
	f, err := os.Open(filepath.Join(dir, desc.Digest.Hex))
	if err != nil {
		return nil, fmt.Errorf("%w: no staged blob %s: %w", ErrStagedDigest, desc.Digest, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("staged blob %s: %w", desc.Digest, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: staged blob %s is larger than %d bytes", ErrStagedDigest, desc.Digest, max)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != desc.Digest.Hex || (desc.Size >= 0 && int64(len(b)) != desc.Size) {
		return nil, fmt.Errorf("%w: staged blob %s has %d bytes hashing to sha256:%s", ErrStagedDigest, desc.Digest, len(b), got)
	}
	return b, nil
}

// Stage checks the job's operation against the plugin's manifest and the
// grants, as Prepare does, and extracts the job's artifacts (but the
// plugin's own) into the staged directory in, under artifacts/, where a
// Process with Staged set takes them.
func (p *Process) Stage(ctx context.Context, job *schemas.Job, env reconciler.Env, in string) error {
	m, _, err := p.Handshake(ctx)
	if err != nil {
		return err
	}
	if err := Check(m, Operation(job), p.Granted); err != nil {
		return err
	}
	_, err = stageArtifacts(ctx, job, env, in)
	return err
}

// stagedArtifact is one of a job's artifacts a staged directory holds,
// at rel (a slash path under the directory).
type stagedArtifact struct {
	a   schemas.Artifact
	rel string
}

// stagedArtifacts are the job's artifacts a staged directory holds: all
// but the plugin's own and its image, each at artifacts/<i>-<name>.
func stagedArtifacts(job *schemas.Job) []stagedArtifact {
	var out []stagedArtifact
	for i, a := range job.Artifacts {
		if a.Name == schemas.PluginArtifactName || a.Name == schemas.PluginImageArtifactName {
			continue
		}
		out = append(out, stagedArtifact{a: a, rel: path.Join("artifacts", strconv.Itoa(i)+"-"+a.Name)})
	}
	return out
}

// stageArtifacts extracts the job's artifacts into in (stagedArtifacts).
func stageArtifacts(ctx context.Context, job *schemas.Job, env reconciler.Env, in string) ([]stagedArtifact, error) {
	arts := stagedArtifacts(job)
	for _, s := range arts {
		if err := reconciler.ExtractFresh(ctx, env, s.a, filepath.Join(in, filepath.FromSlash(s.rel))); err != nil {
			return nil, err
		}
	}
	return arts, nil
}
