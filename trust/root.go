package trust

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/schemas"
)

// Namespace is the SSH signature namespace of root signatures. A commit
// is signed in "git" and a request in its own namespace, so no signature
// made for one can be replayed as another.
const Namespace = "nuon-trust-root"

// Dir is where the versions of the root live on main, one file a version:
// Dir/1.json, Dir/2.json, … (see FileName).
const Dir = "trust/root"

// FileName is the path of version v on main.
func FileName(v int64) string { return Dir + "/" + strconv.FormatInt(v, 10) + ".json" }

// Role names a set of keys in the root.
type Role string

// The roles of a root. RoleRoot signs the root itself; the others sign
// what the rest of nuon checks.
const (
	RoleRoot            Role = "root"
	RoleRender          Role = "render"
	RoleVendorArtifacts Role = "vendor-artifacts"
	RoleBuilders        Role = "builders"
	RoleOperators       Role = "operators"
	RoleApprovers       Role = "approvers"
	RoleServer          Role = "server"
	// RoleBuildRequesters signs build requests (vendor CI asking the
	// tenant's build agents for a build); it was trust/builds on main.
	RoleBuildRequesters Role = "build-requesters"
	// RoleBuildAgents are the build agents' keys (their status and
	// releases); it was trust/build-agents on main.
	RoleBuildAgents Role = "build-agents"
)

// Roles lists every role but root, in the order files list them.
var Roles = []Role{RoleRender, RoleVendorArtifacts, RoleBuilders, RoleOperators, RoleApprovers, RoleServer, RoleBuildRequesters, RoleBuildAgents}

// Request kinds a scope may name (Scope.RequestKinds).
const (
	KindLogs     = "logs"
	KindDebug    = "debug"
	KindApproval = "approval"
	KindBuild    = "build"
	// KindRollout: nuon rollout pause, resume and abort.
	KindRollout = "rollout"
)

// Root is one parsed and checked version of the trust root. Parsing checks
// its form; Verify and Chain check its signatures.
type Root struct {
	// File is where it was read from, for messages.
	File    string
	Version int64
	// Expires is when this version stops being acceptable as the newest.
	Expires time.Time
	// RootKeys and RootThreshold are the root role.
	RootKeys      []Key
	RootThreshold int
	// Roles holds the roles the file defines.
	Roles       map[Role]*RoleKeys
	Revocations []Revocation
	// Sources are the allowed sources of artifacts, per component glob
	// (provenance.sources); BuilderRules how many distinct builders a
	// channel requires (provenance.builders).
	Sources      []SourceRule
	BuilderRules []BuilderRule
	// Signatures are the root signatures the file carries, parsed but
	// not yet checked.
	Signatures []Signature

	// signed is the canonical form of the signed content: what the
	// signatures cover.
	signed []byte
	// rawSigned is the signed content as written, kept so that signing
	// adds a signature without rewriting what others signed.
	rawSigned json.RawMessage
}

// RoleKeys is one role's keys.
type RoleKeys struct {
	Threshold int
	// Scope applies to every key of the role, on top of the key's own.
	Scope Scope
	Keys  []Key
}

// Key is one public key with its window and scope.
type Key struct {
	Name        string
	PublicKey   ssh.PublicKey
	Fingerprint string
	// NotBefore and NotAfter bound the key's window [NotBefore,
	// NotAfter); a zero time leaves that side open.
	NotBefore, NotAfter time.Time
	Scope               Scope
}

// Scope says where a key applies; an empty field matches anything.
type Scope struct {
	InstallLabels map[string]string
	Channels      []string
	RequestKinds  []string
}

// Revocation refuses a key's signatures made at or after At.
type Revocation struct {
	Fingerprint string
	At          time.Time
	Reason      string
}

// Signature is one root signature as the file carries it.
type Signature struct {
	// Fingerprint is the SHA256 fingerprint of the key inside the
	// signature.
	Fingerprint string
	sig         *sshsig.Signature
}

// Signed returns the canonical form of the version's signed content (RFC
// 8785): the bytes every root signature covers.
func (r *Root) Signed() []byte { return r.signed }

// Role returns the keys of role, or nil when the root does not define it.
func (r *Root) Role(role Role) *RoleKeys { return r.Roles[role] }

