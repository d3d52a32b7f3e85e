package sync

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	provenancev1 "github.com/in-toto/attestation/go/predicates/provenance/v1"
	attestationv1 "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"
	"google.golang.org/protobuf/encoding/protojson"

	"nuon.dev/nuon/trust"
)

// Provenance vocabulary, as nuon build writes it (package builder).
const (
	// IntotoPayloadType is the DSSE payload type of an in-toto statement.
	IntotoPayloadType = "application/vnd.in-toto+json"
	// PredicateSLSAProvenance1 is SLSA v1's predicate type.
	PredicateSLSAProvenance1 = "https://slsa.dev/provenance/v1"
)

// ErrProvenance marks provenance the agent refuses: final for the
// artifact, since the same envelope gives the same answer.
var ErrProvenance = errors.New("provenance refused")

// Source is a source repository and ref an artifact may come from; Ref
// may be a path.Match pattern (refs/tags/v*).
type Source struct {
	Repository, Ref string
}

// ProvenancePolicy is what an artifact's provenance must satisfy.
type ProvenancePolicy struct {
	// Root names the trusted builders (role builders), their windows,
	// scopes and revocations.
	Root *trust.Root
	// At is the time the builder keys are judged at. An artifact's
	// signature carries no time of its own; the agent judges it at the
	// time of the signed desired commit that names the digest (the
	// release record's render), never later than now.
	At time.Time
	// Target is the install, for scopes.
	Target trust.Target
	// Sources are the repositories and refs allowed; none allows none.
	Sources []Source
	// Builders is how many distinct builder keys must each have signed a
	// provenance that passes (VerifyProvenances); 0 counts as 1.
	Builders int
}

// VerifiedProvenance is what a verified provenance says.
type VerifiedProvenance struct {
	Builder string
	Source  Source
	Commit  string
	// Keys are the fingerprints of the builder keys that signed.
	Keys []string
}

type builderKey struct {
	fp string
	v  signature.Verifier
}

// builderKeys are the root's builder keys as signature verifiers.
func builderKeys(r *trust.Root) ([]builderKey, error) {
	role := r.Role(trust.RoleBuilders)
	if role == nil {
		return nil, fmt.Errorf("%w: %s names no builders", ErrProvenance, r)
	}
	var ks []builderKey
	for _, k := range role.Keys {
		cpk, ok := k.PublicKey.(ssh.CryptoPublicKey)
		if !ok {
			continue
		}
		v, err := signature.LoadVerifier(cpk.CryptoPublicKey(), crypto.SHA256)
		if err != nil {
			continue
		}
		ks = append(ks, builderKey{fp: k.Fingerprint, v: v})
	}
	return ks, nil
}

