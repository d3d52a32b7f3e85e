package policy

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// Reasons an approval is refused. They are final for that approval.
var (
	// ErrApprovalUntrusted: not signed by a key of trust/approvals valid
	// now and in scope, or signed by a render or request key, or the
	// signer is not the approval's approver.
	ErrApprovalUntrusted = errors.New("approval not signed by a trusted approver")
	// ErrApprovalExpired: the approval is past its expiry.
	ErrApprovalExpired = errors.New("approval expired")
	// ErrApprovalElsewhere: the approval names another install.
	ErrApprovalElsewhere = errors.New("approval for another install")
	// ErrApprovalOtherPlan: the approval names a plan that is not the one
	// waiting.
	ErrApprovalOtherPlan = errors.New("approval for another plan")
)

// MaxApproversSize bounds trust/approvals.
const MaxApproversSize = 256 << 10

// Approvers are the keys trusted to approve plans (trust/approvals),
// checked: each key with its validity window and scope.
type Approvers struct {
	Threshold int
	keys      []approverKey
	// excluded are render and request keys: never an approver's, even when
	// listed (Exclude).
	excluded map[string]string
	// source names where the keys are listed; default trust/approvals.
	source string
}

type approverKey struct {
	name              string
	key               ssh.PublicKey
	notBefore         time.Time
	notAfter          time.Time
	channels, channel []string            // role's and key's channel scopes
	labels            []map[string]string // role's and key's install-label scopes
}

// ParseApprovers checks data, trust/approvals read from file, and reports
// every problem at its file, line and field.
func ParseApprovers(file string, data []byte) (*Approvers, error) {
	if len(data) > MaxApproversSize {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", file, len(data), MaxApproversSize)
	}
	var raw schemas.Approvers
	loc, err := schemas.DecodeLocated(schemas.SchemaApprovers, file, data, &raw)
	if err != nil {
		return nil, err
	}
	as := &Approvers{Threshold: raw.Threshold}
	var ps schemas.Problems
	var roleChannels []string
	var roleLabels []map[string]string
	if raw.Scope != nil {
		roleChannels = raw.Scope.Channels
		if len(raw.Scope.InstallLabels) > 0 {
			roleLabels = []map[string]string{raw.Scope.InstallLabels}
		}
	}
	seen := map[string]string{}
	names := map[string]bool{}
	for i, k := range raw.Keys {
		field := "keys[" + strconv.Itoa(i) + "]"
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.Key))
		switch {
		case err != nil:
			ps = append(ps, loc.At(field+".key", "not an OpenSSH public key: %v", err))
			continue
		case !slices.Contains(approverKeyTypes, pub.Type()):
			ps = append(ps, loc.At(field+".key", "a %s key; approval keys are %s", pub.Type(), strings.Join(approverKeyTypes, ", ")))
			continue
		}
		fp := ssh.FingerprintSHA256(pub)
		if first, dup := seen[fp]; dup {
			ps = append(ps, loc.At(field+".key", "key %s is listed twice (first at %s)", fp, first))
			continue
		}
		seen[fp] = field
		if names[k.Name] {
			ps = append(ps, loc.At(field+".name", "name %q is listed twice", k.Name))
			continue
		}
		names[k.Name] = true
		ak := approverKey{name: k.Name, key: pub, channels: roleChannels, labels: roleLabels}
		for _, w := range []struct {
			field, value string
			out          *time.Time
		}{{"notBefore", k.NotBefore, &ak.notBefore}, {"notAfter", k.NotAfter, &ak.notAfter}} {
			if w.value == "" {
				continue
			}
			if *w.out, err = time.Parse(time.RFC3339, w.value); err != nil {
				ps = append(ps, loc.At(field+"."+w.field, "not an RFC 3339 time: %q", w.value))
			}
		}
		if !ak.notBefore.IsZero() && !ak.notAfter.IsZero() && !ak.notAfter.After(ak.notBefore) {
			ps = append(ps, loc.At(field+".notAfter", "the key's window is empty: notAfter %s is not after notBefore %s", k.NotAfter, k.NotBefore))
		}
		if k.Scope != nil {
			ak.channel = k.Scope.Channels
			if len(k.Scope.InstallLabels) > 0 {
				ak.labels = append(slices.Clip(ak.labels), k.Scope.InstallLabels)
			}
		}
		as.keys = append(as.keys, ak)
	}
	if as.Threshold > len(raw.Keys) {
		ps = append(ps, loc.At("threshold", "threshold %d is more than the %d keys listed: no plan could ever be approved", as.Threshold, len(raw.Keys)))
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return as, nil
}

