package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// A plugin released as an artifact is one OCI image manifest: its config
// is the plugin's manifest (ManifestFile), its one layer the plugin's
// directory with an executable per platform, as the manifest's
// executables name them. It is signed like any artifact (cosign's
// sha256-<hex>.sig tag) and pinned by digest.
const (
	// ConfigMediaType is the config of a plugin artifact: its manifest.
	ConfigMediaType = "application/vnd.nuon.plugin.config.v1+json"
	// ContentMediaType is the layer holding the plugin's directory.
	ContentMediaType = "application/vnd.nuon.plugin.content.v1.tar+gzip"
	// ManifestFile is the plugin's manifest in its directory.
	ManifestFile = "plugin.json"
	// maxConfig bounds a plugin artifact's config.
	maxConfig = 1 << 20
)

// Kind is what a plugin artifact is, by its media types.
var Kind = oci.Kind{Type: "plugin", Artifact: "plugin", Config: ConfigMediaType, Layer: ContentMediaType}

// Platform is this machine's platform as a manifest's executables name
// it: linux/amd64.
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// Package packages the plugin directory dir: its ManifestFile, which
// must validate, and its files, among them an executable regular file for
// each platform the manifest names.
func Package(dir string) (v1.Image, *schemas.PluginManifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, nil, fmt.Errorf("package plugin: %w", err)
	}
	m, err := decodeManifest(filepath.Join(dir, ManifestFile), raw)
	if err != nil {
		return nil, nil, err
	}
	files, err := oci.DirFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, platform := range sortedKeys(m.Executables) {
		exe := m.Executables[platform]
		i := slices.IndexFunc(files, func(f oci.File) bool { return f.Name == exe })
		if i < 0 || !files[i].Mode.IsRegular() || files[i].Mode.Perm()&0o111 == 0 {
			return nil, nil, fmt.Errorf("package plugin %s: the %s executable %s is not an executable file in %s", m.Name, platform, exe, dir)
		}
	}
	config, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	img, err := oci.PackageFiles(Kind, files, config, map[string]string{
		"org.opencontainers.image.title":   m.Name,
		"org.opencontainers.image.version": m.Version,
	})
	return img, m, err
}