// Parse reads one version of the root from data, the JSON file read from
// file. It checks the schema (trust-root.schema.json), then what the
// schema cannot say: times that parse, windows that end after they start,
// keys that parse and are of an allowed type (ed25519 for root keys),
// each key listed once per role and each name once, thresholds no higher
// than the keys there are, revocations listed once, and signatures that
// parse. The error is schemas.Problems, each at its line and field; it
// does not check any signature (Verify and Chain do).
func Parse(file string, data []byte) (*Root, error) {
	if _, err := Canonical(data); err != nil {
		return nil, schemas.Problems{{File: file, Message: err.Error()}}
	}
	var raw schemas.TrustRootFile
	loc, err := schemas.DecodeLocated(schemas.SchemaTrustRoot, file, data, &raw)
	if err != nil {
		return nil, err
	}
	var parts struct {
		Signed json.RawMessage `json:"signed"`
	}
	if err := json.Unmarshal(data, &parts); err != nil {
		return nil, schemas.Problems{{File: file, Message: err.Error()}}
	}
	signed, err := Canonical(parts.Signed)
	if err != nil {
		return nil, schemas.Problems{{File: file, Field: "signed", Message: err.Error()}}
	}
	// The meaning is read from the canonical bytes, the very bytes the
	// signatures cover, so that no difference between two JSON readers
	// (escapes, duplicate names) can separate what is signed from what
	// is obeyed; the schema already held on the file as written.
	var s schemas.TrustRoot
	if err := json.Unmarshal(signed, &s); err != nil {
		return nil, schemas.Problems{{File: file, Field: "signed", Message: err.Error()}}
	}
	p := &parser{loc: loc}
	r := &Root{
		File:          file,
		Version:       s.Version,
		Expires:       p.time("signed.expires", s.Expires),
		RootThreshold: s.Root.Threshold,
		Roles:         map[Role]*RoleKeys{},
		signed:        signed,
		rawSigned:     parts.Signed,
	}
	keys := make([]schemas.TrustKey, len(s.Root.Keys))
	for i, k := range s.Root.Keys {
		keys[i] = schemas.TrustKey{Name: k.Name, Key: k.Key}
	}
	r.RootKeys = p.keys("signed.root", RoleRoot, s.Root.Threshold, keys)
	for _, role := range Roles {
		rk := roleOf(s.Roles, role)
		if rk == nil {
			continue
		}
		field := "signed.roles." + string(role)
		r.Roles[role] = &RoleKeys{
			Threshold: rk.Threshold,
			Scope:     scopeOf(rk.Scope),
			Keys:      p.keys(field, role, rk.Threshold, rk.Keys),
		}
	}
	seen := map[string]int{}
	for i, rv := range s.Revocations {
		field := "signed.revocations[" + strconv.Itoa(i) + "]"
		if first, dup := seen[rv.Fingerprint]; dup {
			p.add(field+".fingerprint", "key %s is revoked twice (first at revocations[%d])", rv.Fingerprint, first)
			continue
		}
		seen[rv.Fingerprint] = i
		if !validFingerprint(rv.Fingerprint) {
			p.add(field+".fingerprint", "%q is not a SHA256 key fingerprint (SHA256: and 43 base64 characters, as ssh-keygen -lf prints it)", rv.Fingerprint)
		}
		r.Revocations = append(r.Revocations, Revocation{
			Fingerprint: rv.Fingerprint,
			At:          p.time(field+".revokedAt", rv.RevokedAt),
			Reason:      rv.Reason,
		})
	}
	r.Sources, r.BuilderRules = p.provenance(s.Provenance, r.Roles[RoleBuilders])
	if rk := r.Roles[RoleRender]; rk != nil && len(rk.Keys) > 0 && !slices.ContainsFunc(rk.Keys, func(k Key) bool {
		return !slices.ContainsFunc(r.Revocations, func(rv Revocation) bool { return rv.Fingerprint == k.Fingerprint })
	}) {
		p.add("signed.roles.render.keys", "every render key is revoked: no install could accept a render again; add the new render key in the same version")
	}
	for i, sg := range raw.Signatures {
		field := "signatures[" + strconv.Itoa(i) + "]"
		sig, err := sshsig.Unarmor([]byte(sg.Sig))
		if err != nil {
			p.add(field+".sig", "not an armored SSH signature: %v", err)
			continue
		}
		fp := ssh.FingerprintSHA256(sig.PublicKey)
		if sg.KeyID != fp {
			p.add(field+".keyid", "keyid %s does not name the signing key %s", sg.KeyID, fp)
			continue
		}
		r.Signatures = append(r.Signatures, Signature{Fingerprint: fp, sig: sig})
	}
	if err := p.ps.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

func roleOf(rs schemas.TrustRoles, role Role) *schemas.TrustRole {
	switch role {
	case RoleRender:
		return &rs.Render
	case RoleVendorArtifacts:
		return rs.VendorArtifacts
	case RoleBuilders:
		return rs.Builders
	case RoleOperators:
		return rs.Operators
	case RoleApprovers:
		return rs.Approvers
	case RoleServer:
		return rs.Server
	case RoleBuildRequesters:
		return rs.BuildRequesters
	case RoleBuildAgents:
		return rs.BuildAgents
	}
	return nil
}

func scopeOf(s *schemas.TrustScope) Scope {
	if s == nil {
		return Scope{}
	}
	return Scope{InstallLabels: s.InstallLabels, Channels: s.Channels, RequestKinds: s.RequestKinds}
}

// parser gathers the problems of one file.
type parser struct {
	loc *schemas.Located
	ps  schemas.Problems
}

func (p *parser) add(field, format string, args ...any) {
	p.ps = append(p.ps, p.loc.At(field, format, args...))
}

func (p *parser) time(field, s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		p.add(field, "%q is not an RFC 3339 time (2026-11-26T12:00:00Z)", s)
	}
	return t
}

