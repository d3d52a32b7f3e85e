package schemas

// KindTrustRoot is the kind of a trust root version.
const KindTrustRoot = "TrustRoot"

// TrustRootFile is one version of the trust root as filed on main
// (trust-root.schema.json; package trust gives it meaning and checks its
// signatures). Times are RFC 3339 strings here, parsed by package trust so
// that a bad one is reported at its line.
type TrustRootFile struct {
	Signed     TrustRoot        `yaml:"signed" json:"signed"`
	Signatures []TrustSignature `yaml:"signatures" json:"signatures"`
}

// TrustRoot is the signed content of one trust root version.
type TrustRoot struct {
	APIVersion  string            `yaml:"apiVersion" json:"apiVersion"`
	Kind        string            `yaml:"kind" json:"kind"`
	Version     int64             `yaml:"version" json:"version"`
	Expires     string            `yaml:"expires" json:"expires"`
	Root        TrustRootRole     `yaml:"root" json:"root"`
	Roles       TrustRoles        `yaml:"roles" json:"roles"`
	Revocations []TrustRevocation `yaml:"revocations,omitempty" json:"revocations,omitempty"`
	Provenance  *TrustProvenance  `yaml:"provenance,omitempty" json:"provenance,omitempty"`
}

// TrustProvenance is what an artifact's build provenance must show, per
// component and per channel.
type TrustProvenance struct {
	// Sources name, per component (a glob), the source repositories and
	// refs its artifacts may be built from.
	Sources []TrustSource `yaml:"sources,omitempty" json:"sources,omitempty"`
	// Builders name, per channel, how many distinct builder keys must
	// each have signed a matching provenance of one digest.
	Builders []TrustBuilderRule `yaml:"builders,omitempty" json:"builders,omitempty"`
}

// TrustSource allows artifacts of components matching Component to come
// from Repository at a ref matching Ref.
type TrustSource struct {
	Component  string `yaml:"component" json:"component"`
	Repository string `yaml:"repository" json:"repository"`
	Ref        string `yaml:"ref" json:"ref"`
}

// TrustBuilderRule requires Builders distinct builder keys' provenance
// for every artifact an install on one of Channels copies.
type TrustBuilderRule struct {
	Channels []string `yaml:"channels" json:"channels"`
	Builders int      `yaml:"builders" json:"builders"`
}

// TrustRootRole is the root role: the offline keys that sign the root.
type TrustRootRole struct {
	Threshold int            `yaml:"threshold" json:"threshold"`
	Keys      []TrustRootKey `yaml:"keys" json:"keys"`
}

// TrustRootKey is one root key. Root keys have no windows or scope: they
// change only by a new version of the root.
type TrustRootKey struct {
	Name string `yaml:"name" json:"name"`
	Key  string `yaml:"key" json:"key"`
}

// TrustRoles is every role but root, by name. Render is required: a root
// without a render key would stop every install.
type TrustRoles struct {
	Render          TrustRole  `yaml:"render" json:"render"`
	VendorArtifacts *TrustRole `yaml:"vendor-artifacts,omitempty" json:"vendor-artifacts,omitempty"`
	Builders        *TrustRole `yaml:"builders,omitempty" json:"builders,omitempty"`
	Operators       *TrustRole `yaml:"operators,omitempty" json:"operators,omitempty"`
	Approvers       *TrustRole `yaml:"approvers,omitempty" json:"approvers,omitempty"`
	Server          *TrustRole `yaml:"server,omitempty" json:"server,omitempty"`
	BuildRequesters *TrustRole `yaml:"build-requesters,omitempty" json:"build-requesters,omitempty"`
	BuildAgents     *TrustRole `yaml:"build-agents,omitempty" json:"build-agents,omitempty"`
}

// TrustRole is the keys of one role other than root.
type TrustRole struct {
	Threshold int         `yaml:"threshold" json:"threshold"`
	Scope     *TrustScope `yaml:"scope,omitempty" json:"scope,omitempty"`
	Keys      []TrustKey  `yaml:"keys" json:"keys"`
}

// TrustKey is one key of a role, with its validity window.
type TrustKey struct {
	Name      string      `yaml:"name" json:"name"`
	Key       string      `yaml:"key" json:"key"`
	NotBefore string      `yaml:"notBefore,omitempty" json:"notBefore,omitempty"`
	NotAfter  string      `yaml:"notAfter,omitempty" json:"notAfter,omitempty"`
	Scope     *TrustScope `yaml:"scope,omitempty" json:"scope,omitempty"`
}

// TrustScope says where a key applies.
type TrustScope struct {
	InstallLabels map[string]string `yaml:"installLabels,omitempty" json:"installLabels,omitempty"`
	Channels      []string          `yaml:"channels,omitempty" json:"channels,omitempty"`
	RequestKinds  []string          `yaml:"requestKinds,omitempty" json:"requestKinds,omitempty"`
}

// TrustRevocation revokes one key from revokedAt on.
type TrustRevocation struct {
	Fingerprint string `yaml:"fingerprint" json:"fingerprint"`
	RevokedAt   string `yaml:"revokedAt" json:"revokedAt"`
	Reason      string `yaml:"reason" json:"reason"`
}

// TrustSignature is one root key's signature over the canonical form of
// the signed content.
type TrustSignature struct {
	KeyID string `yaml:"keyid" json:"keyid"`
	Sig   string `yaml:"sig" json:"sig"`
}