// VerifyProvenance checks a DSSE envelope of SLSA v1 provenance for the
// artifact digest (sha256:<hex>) against p: every signature in the
// envelope verifies with a builder key of p.Root (a signature that does
// not is refused, not skipped), the distinct keys meet the builders'
// threshold at p.At for p.Target, the statement is in-toto v1 with SLSA v1
// provenance, its one subject names digest and nothing else, and its
// source repository and ref are among p.Sources. Every refusal wraps
// ErrProvenance and says which rule.
func VerifyProvenance(envelope []byte, digest string, p ProvenancePolicy) (*VerifiedProvenance, error) {
	refuse := func(format string, args ...any) (*VerifiedProvenance, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrProvenance, digest, fmt.Sprintf(format, args...))
	}
	var env dsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return refuse("not a DSSE envelope: %v", err)
	}
	if env.PayloadType != IntotoPayloadType {
		return refuse("payload type %q, want %q", env.PayloadType, IntotoPayloadType)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return refuse("payload is not base64: %v", err)
	}
	if len(env.Signatures) == 0 {
		return refuse("the envelope is not signed")
	}
	keys, err := builderKeys(p.Root)
	if err != nil {
		return nil, err
	}
	pae := dsse.PAE(env.PayloadType, payload)
	var signed []string
	for i, s := range env.Signatures {
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil {
			return refuse("signature %d is not base64", i+1)
		}
		j := slices.IndexFunc(keys, func(k builderKey) bool {
			return k.v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(pae)) == nil
		})
		if j < 0 {
			return refuse("signature %d (keyid %q) verifies with no builder key of %s", i+1, s.KeyID, p.Root)
		}
		signed = append(signed, keys[j].fp)
	}
	if err := p.Root.Meets(trust.RoleBuilders, signed, p.At, p.Target); err != nil {
		return refuse("%v", err)
	}
	var st attestationv1.Statement
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(payload, &st); err != nil {
		return refuse("not an in-toto statement: %v", err)
	}
	if err := st.Validate(); err != nil {
		return refuse("%v", err)
	}
	if st.GetPredicateType() != PredicateSLSAProvenance1 {
		return refuse("predicate type %q, want %q", st.GetPredicateType(), PredicateSLSAProvenance1)
	}
	alg, hex, _ := strings.Cut(digest, ":")
	if len(st.GetSubject()) != 1 || len(st.GetSubject()[0].GetDigest()) != 1 {
		return refuse("the statement names %d subjects; provenance must name exactly the one artifact", len(st.GetSubject()))
	}
	if got := st.GetSubject()[0].GetDigest()[alg]; got != hex {
		return refuse("the statement is about %v, not this artifact", st.GetSubject()[0].GetDigest())
	}
	pj, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return refuse("%v", err)
	}
	var pred provenancev1.Provenance
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(pj, &pred); err != nil {
		return refuse("not SLSA v1 provenance: %v", err)
	}
	if err := pred.Validate(); err != nil {
		return refuse("%v", err)
	}
	src := pred.GetBuildDefinition().GetExternalParameters().GetFields()["source"].GetStructValue().GetFields()
	got := Source{Repository: src["repository"].GetStringValue(), Ref: src["ref"].GetStringValue()}
	if !slices.ContainsFunc(p.Sources, func(a Source) bool {
		ok, _ := path.Match(a.Ref, got.Ref)
		return a.Repository == got.Repository && ok
	}) {
		return refuse("built from %s at %s, which is not an allowed source", got.Repository, got.Ref)
	}
	v := &VerifiedProvenance{Builder: pred.GetRunDetails().GetBuilder().GetId(), Source: got, Keys: signed}
	for _, d := range pred.GetBuildDefinition().GetResolvedDependencies() {
		if c := d.GetDigest()["gitCommit"]; c != "" {
			v.Commit = c
		}
	}
	return v, nil
}

// ProvenanceConfig asks a Syncer to copy only artifacts whose SLSA
// provenance (the sha256-<hex>.att tag beside the artifact in the vendor
// registry, as nuon build writes it) passes VerifyProvenance.
type ProvenanceConfig struct {
	// Root returns the trust root in force (its builders role); called
	// for every artifact, so that a rotated root applies at once.
	Root func() *trust.Root
	// Sources are the source repositories and refs allowed when the
	// root names none (the agent's --provenance-source flags): the root's
	// provenance.sources, per component, come first.
	Sources []Source
	// Target is the install, for scopes; its channel picks the root's
	// provenance.builders rule.
	Target trust.Target
	// RootOnly requires provenance only while the root in force names
	// provenance rules (sources or builders): set when the agent was
	// given no --provenance-source, so that a root that starts naming
	// sources turns the check on with no change in the install.
	RootOnly bool
	// Now is when builder keys are judged. A provenance signature carries
	// no time of its own, so it is judged when the agent checks it: a
	// builder key revoked or past its window stops every artifact not
	// yet copied, while what was copied and verified before stays.
	// Default time.Now.
	Now func() time.Time
}

// DssePayloadType is the media type of a layer holding a DSSE envelope.
const DssePayloadType = "application/vnd.dsse.envelope.v1+json"

// maxAttestations and maxEnvelope bound what is read of an .att manifest.
const (
	maxAttestations = 16
	maxEnvelope     = 1 << 20
)

// Policy is the provenance policy for artifacts of component, on an
// install of channel ("" for pc.Target's), under root at now: the sources the root allows for the component (its
// provenance.sources; pc.Sources only when the root names none at all),
// and the distinct builders the install's channel requires.
func (pc *ProvenanceConfig) Policy(root *trust.Root, channel, component string, now time.Time) (ProvenancePolicy, error) {
	target := pc.Target
	if channel != "" {
		target.Channel = channel
	}
	p := ProvenancePolicy{Root: root, At: now, Target: target, Builders: root.BuildersFor(target.Channel)}
	if !root.HasSources() {
		p.Sources = pc.Sources
		return p, nil
	}
	rules := root.SourcesFor(component)
	if len(rules) == 0 {
		return p, fmt.Errorf("%w: %s allows no source for component %q (provenance.sources)", ErrProvenance, root, component)
	}
	for _, r := range rules {
		p.Sources = append(p.Sources, Source{Repository: r.Repository, Ref: r.Ref})
	}
	return p, nil
}

