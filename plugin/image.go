package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// A plugin's container image is the same release as its artifact, in the
// form any container runtime runs: an OCI image (standard media types)
// whose one added layer is the plugin's directory at ImageDir, whose
// config's Entrypoint is the plugin's linux/amd64 executable there, whose
// config label ImageManifestLabel is the plugin's manifest, and whose
// manifest annotation ImageArtifactAnnotation names the digest of the
// plugin's artifact of the same release. It is signed with the vendor's
// key like the artifact and pinned by digest beside it
// (schemas.PluginImageArtifactName).
const (
	// ImageDir is where an image holds the plugin's directory.
	ImageDir = "/nuon-plugin"
	// ImageManifestLabel is the config label holding the plugin's
	// manifest, as JSON.
	ImageManifestLabel = "dev.nuon.plugin.manifest"
	// ImageArtifactAnnotation is the manifest annotation naming the
	// digest of the plugin's artifact of the same release.
	ImageArtifactAnnotation = "dev.nuon.plugin.artifact"
	// ImagePlatform is the platform of a plugin's image.
	ImagePlatform = "linux/amd64"
	// ImageUser is who the image runs as: no one (a restricted pod runs
	// as non-root).
	ImageUser = "65532:65532"
	// maxImageConfig bounds an image's config (a base image's history
	// makes it larger than an artifact's).
	maxImageConfig = 4 << 20
)

// PackageImage packages the plugin directory dir (as Package reads it) as
// the plugin's container image on top of base (nil: no base, enough for a
// static executable; a script needs its interpreter's), tied to the
// plugin's artifact of the same release by its digest artifact. The
// manifest must name a linux/amd64 executable. The same directory, base
// and artifact give the same digest.
func PackageImage(dir string, base v1.Image, artifact v1.Hash) (v1.Image, *schemas.PluginManifest, error) {
	_, m, err := Package(dir)
	if err != nil {
		return nil, nil, err
	}
	exe, ok := m.Executables[ImagePlatform]
	if !ok {
		return nil, nil, fmt.Errorf("package plugin %s image: its manifest names no %s executable (it has %v)", m.Name, ImagePlatform, sortedKeys(m.Executables))
	}
	files, err := oci.DirFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	prefix := ImageDir[1:]
	under := []oci.File{{Name: prefix, Mode: fs.ModeDir | 0o755}}
	for _, f := range files {
		f.Name = prefix + "/" + f.Name
		under = append(under, f)
	}
	layer, err := oci.Archive(under)
	if err != nil {
		return nil, nil, err
	}
	label, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	if base == nil {
		base = empty.Image
	}
	img := mutate.MediaType(base, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	// The layer's diff ID (in the config) is the digest of the tar, not
	// of its gzip: a node's containerd checks it when it unpacks the layer.
	gz, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: gz, MediaType: types.OCILayer,
		History: v1.History{CreatedBy: "nuon plugin release " + m.Name + " " + m.Version}})
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", "amd64", v1.Time{}
	cf.Config.Entrypoint = []string{path.Join(ImageDir, exe)}
	cf.Config.Cmd = nil
	cf.Config.User = ImageUser
	cf.Config.WorkingDir = "/"
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	cf.Config.Labels[ImageManifestLabel] = string(label)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, nil, err
	}
	img = mutate.Annotations(img, map[string]string{
		ImageArtifactAnnotation:            artifact.String(),
		"org.opencontainers.image.title":   m.Name,
		"org.opencontainers.image.version": m.Version,
	}).(v1.Image)
	return img, m, nil
}

// Image is a plugin's container image, its signature verified and its
// manifest read from its config.
type Image struct {
	// Ref is the image, by digest.
	Ref name.Digest
	// Manifest is the plugin's manifest, from the config's label.
	Manifest schemas.PluginManifest
	// Entrypoint is the image's entrypoint: the plugin's executable.
	Entrypoint []string
	// Artifact is the digest of the plugin's artifact of the same
	// release, as the image's annotation names it.
	Artifact string
}

// FetchImage reads the plugin image ref (pinned by digest) from the
// registry c reaches: its signature must verify with the vendor's key v
// before anything else is read; then its manifest, which must be an image
// manifest (OCI or Docker, never an index) annotated with the artifact of
// its release, and its config, each by digest: linux/amd64, the plugin's
// manifest in its label, its entrypoint the manifest's linux/amd64
// executable under ImageDir. Nothing is unpacked: the node's runtime
// pulls the layers by the same digest.
func FetchImage(ctx context.Context, c *oci.Client, ref name.Digest, v signature.Verifier) (*Image, error) {
	d, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, fmt.Errorf("plugin image %s: %w", ref, err)
	}
	if _, err := c.VerifySignature(ctx, ref.Context(), d, v); err != nil {
		return nil, fmt.Errorf("plugin image %s: %w", ref, err)
	}
	m, err := c.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("plugin image %s: %w", ref, err)
	}
	if m.MediaType != types.OCIManifestSchema1 && m.MediaType != types.DockerManifestSchema2 {
		return nil, fmt.Errorf("plugin image %s: not an image manifest (%s)", ref, m.MediaType)
	}
	man, err := v1.ParseManifest(bytes.NewReader(m.Raw))
	if err != nil {
		return nil, fmt.Errorf("plugin image %s: %w", ref, err)
	}
	if man.Config.Size > maxImageConfig {
		return nil, fmt.Errorf("plugin image %s: a config of %d bytes", ref, man.Config.Size)
	}
	rc, err := c.Blob(ctx, ref.Context(), man.Config)
	if err != nil {
		return nil, fmt.Errorf("plugin image %s: %w", ref, err)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, maxImageConfig+1))
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("plugin image %s config: %w", ref, err)
	}
	img, err := ParseImage(ref, man, raw)
	if err != nil {
		return nil, err
	}
	return img, nil
}