// decodeManifest reads a plugin manifest and checks that its executables
// are paths inside the plugin's directory.
func decodeManifest(file string, raw []byte) (*schemas.PluginManifest, error) {
	if err := schemas.ValidateJSON(schemas.SchemaPluginManifest, raw); err != nil {
		var ps schemas.Problems
		if errors.As(err, &ps) {
			for i := range ps {
				ps[i].File = file
			}
			return nil, ps
		}
		return nil, err
	}
	var m schemas.PluginManifest
	if err := decodeStrict(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(m.Executables) == 0 {
		return nil, fmt.Errorf("%s: a released plugin names its executables", file)
	}
	for platform, exe := range m.Executables {
		if p := path.Clean(exe); p != exe || !relPath(exe) {
			return nil, fmt.Errorf("%s: executables.%s: %q is not a path inside the plugin's directory", file, platform, exe)
		}
	}
	return &m, nil
}

// relPath tells whether p is a relative slash path with no . or .. part.
func relPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Fetched is a plugin artifact pulled, verified and unpacked.
type Fetched struct {
	// Ref is the artifact, by digest.
	Ref name.Digest
	// Manifest is the plugin's manifest, from the artifact's config.
	Manifest schemas.PluginManifest
	// Executable is the path of the executable for the platform.
	Executable string
}

// Fetch pulls the plugin artifact ref, which must be pinned by digest,
// from the registry c reaches: its signature must verify with the
// vendor's key v before anything else is read; then its config (the
// plugin's manifest) and its content, every digest checked, unpacked
// into dir, and the executable for platform (Platform() when empty)
// picked. An unsigned artifact, one signed by another key, or one that
// is not a plugin is refused, and dir is left as it was.
func Fetch(ctx context.Context, c *oci.Client, ref name.Digest, v signature.Verifier, dir, platform string) (*Fetched, error) {
	if platform == "" {
		platform = Platform()
	}
	man, pm, err := fetchManifest(ctx, c, ref, v)
	if err != nil {
		return nil, err
	}
	exe, ok := pm.Executables[platform]
	if !ok {
		return nil, fmt.Errorf("plugin %s %s has no executable for %s (it has %s)", pm.Name, pm.Version, platform, strings.Join(sortedKeys(pm.Executables), ", "))
	}
	lc, err := c.Blob(ctx, ref.Context(), man.Layers[0])
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	defer lc.Close()
	if err := oci.Extract(ctx, lc, man.Layers[0], dir, oci.ExtractOptions{}); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	return &Fetched{Ref: ref, Manifest: *pm, Executable: filepath.Join(dir, filepath.FromSlash(exe))}, nil
}

// FetchManifest is the signed manifest of the plugin artifact ref (pinned
// by digest): its signature verified with the vendor's key v before
// anything else is read, then its OCI manifest and its config, each by
// digest. Nothing is unpacked.
func FetchManifest(ctx context.Context, c *oci.Client, ref name.Digest, v signature.Verifier) (*schemas.PluginManifest, error) {
	_, pm, err := fetchManifest(ctx, c, ref, v)
	return pm, err
}

func fetchManifest(ctx context.Context, c *oci.Client, ref name.Digest, v signature.Verifier) (*v1.Manifest, *schemas.PluginManifest, error) {
	man, pm, _, _, err := fetchRaw(ctx, c, ref, v)
	return man, pm, err
}

// fetchRaw is fetchManifest, returning the OCI manifest and the config as
// read too.
func fetchRaw(ctx context.Context, c *oci.Client, ref name.Digest, v signature.Verifier) (*v1.Manifest, *schemas.PluginManifest, []byte, []byte, error) {
	d, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	if _, err := c.VerifySignature(ctx, ref.Context(), d, v); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	m, err := c.Get(ctx, ref)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	man, pm, config, err := checkArtifact(ref, m.Raw, func(desc v1.Descriptor) (io.ReadCloser, error) {
		return c.Blob(ctx, ref.Context(), desc)
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return man, pm, m.Raw, config, nil
}

// checkArtifact reads raw, the OCI manifest of the plugin artifact ref,
// which its caller has checked hashes to ref's digest: one config of
// ConfigMediaType, bounded, read through blob (which must verify its
// digest) and decoded as the plugin's manifest, and one content layer.
func checkArtifact(ref name.Digest, raw []byte, blob func(v1.Descriptor) (io.ReadCloser, error)) (*v1.Manifest, *schemas.PluginManifest, []byte, error) {
	man, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	if man.Config.MediaType != ConfigMediaType || len(man.Layers) != 1 || man.Layers[0].MediaType != ContentMediaType {
		return nil, nil, nil, fmt.Errorf("plugin %s: not a plugin artifact (config %s, %d layers)", ref, man.Config.MediaType, len(man.Layers))
	}
	if man.Config.Size > maxConfig {
		return nil, nil, nil, fmt.Errorf("plugin %s: a config of %d bytes", ref, man.Config.Size)
	}
	rc, err := blob(man.Config)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("plugin %s: %w", ref, err)
	}
	config, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("plugin %s config: %w", ref, err)
	}
	pm, err := decodeManifest(ref.String()+" config", config)
	if err != nil {
		return nil, nil, nil, err
	}
	return man, pm, config, nil
}

// Process is the fetched plugin as a job runs it, with the capabilities
// granted: its manifest came signed and pinned by digest, so there is no
// handshake.
func (f *Fetched) Process(granted schemas.PluginCapabilities) *Process {
	m := f.Manifest
	return &Process{Runner: Runner{Path: f.Executable}, Granted: granted, Manifest: &m, Artifact: f.Ref.DigestStr()}
}