// rootKeyTypes and roleKeyTypes are the key types each may use. Root keys
// are ed25519 only: one well-understood algorithm for the keys everything
// else rests on.
var (
	rootKeyTypes = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519}
	roleKeyTypes = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519,
		ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoSKECDSA256}
)

func (p *parser) keys(field string, role Role, threshold int, in []schemas.TrustKey) []Key {
	allowed := roleKeyTypes
	if role == RoleRoot {
		allowed = rootKeyTypes
	}
	names := map[string]int{}
	fps := map[string]int{}
	var out []Key
	for i, k := range in {
		kf := field + ".keys[" + strconv.Itoa(i) + "]"
		if first, dup := names[k.Name]; dup {
			p.add(kf+".name", "%s key %q is listed twice (first at keys[%d])", role, k.Name, first)
			continue
		}
		names[k.Name] = i
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.Key))
		if err != nil {
			p.add(kf+".key", "%s key %q: not an OpenSSH public key: %v", role, k.Name, err)
			continue
		}
		if !slices.Contains(allowed, pub.Type()) {
			p.add(kf+".key", "%s key %q is %s; %s keys must be one of %v", role, k.Name, pub.Type(), role, allowed)
			continue
		}
		fp := ssh.FingerprintSHA256(pub)
		if first, dup := fps[fp]; dup {
			p.add(kf+".key", "%s key %q (%s) is keys[%d] again: a key counts once towards a threshold", role, k.Name, fp, first)
			continue
		}
		fps[fp] = i
		key := Key{
			Name:        k.Name,
			PublicKey:   pub,
			Fingerprint: fp,
			NotBefore:   p.time(kf+".notBefore", k.NotBefore),
			NotAfter:    p.time(kf+".notAfter", k.NotAfter),
			Scope:       scopeOf(k.Scope),
		}
		if !key.NotBefore.IsZero() && !key.NotAfter.IsZero() && !key.NotAfter.After(key.NotBefore) {
			p.add(kf+".notAfter", "%s key %q: window ends (%s) before it starts (%s)", role, k.Name, k.NotAfter, k.NotBefore)
		}
		out = append(out, key)
	}
	if threshold > len(in) {
		p.add(field+".threshold", "%s threshold %d is more than its %d keys", role, threshold, len(in))
	}
	return out
}

// validFingerprint reports whether s looks like ssh.FingerprintSHA256's
// output.
func validFingerprint(s string) bool {
	const prefix = "SHA256:"
	if len(s) != len(prefix)+43 || s[:len(prefix)] != prefix {
		return false
	}
	for _, c := range s[len(prefix):] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/') {
			return false
		}
	}
	return true
}

// String names the version for messages.
func (r *Root) String() string {
	if r.File != "" {
		return fmt.Sprintf("root version %d (%s)", r.Version, r.File)
	}
	return fmt.Sprintf("root version %d", r.Version)
}