// Exclude marks keys that must never count as an approver's, whatever
// trust/approvals says: the render key, the request keys. what says whose
// they are.
func (as *Approvers) Exclude(what string, keys ...ssh.PublicKey) {
	if as.excluded == nil {
		as.excluded = map[string]string{}
	}
	for _, k := range keys {
		as.excluded[ssh.FingerprintSHA256(k)] = what
	}
}

// ExcludeRoot excludes the keys of root's render role ("render") and
// operators role ("request"), whichever it defines: a key that may sign
// desired state or file requests never approves. A nil root excludes
// nothing.
func (as *Approvers) ExcludeRoot(root *trust.Root) {
	if root == nil {
		return
	}
	for _, r := range []struct {
		role trust.Role
		what string
	}{{trust.RoleRender, "render"}, {trust.RoleOperators, "request"}} {
		if rk := root.Role(r.role); rk != nil {
			for _, k := range rk.Keys {
				as.Exclude(r.what, k.PublicKey)
			}
		}
	}
}

// SignApproval signs an approval file with an approver's key, in the
// approval namespace.
func SignApproval(file []byte, signer ssh.Signer) (schemas.SignedApproval, error) {
	sig, err := sshsig.Sign(bytes.NewReader(file), signer, sshsig.HashSHA512, schemas.ApprovalNamespace)
	if err != nil {
		return schemas.SignedApproval{}, err
	}
	return schemas.SignedApproval{File: string(file), Signature: string(sshsig.Armor(sig))}, nil
}

// Target is what an approval must match to apply: this install, its
// channel, the component and the plan that waits.
type Target struct {
	Install string
	Channel string
	// AnyChannel leaves the keys' channel scopes unjudged: for the
	// renderer, which passes approvals on to the agent that judges them.
	AnyChannel bool
	// Labels are the install's labels on main, when the caller knows them
	// (LabelsKnown: the tenant server): a key scoped by install labels is
	// judged against them. An agent's state carries no labels, so there
	// such a key approves nothing.
	Labels      map[string]string
	LabelsKnown bool

	Component string
	Plan      string
}

// Verify checks one signed approval against the approvers at now: the
// signature over exactly its file in the approval namespace, by a listed
// key valid at now, in scope for t.Channel, not a render or request key,
// whose name is the approval's approver; then that it names t.Install and
// is not expired. It does not judge the component or the plan (Judge).
func (as *Approvers) Verify(s schemas.SignedApproval, t Target, now time.Time) (*schemas.Approval, error) {
	a, err := schemas.DecodeApproval([]byte(s.File))
	if err != nil {
		return nil, err
	}
	if as == nil {
		return a, fmt.Errorf("%w: no keys are trusted for approvals", ErrApprovalUntrusted)
	}
	sig, err := sshsig.Unarmor([]byte(s.Signature))
	if err != nil {
		return a, fmt.Errorf("%w: malformed signature: %v", ErrApprovalUntrusted, err)
	}
	fp := ssh.FingerprintSHA256(sig.PublicKey)
	if what, ok := as.excluded[fp]; ok {
		return a, fmt.Errorf("%w: signed by %s key %s, which never approves", ErrApprovalUntrusted, what, fp)
	}
	var k *approverKey
	for i := range as.keys {
		if bytes.Equal(as.keys[i].key.Marshal(), sig.PublicKey.Marshal()) {
			k = &as.keys[i]
		}
	}
	if k == nil {
		source := as.source
		if source == "" {
			source = schemas.ApproversPath
		}
		return a, fmt.Errorf("%w: key %s is not in %s", ErrApprovalUntrusted, fp, source)
	}
	if err := sshsig.Verify(strings.NewReader(s.File), sig, k.key, sig.HashAlgorithm, schemas.ApprovalNamespace); err != nil {
		return a, fmt.Errorf("%w: signature by %s does not match the approval: %v", ErrApprovalUntrusted, k.name, err)
	}
	switch {
	case !k.notBefore.IsZero() && now.Before(k.notBefore):
		return a, fmt.Errorf("%w: %s's key is valid from %s", ErrApprovalUntrusted, k.name, k.notBefore.Format(time.RFC3339))
	case !k.notAfter.IsZero() && !now.Before(k.notAfter):
		return a, fmt.Errorf("%w: %s's key was valid until %s", ErrApprovalUntrusted, k.name, k.notAfter.Format(time.RFC3339))
	case len(k.labels) > 0 && !t.LabelsKnown:
		return a, fmt.Errorf("%w: %s's key is scoped by install labels, which the install cannot judge", ErrApprovalUntrusted, k.name)
	case labelMismatch(k.labels, t.Labels) != "":
		return a, fmt.Errorf("%w: %s's key is outside the key's scope: %s", ErrApprovalUntrusted, k.name, labelMismatch(k.labels, t.Labels))
	case !t.AnyChannel && (k.channels != nil && !slices.Contains(k.channels, t.Channel) || k.channel != nil && !slices.Contains(k.channel, t.Channel)):
		return a, fmt.Errorf("%w: %s's key is not scoped to channel %q", ErrApprovalUntrusted, k.name, t.Channel)
	case a.Approver != k.name:
		return a, fmt.Errorf("%w: approver %q but signed by %q", ErrApprovalUntrusted, a.Approver, k.name)
	case a.Install != t.Install:
		return a, fmt.Errorf("%w: %s, not %s", ErrApprovalElsewhere, a.Install, t.Install)
	case !now.Before(a.Expires):
		return a, fmt.Errorf("%w at %s", ErrApprovalExpired, a.Expires.Format(time.RFC3339))
	case now.Before(a.Created.Add(-maxSkew)):
		return a, fmt.Errorf("%w: created %s, in the future", ErrApprovalUntrusted, a.Created.Format(time.RFC3339))
	}
	return a, nil
}