// ParseImage reads a plugin image from its manifest and its config's raw
// bytes (already checked against the manifest's digest), as FetchImage
// does after the signature.
func ParseImage(ref name.Digest, man *v1.Manifest, config []byte) (*Image, error) {
	art := man.Annotations[ImageArtifactAnnotation]
	if _, err := v1.NewHash(art); err != nil {
		return nil, fmt.Errorf("plugin image %s: the annotation %s is %q, not the digest of the plugin's artifact: %w", ref, ImageArtifactAnnotation, art, err)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(config))
	if err != nil {
		return nil, fmt.Errorf("plugin image %s config: %w", ref, err)
	}
	if p := cf.OS + "/" + cf.Architecture; p != ImagePlatform {
		return nil, fmt.Errorf("plugin image %s: an image for %s, not %s", ref, p, ImagePlatform)
	}
	label, ok := cf.Config.Labels[ImageManifestLabel]
	if !ok {
		return nil, fmt.Errorf("plugin image %s: no plugin manifest (config label %s)", ref, ImageManifestLabel)
	}
	pm, err := decodeManifest(ref.String()+" label "+ImageManifestLabel, []byte(label))
	if err != nil {
		return nil, err
	}
	exe, ok := pm.Executables[ImagePlatform]
	if want := []string{path.Join(ImageDir, exe)}; !ok || !slices.Equal(cf.Config.Entrypoint, want) {
		return nil, fmt.Errorf("plugin image %s: entrypoint %q, want the plugin's %s executable %q", ref, cf.Config.Entrypoint, ImagePlatform, want)
	}
	return &Image{Ref: ref, Manifest: *pm, Entrypoint: cf.Config.Entrypoint, Artifact: art}, nil
}

// AdmitImage checks the container image a job of a vendor's plugin pins
// (schemas.PluginImageArtifactName) as Admit checks its artifact: pinned
// by its digest, its signature verified with the vendor's key v before
// anything else is read, annotated as the release of the artifact the job
// pins (schemas.PluginArtifactName), its signed manifest naming
// job.Plugin, speaking a protocol this side speaks and needing nothing
// job.Grants does not give. It returns the image and what the plugin is
// granted. ErrNotPinned: the job pins no image.
func AdmitImage(ctx context.Context, c *oci.Client, job *schemas.Job, v signature.Verifier) (*Image, schemas.PluginCapabilities, error) {
	art, err := pinnedRef(job, v)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	ref, err := pinnedImageRef(job)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	img, err := FetchImage(ctx, c, ref, v)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	if img.Artifact != art.DigestStr() {
		return nil, schemas.PluginCapabilities{}, fmt.Errorf("plugin %s: %w: the image %s is the release of artifact %s, and the job pins artifact %s", job.Plugin, ErrNotPinned, ref, img.Artifact, art.DigestStr())
	}
	granted, err := admit(job, ref, &img.Manifest)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	return img, granted, nil
}

// PinsImage tells whether a job of a vendor's plugin pins the plugin's
// container image.
func PinsImage(job *schemas.Job) bool {
	return job.Grants != nil && slices.ContainsFunc(job.Artifacts, func(a schemas.Artifact) bool { return a.Name == schemas.PluginImageArtifactName })
}

// pinnedImageRef is the job's plugin image, by digest.
func pinnedImageRef(job *schemas.Job) (name.Digest, error) {
	i := slices.IndexFunc(job.Artifacts, func(a schemas.Artifact) bool { return a.Name == schemas.PluginImageArtifactName })
	if i < 0 {
		return name.Digest{}, fmt.Errorf("plugin %s: %w: the job has no artifact %q", job.Plugin, ErrNotPinned, schemas.PluginImageArtifactName)
	}
	a := job.Artifacts[i]
	ref, err := name.NewDigest(a.Local)
	if err != nil || ref.DigestStr() != a.Digest {
		return name.Digest{}, fmt.Errorf("plugin %s: %w: image %s is not pinned by its digest %s", job.Plugin, ErrNotPinned, a.Local, a.Digest)
	}
	return ref, nil
}