// VerifyProvenances checks every envelope of one artifact with
// VerifyProvenance and accepts when the envelopes that pass were signed,
// together, by at least p.Builders distinct builder keys: two
// attestations by the same builder count once, and one that fails does
// not count (it does not refuse the others). It returns the provenances
// that passed.
func VerifyProvenances(envelopes [][]byte, digest string, p ProvenancePolicy) ([]*VerifiedProvenance, error) {
	need := max(p.Builders, 1)
	var ok []*VerifiedProvenance
	var problems []error
	keys := map[string]bool{}
	for _, env := range envelopes {
		v, err := VerifyProvenance(env, digest, p)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		ok = append(ok, v)
		for _, k := range v.Keys {
			keys[k] = true
		}
	}
	if len(keys) >= need && len(ok) > 0 {
		return ok, nil
	}
	if len(envelopes) == 0 {
		return nil, fmt.Errorf("%w: %s: no provenance", ErrProvenance, digest)
	}
	if len(ok) == 0 {
		return nil, errors.Join(problems...)
	}
	return nil, errors.Join(append([]error{fmt.Errorf("%w: %s: %d distinct builder keys signed provenance that passes, %d required for channel %q (independent builds of one digest)",
		ErrProvenance, digest, len(keys), need, p.Target.Channel)}, problems...)...)
}

// checkProvenance reads the attestations of the artifact d in repo and
// returns nil when they pass VerifyProvenances under the policy for the
// run's component.
func (r *syncRun) checkProvenance(ctx context.Context, repo name.Repository, d v1.Hash) error {
	pc := r.s.cfg.Provenance
	root := pc.Root()
	if root == nil {
		return fmt.Errorf("%w: %s: no trust root names the builders", ErrProvenance, d)
	}
	now := time.Now
	if pc.Now != nil {
		now = pc.Now
	}
	policy, err := pc.Policy(root, r.channel, r.component, now())
	if err != nil {
		return err
	}
	tag := repo.Tag(d.Algorithm + "-" + d.Hex + ".att")
	raw, err := r.s.cfg.Client.Get(ctx, tag)
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %s has no provenance (%s)", ErrProvenance, repo.Digest(d.String()), tag.TagStr())
	}
	if err != nil {
		return fmt.Errorf("provenance of %s: %w", d, err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw.Raw))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProvenance, tag, err)
	}
	var envs [][]byte
	for i, l := range m.Layers {
		if i >= maxAttestations {
			break
		}
		if l.MediaType != DssePayloadType || l.Size > maxEnvelope || l.Size < 0 {
			continue
		}
		rc, err := r.s.cfg.Client.Blob(ctx, repo, l)
		if err != nil {
			return fmt.Errorf("provenance of %s: %w", d, err)
		}
		env, err := io.ReadAll(io.LimitReader(rc, maxEnvelope+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("provenance of %s: %w", d, err)
		}
		envs = append(envs, env)
	}
	if len(envs) == 0 {
		return fmt.Errorf("%w: %s holds no DSSE envelope", ErrProvenance, tag)
	}
	_, err = VerifyProvenances(envs, d.String(), policy)
	return err
}

// provenance is checkProvenance when the Syncer asks for provenance, nil
// otherwise.
func (r *syncRun) provenance(ctx context.Context, repo name.Repository, d v1.Hash) error {
	pc := r.s.cfg.Provenance
	if pc == nil {
		return nil
	}
	if pc.RootOnly {
		if root := pc.Root(); root == nil || !root.HasSources() && len(root.BuilderRules) == 0 {
			return nil
		}
	}
	return r.checkProvenance(ctx, repo, d)
}

// verifiedKey is what the Syncer remembers a verified artifact by: its
// digest, and with provenance required the component too, since the
// sources the root allows differ by component.
func (r *syncRun) verifiedKey(d v1.Hash) string {
	if r.s.cfg.Provenance == nil {
		return d.String()
	}
	return r.component + "\x00" + d.String()
}