// labelMismatch says which install label of scopes labels lacks, "" when
// labels has every one.
func labelMismatch(scopes []map[string]string, labels map[string]string) string {
	for _, sc := range scopes {
		for _, k := range slices.Sorted(maps.Keys(sc)) {
			if got, ok := labels[k]; !ok || got != sc[k] {
				return fmt.Sprintf("install label %s=%s required", k, sc[k])
			}
		}
	}
	return ""
}

// maxSkew is how far in the future an approval's creation may lie: the
// approver's clock and the install's differ.
const maxSkew = 5 * time.Minute

// Verdict is what the approvals say about one waiting plan.
type Verdict struct {
	// Approved: Threshold distinct approvers approved the plan, and none
	// rejected it. Approvers names them.
	Approved  bool
	Approvers []string
	// Rejected names the approver who rejected the plan (a reject wins).
	Rejected string
	// Refused says, for every approval of the component that does not
	// count, who signed it and why, newest last.
	Refused []string
}

// Judge reads every signed approval of an install for the plan t names.
// Approvals of other components are not looked at; an approval of the
// component that does not verify, names another install or another plan,
// or expired, is refused and listed.
func (as *Approvers) Judge(approvals []schemas.SignedApproval, t Target, now time.Time) Verdict {
	var v Verdict
	approved := map[string]bool{}
	for _, s := range approvals {
		a, err := as.Verify(s, t, now)
		if a == nil {
			v.Refused = append(v.Refused, fmt.Sprintf("unreadable approval: %v", err))
			continue
		}
		if a.Component != t.Component {
			if err != nil && errors.Is(err, ErrApprovalElsewhere) {
				v.Refused = append(v.Refused, refusal(a, err))
			}
			continue
		}
		if err == nil && a.Plan != t.Plan {
			err = fmt.Errorf("%w: %s, not the waiting %s", ErrApprovalOtherPlan, a.Plan, t.Plan)
		}
		if err != nil {
			v.Refused = append(v.Refused, refusal(a, err))
			continue
		}
		switch a.Decision {
		case schemas.DecisionReject:
			if v.Rejected == "" {
				v.Rejected = a.Approver
			}
		case schemas.DecisionApprove:
			approved[a.Approver] = true
		}
	}
	for name := range approved {
		v.Approvers = append(v.Approvers, name)
	}
	slices.Sort(v.Approvers)
	v.Approved = v.Rejected == "" && as != nil && len(v.Approvers) >= max(as.Threshold, 1)
	if len(v.Refused) > schemas.MaxRefusals {
		v.Refused = v.Refused[len(v.Refused)-schemas.MaxRefusals:]
	}
	return v
}

func refusal(a *schemas.Approval, err error) string {
	return fmt.Sprintf("%s by %s for %s: %v", a.Decision, a.Approver, a.Plan, err)
}

// Keys calls f with each listed key that is not excluded, and its name.
func (as *Approvers) Keys(f func(name string, key ssh.PublicKey)) {
	if as == nil {
		return
	}
	for _, k := range as.keys {
		if _, ok := as.excluded[ssh.FingerprintSHA256(k.key)]; !ok {
			f(k.name, k.key)
		}
	}
}

// Name is the name trust/approvals gives key, if it lists it (and it is
// not a render or request key).
func (as *Approvers) Name(key ssh.PublicKey) (string, bool) {
	if as == nil {
		return "", false
	}
	if _, ok := as.excluded[ssh.FingerprintSHA256(key)]; ok {
		return "", false
	}
	for _, k := range as.keys {
		if bytes.Equal(k.key.Marshal(), key.Marshal()) {
			return k.name, true
		}
	}
	return "", false
}
