package oci

import "nuon.dev/nuon/schemas"

// Media types of nuon's own artifacts. A Terraform module and a set of
// Kubernetes manifests are each one OCI image manifest with a config blob
// and one gzipped tar layer; the config media type says what the artifact
// is (as an OCI 1.1 artifactType would, for registries that predate it).
const (
	// TerraformConfigMediaType is the config of a Terraform module.
	TerraformConfigMediaType = "application/vnd.nuon.terraform.config.v1+json"
	// TerraformModuleMediaType is the layer holding the module's directory.
	TerraformModuleMediaType = "application/vnd.nuon.terraform.module.v1.tar+gzip"
	// ManifestsConfigMediaType is the config of a set of Kubernetes manifests.
	ManifestsConfigMediaType = "application/vnd.nuon.manifests.config.v1+json"
	// ManifestsContentMediaType is the layer holding the manifests' directory.
	ManifestsContentMediaType = "application/vnd.nuon.manifests.content.v1.tar+gzip"
)

// Media types of a Helm chart as `helm push` writes it, so that stock helm
// pulls what nuon builds. They equal helm.sh/helm/v3/pkg/registry's
// ConfigMediaType and ChartLayerMediaType; a test keeps them so without
// making this package depend on Helm.
const (
	HelmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ManifestMediaType is the media type of every manifest nuon writes.
const ManifestMediaType = "application/vnd.oci.image.manifest.v1+json"

// Kind is what an artifact holds, by its media types.
type Kind struct {
	// Type is the component type that deploys it.
	Type string
	// Artifact is the artifact's name in a release (releases/<c>.yaml).
	Artifact string
	// Config and Layer are the media types of its config and content.
	Config, Layer string
	// Strip is how many leading path elements extraction drops: a Helm
	// chart archive holds one directory named after the chart.
	Strip int
}

// Kinds of directory artifacts, by component type.
var (
	Terraform = Kind{Type: schemas.TypeTerraform, Artifact: "module", Config: TerraformConfigMediaType, Layer: TerraformModuleMediaType}
	Manifests = Kind{Type: schemas.TypeManifests, Artifact: "manifests", Config: ManifestsConfigMediaType, Layer: ManifestsContentMediaType}
	Helm      = Kind{Type: schemas.TypeHelm, Artifact: "chart", Config: HelmConfigMediaType, Layer: HelmChartMediaType, Strip: 1}
)

// ImageArtifact is the artifact name of an image component.
const ImageArtifact = "image"

// KindOf returns the kind of a component type that is a directory
// artifact; ok is false for image components and unknown types.
func KindOf(componentType string) (Kind, bool) {
	for _, k := range []Kind{Terraform, Manifests, Helm} {
		if k.Type == componentType {
			return k, true
		}
	}
	return Kind{}, false
}

// kindOfLayer returns the kind whose content layer has media type mt.
func kindOfLayer(mt string) (Kind, bool) {
	for _, k := range []Kind{Terraform, Manifests, Helm} {
		if k.Layer == mt {
			return k, true
		}
	}
	return Kind{}, false
}
