package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// ErrNotPinned: a job of a vendor's plugin that does not pin the
// plugin's artifact, or its grants, as signed desired state does.
var ErrNotPinned = errors.New("no plugin pinned")

// Pinned returns the plugin a job of a vendor's plugin runs (a component
// of type plugin, whose job carries Grants): the job's artifact named
// schemas.PluginArtifactName, pulled from the install registry by its
// digest into dir, its signature verified with the vendor's key v before
// anything else is read. Its signed manifest must name job.Plugin, speak
// a protocol this side speaks and need nothing job.Grants does not give;
// it is granted what it needs of job.Grants and nothing else. Every
// refusal says why, no request reaches the plugin, and dir, which must
// be the caller's to remove, is removed.
func Pinned(ctx context.Context, c *oci.Client, job *schemas.Job, v signature.Verifier, dir string) (*Process, error) {
	p, err := pinned(ctx, c, job, v, dir)
	if err != nil {
		os.RemoveAll(dir)
	}
	return p, err
}

func pinned(ctx context.Context, c *oci.Client, job *schemas.Job, v signature.Verifier, dir string) (*Process, error) {
	ref, err := pinnedRef(job, v)
	if err != nil {
		return nil, err
	}
	f, err := Fetch(ctx, c, ref, v, dir, "")
	if err != nil {
		return nil, err
	}
	granted, err := admit(job, ref, &f.Manifest)
	if err != nil {
		return nil, err
	}
	return f.Process(granted), nil
}

// Admit checks the plugin a job of a vendor's plugin pins as Pinned does,
// without unpacking it: its artifact pinned by digest, its signature
// verified with the vendor's key v before anything else is read, its
// signed manifest (the artifact's config) naming job.Plugin, speaking a
// protocol this side speaks and needing nothing job.Grants does not give.
// It returns the artifact, whose Stage writes it where a job reads it
// without the registry (Staged), and what the plugin is granted: what it
// needs of job.Grants. The Kubernetes runner calls it before it creates
// any object of the job, and sizes the job's pod to the capabilities
// granted.
func Admit(ctx context.Context, c *oci.Client, job *schemas.Job, v signature.Verifier) (*Artifact, schemas.PluginCapabilities, error) {
	ref, err := pinnedRef(job, v)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	man, m, raw, config, err := fetchRaw(ctx, c, ref, v)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	granted, err := admit(job, ref, m)
	if err != nil {
		return nil, schemas.PluginCapabilities{}, err
	}
	return &Artifact{Ref: ref, Manifest: *m, c: c, man: man, raw: raw, config: config}, granted, nil
}

// pinnedRef is the job's plugin artifact, by digest, with a key to
// verify it with.
func pinnedRef(job *schemas.Job, v signature.Verifier) (name.Digest, error) {
	ref, err := pinnedDigest(job)
	if err != nil {
		return ref, err
	}
	if v == nil {
		return name.Digest{}, fmt.Errorf("plugin %s: no vendor key to verify its artifact %s with (nuon agent --vendor-key, nuon job run --plugin-key)", job.Plugin, ref)
	}
	return ref, nil
}

// pinnedDigest is the job's plugin artifact, by digest.
func pinnedDigest(job *schemas.Job) (name.Digest, error) {
	if job.Grants == nil {
		return name.Digest{}, fmt.Errorf("plugin %s: %w: the job has no grants", job.Plugin, ErrNotPinned)
	}
	i := slices.IndexFunc(job.Artifacts, func(a schemas.Artifact) bool { return a.Name == schemas.PluginArtifactName })
	if i < 0 {
		return name.Digest{}, fmt.Errorf("plugin %s: %w: the job has no artifact %q", job.Plugin, ErrNotPinned, schemas.PluginArtifactName)
	}
	art := job.Artifacts[i]
	ref, err := name.NewDigest(art.Local)
	if err != nil || ref.DigestStr() != art.Digest {
		return name.Digest{}, fmt.Errorf("plugin %s: %w: artifact %s is not pinned by its digest %s", job.Plugin, ErrNotPinned, art.Local, art.Digest)
	}
	return ref, nil
}

// admit checks the signed manifest m of the job's plugin artifact ref
// against the job, and returns what of the grants the plugin gets.
func admit(job *schemas.Job, ref name.Digest, m *schemas.PluginManifest) (schemas.PluginCapabilities, error) {
	if m.Name != job.Plugin {
		return schemas.PluginCapabilities{}, fmt.Errorf("plugin %s: the artifact %s is plugin %s %s", job.Plugin, ref, m.Name, m.Version)
	}
	if Negotiate(Protocols, m.Protocols) == 0 {
		return schemas.PluginCapabilities{}, fmt.Errorf("plugin %s %s speaks protocols %v; this job speaks %v: %w", m.Name, m.Version, m.Protocols, Protocols, ErrVersion)
	}
	if miss := Missing(m.Capabilities, *job.Grants); len(miss) > 0 {
		return schemas.PluginCapabilities{}, fmt.Errorf("plugin %s %s needs %s: %w by the install's desired state (nuon.yaml: the component's plugin.grants)", m.Name, m.Version, joinWords(miss), ErrNotGranted)
	}
	return Intersect(m.Capabilities, *job.Grants), nil
}

// Intersect is what of granted need asks for: a plugin gets no capability
// its signed manifest does not declare, whatever is granted.
func Intersect(need, granted schemas.PluginCapabilities) schemas.PluginCapabilities {
	out := schemas.PluginCapabilities{
		Network:       need.Network && granted.Network,
		Secrets:       need.Secrets && granted.Secrets,
		CloudRole:     need.CloudRole && granted.CloudRole,
		WritableState: need.WritableState && granted.WritableState,
	}
	for _, e := range need.Env {
		if slices.Contains(granted.Env, e) {
			out.Env = append(out.Env, e)
		}
	}
	return out
}

func joinWords(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	out := words[0]
	for _, w := range words[1 : len(words)-1] {
		out += ", " + w
	}
	return out + " and " + words[len(words)-1]
}
