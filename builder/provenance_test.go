package builder_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/in-toto/in-toto-golang/in_toto"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/trust"
)

// TestProvenanceCosignAccepts: the SLSA v1 provenance nuon build writes,
// signed by a builder key and stored beside the artifact, is what cosign's
// own verify-attestation accepts for --type slsaprovenance1 --key (the
// library functions the command runs: VerifyImageAttestations with the
// in-toto subject claim, then the predicate type filter), and what the
// agent's provenance check accepts with that key in the root's builders
// role. With another key, cosign refuses it too.
func TestProvenanceCosignAccepts(t *testing.T) {
	v := newVendor(t, "")
	ctx := context.Background()
	sv, pub := newKey(t, "builder")
	p := builder.Provenance{BuilderID: "https://ci.example.com/builder-1",
		Source: builder.Source{Repository: "git+https://git.example.com/vendor/shop", Ref: "refs/heads/main", Commit: strings.Repeat("c", 40)}}
	targets, err := builder.Targets(v.app, fixtures, nil, []string{"network"})
	if err != nil {
		t.Fatal(err)
	}
	arts, err := builder.Build(ctx, targets, builder.Options{Client: v.client, Signer: v.key, Provenance: &p, BuilderKey: sv})
	if err != nil {
		t.Fatal(err)
	}
	a := arts[0]
	if !strings.HasSuffix(a.Provenance, ".att") {
		t.Errorf("artifact's provenance tag %q", a.Provenance)
	}
	ref, err := name.NewDigest(a.Ref())
	if err != nil {
		t.Fatal(err)
	}
	ro, err := v.client.Remote(ctx, ref.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(pem []byte) ([]byte, error) {
		verifier, err := oci.ParsePublicKey(pem)
		if err != nil {
			t.Fatal(err)
		}
		atts, _, err := cosign.VerifyImageAttestations(ctx, ref, &cosign.CheckOpts{
			RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(ro...)},
			SigVerifier:        verifier,
			IgnoreTlog:         true,
			IgnoreSCT:          true,
			ClaimVerifier:      cosign.IntotoSubjectClaimVerifier,
		})
		if err != nil {
			return nil, err
		}
		// What verify-attestation --type slsaprovenance1 then keeps: the
		// attestations whose statement decodes as in-toto's SLSA v1
		// provenance statement with that predicate type.
		var payload []byte
		for _, att := range atts {
			env, err := att.Payload()
			if err != nil {
				t.Fatal(err)
			}
			var e struct{ Payload string }
			if err := json.Unmarshal(env, &e); err != nil {
				t.Fatal(err)
			}
			raw, err := base64.StdEncoding.DecodeString(e.Payload)
			if err != nil {
				t.Fatal(err)
			}
			var st in_toto.ProvenanceStatementSLSA1
			if err := json.Unmarshal(raw, &st); err == nil && st.PredicateType == "https://slsa.dev/provenance/v1" && st.Predicate.RunDetails.Builder.ID != "" {
				payload = env
			}
		}
		if payload == nil {
			t.Fatalf("cosign finds no slsaprovenance1 attestation among %d", len(atts))
		}
		return payload, nil
	}
	stored, err := verify(pub)
	if err != nil {
		t.Fatalf("cosign refuses the provenance: %v", err)
	}
	_, otherPub := newKey(t, "other")
	if _, err := verify(otherPub); err == nil {
		t.Error("cosign accepts the provenance with another key")
	}

	cpub, err := cryptoutils.UnmarshalPEMToPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	spub, err := ssh.NewPublicKey(cpub.(crypto.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	root := trusttest.Version{Version: 1, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1"}, Threshold: 1,
		Render:   []trusttest.RenderKey{{Name: "render-a"}},
		Builders: []trusttest.NamedKey{{Name: "builder-1", Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(spub)))}}}.Root(t, "root-1")
	got, err := sync.VerifyProvenance(stored, a.Digest, sync.ProvenancePolicy{Root: root, At: time.Now(),
		Sources: []sync.Source{{Repository: p.Source.Repository, Ref: "refs/heads/main"}}})
	if err != nil {
		t.Fatalf("the agent refuses the stored provenance: %v", err)
	}
	if got.Builder != p.BuilderID || got.Commit != p.Source.Commit {
		t.Errorf("verified %+v", got)
	}
	if _, err := sync.VerifyProvenance(stored, "sha256:"+strings.Repeat("0", 64), sync.ProvenancePolicy{Root: root, At: time.Now(),
		Sources: []sync.Source{{Repository: p.Source.Repository, Ref: "refs/heads/main"}}}); err == nil {
		t.Error("the agent accepts the provenance for another digest")
	}
	_ = trust.RoleBuilders
}
