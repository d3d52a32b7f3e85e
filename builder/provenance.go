package builder

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	provenancev1 "github.com/in-toto/attestation/go/predicates/provenance/v1"
	attestationv1 "github.com/in-toto/attestation/go/v1"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/cosign/v2/pkg/types"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nuon.dev/nuon/internal/oci"
)

// Provenance vocabulary: the SLSA v1 predicate in an in-toto v1
// statement, in a DSSE envelope of in-toto's payload type, as `cosign
// attest --type slsaprovenance1` writes it and `cosign verify-attestation
// --type slsaprovenance1` reads it.
const (
	// PredicateSLSAProvenance1 is SLSA v1's predicate type.
	PredicateSLSAProvenance1 = "https://slsa.dev/provenance/v1"
	// BuildType names how nuon build turns a source into an artifact:
	// the meaning of the external parameters.
	BuildType = "https://nuon.dev/build/v1"
)

// Source is where an artifact was built from.
type Source struct {
	// Repository is the source repository's URI (git+https://…).
	Repository string
	// Ref is the ref built (refs/heads/main, refs/tags/v1.2.0).
	Ref string
	// Commit is the commit the ref named when it was built.
	Commit string
}

// Provenance is what a build says about one artifact.
type Provenance struct {
	// BuilderID names the builder (its root role key name, or a URI).
	BuilderID string
	Source    Source
	// Parameters are the build's own parameters (component, type,
	// artifact name).
	Parameters map[string]any
	// Started and Finished bound the build.
	Started, Finished time.Time
}

// Statement is the in-toto v1 statement with the SLSA v1 provenance of the
// artifact a: its one subject is a's repository and sha256 digest.
func (p Provenance) Statement(a Artifact) ([]byte, error) {
	alg, hex, ok := strings.Cut(a.Digest, ":")
	if !ok || alg != "sha256" || len(hex) != 64 {
		return nil, fmt.Errorf("provenance of %s: digest %q is not sha256:<64 hex>", a.Repository, a.Digest)
	}
	ext, err := structpb.NewStruct(map[string]any{
		"source": map[string]any{"repository": p.Source.Repository, "ref": p.Source.Ref},
	})
	if err != nil {
		return nil, fmt.Errorf("provenance of %s: %w", a.Ref(), err)
	}
	params := map[string]any{"component": a.Component, "type": a.Type, "artifact": a.Name}
	for k, v := range p.Parameters {
		params[k] = v
	}
	internal, err := structpb.NewStruct(params)
	if err != nil {
		return nil, fmt.Errorf("provenance of %s: %w", a.Ref(), err)
	}
	pred := &provenancev1.Provenance{
		BuildDefinition: &provenancev1.BuildDefinition{
			BuildType:          BuildType,
			ExternalParameters: ext,
			InternalParameters: internal,
			ResolvedDependencies: []*attestationv1.ResourceDescriptor{{
				Uri:    p.Source.Repository + "@" + p.Source.Ref,
				Digest: map[string]string{"gitCommit": p.Source.Commit},
			}},
		},
		RunDetails: &provenancev1.RunDetails{
			Builder:  &provenancev1.Builder{Id: p.BuilderID},
			Metadata: &provenancev1.BuildMetadata{},
		},
	}
	if !p.Started.IsZero() {
		pred.RunDetails.Metadata.StartedOn = timestamppb.New(p.Started)
	}
	if !p.Finished.IsZero() {
		pred.RunDetails.Metadata.FinishedOn = timestamppb.New(p.Finished)
	}
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("provenance of %s: %w", a.Ref(), err)
	}
	pj, err := protojson.Marshal(pred)
	if err != nil {
		return nil, err
	}
	ps := &structpb.Struct{}
	if err := protojson.Unmarshal(pj, ps); err != nil {
		return nil, err
	}
	st := &attestationv1.Statement{
		Type:          attestationv1.StatementTypeUri,
		Subject:       []*attestationv1.ResourceDescriptor{{Name: a.Repository, Digest: map[string]string{"sha256": hex}}},
		PredicateType: PredicateSLSAProvenance1,
		Predicate:     ps,
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("provenance of %s: %w", a.Ref(), err)
	}
	return protojson.Marshal(st)
}

// Envelope signs statement with the builder key sv in a DSSE envelope of
// in-toto's payload type.
func Envelope(statement []byte, sv signature.Signer) ([]byte, error) {
	env, err := dsse.WrapSigner(sv, types.IntotoPayloadType).SignMessage(bytes.NewReader(statement))
	if err != nil {
		return nil, fmt.Errorf("sign provenance: %w", err)
	}
	return env, nil
}

// Attest stores the signed provenance envelope beside the artifact ref as
// cosign stores attestations (the sha256-<hex>.att tag, a DSSE layer
// annotated with its predicate type), so that `cosign verify-attestation
// --key --type slsaprovenance1` finds it. Attestations already there are
// kept.
func Attest(ctx context.Context, c *oci.Client, ref name.Digest, envelope []byte) error {
	att, err := static.NewAttestation(envelope,
		static.WithLayerMediaType(types.DssePayloadType),
		static.WithAnnotations(map[string]string{"predicateType": PredicateSLSAProvenance1}))
	if err != nil {
		return fmt.Errorf("attest %s: %w", ref, err)
	}
	ro, err := c.Remote(ctx, ref.Context(), true)
	if err != nil {
		return err
	}
	opts := ociremote.WithRemoteOptions(ro...)
	se, err := ociremote.SignedEntity(ref, opts)
	if err != nil {
		return fmt.Errorf("attest %s: %w", ref, err)
	}
	if se, err = mutate.AttachAttestationToEntity(se, att); err != nil {
		return fmt.Errorf("attest %s: %w", ref, err)
	}
	if err := ociremote.WriteAttestations(ref.Context(), se, opts); err != nil {
		return fmt.Errorf("attest %s: write attestation: %w", ref, err)
	}
	return nil
}
