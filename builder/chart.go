package builder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	"nuon.dev/nuon/internal/oci"
)

// Chart is a packaged Helm chart.
type Chart struct {
	Image    v1.Image
	Metadata *chart.Metadata
	// Archive is the chart archive (the .tgz `helm package` would write,
	// reproducibly).
	Archive []byte
}

// PackageChart packages the chart in dir as `helm push` stores one: an OCI
// manifest whose config is the chart's metadata as JSON and whose one
// layer is the chart archive, with Helm's media types, so that stock helm
// pulls and installs it. Helm's loader decides which files belong to the
// chart (.helmignore) and validates it; the archive holds those files, as
// written, under a directory named after the chart, in Archive's
// reproducible form. The manifest carries no creation time.
func PackageChart(dir string) (*Chart, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	meta := c.Metadata
	files := make([]oci.File, 0, len(c.Raw))
	for _, f := range c.Raw {
		name := path.Clean(f.Name)
		if strings.HasPrefix(name, "../") || path.IsAbs(name) {
			return nil, fmt.Errorf("chart %s: file %q lies outside the chart", dir, f.Name)
		}
		files = append(files, oci.File{Name: meta.Name + "/" + name, Mode: 0o644, Data: f.Data})
	}
	archive, err := oci.Archive(files)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	// What helm's loader accepts is what helm install will.
	if _, err := loader.LoadArchive(bytes.NewReader(archive)); err != nil {
		return nil, fmt.Errorf("chart %s: the packaged archive does not load: %w", dir, err)
	}
	config, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	annotations := map[string]string{
		"org.opencontainers.image.title":   meta.Name,
		"org.opencontainers.image.version": meta.Version,
	}
	if meta.Description != "" {
		annotations["org.opencontainers.image.description"] = meta.Description
	}
	img, err := oci.NewArtifact(oci.HelmConfigMediaType, config, oci.HelmChartMediaType, archive, annotations)
	if err != nil {
		return nil, err
	}
	return &Chart{Image: img, Metadata: meta, Archive: archive}, nil
}

// ChartTag is the tag helm gives a chart version: helm pull --version V
// looks for it ("+" is not allowed in tags; helm writes "_").
func ChartTag(version string) string { return strings.ReplaceAll(version, "+", "_") }
