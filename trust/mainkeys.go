package trust

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/schemas"
)

// LegacyFiles are the files on main that named a role's keys before the
// root did, by role. They are still read, with a deprecation warning,
// when main's root does not define the role (or main has no root);
// `nuon trust migrate` moves them into the root.
var LegacyFiles = map[Role]string{
	RoleOperators:       "trust/requests",
	RoleApprovers:       schemas.ApproversPath,
	RoleBuildRequesters: schemas.BuildTrustFile,
	RoleBuildAgents:     schemas.BuildAgentTrustFile,
}

// Main is what MainKeys reads of one commit of main.
type Main interface {
	// ReadFile returns the content of the file at name; an error wrapping
	// fs.ErrNotExist when main has none.
	ReadFile(name string) ([]byte, error)
	// RootFiles returns the files under Dir, path to content; nil when
	// main has none.
	RootFiles() (map[string][]byte, error)
}

// Keys are the keys of one role on one commit of main, from wherever main
// names them: the root, or the role's legacy file.
type Keys struct {
	Role Role
	// From is the file the keys were read from: the root version in force
	// (trust/root/<n>.json) or the role's legacy file; "" when main names
	// no key of the role.
	From string
	// Root is the version in force when the keys come from the root.
	Root *Root
	// Data holds the keys in the form the role's verifiers read: an
	// allowed_signers file (ssh-keygen(1)) for operators, build
	// requesters and build agents, whose principal is the key's name in
	// the root; an Approvers file (approvers.schema.json) for approvers.
	// From the root, only keys valid at the time asked for are listed
	// (window, revocation); scope is the reader's to judge with Root.
	// Nil when main names no key of the role.
	Data []byte
	// Warnings say what a reader should tell the vendor: a legacy file
	// the root shadows, an expired root.
	Warnings []string
	// Deprecated says that the keys come from the role's legacy file,
	// and how to move them into the root; "" when they do not.
	Deprecated string
	// MainHasRoot reports whether main has a trust root at all (whether
	// or not it names this role).
	MainHasRoot bool
}

// FromRoot reports whether the keys come from the trust root.
func (k *Keys) FromRoot() bool { return k.Root != nil }

// MainKeys returns the keys of role on main at now. When main has a trust
// root (trust/root/, chained from version 1) that defines the role, its
// keys are the ones; the legacy file, if still there, is ignored with a
// warning. Otherwise the role's legacy file is read, with a deprecation
// warning. A root that does not chain is an error: nothing is trusted
// from a main whose root is broken. An expired root still names the keys
// (main is the vendor's own record), with a warning: agents refuse what
// it carries until a newer version is signed.
//
// This is the one reader of role keys on main: the server (requests,
// builds), the renderer (requests, approvals) and the build agent (build
// requests) all call it, each through a Main over its git store.
func MainKeys(m Main, role Role, now time.Time) (*Keys, error) {
	legacy := LegacyFiles[role]
	if !isRole(role) {
		return nil, fmt.Errorf("keys of %q: %w: roles are %v", role, ErrUnknownRole, Roles)
	}
	k := &Keys{Role: role}
	files, err := m.RootFiles()
	if err != nil {
		return nil, fmt.Errorf("trust root on main: %w", err)
	}
	var old []byte
	if legacy != "" {
		old, err = m.ReadFile(legacy)
		if errors.Is(err, fs.ErrNotExist) {
			old, err = nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s on main: %w", legacy, err)
		}
	}
	if files != nil {
		k.MainHasRoot = true
		root, err := mainRoot(files, time.Time{})
		if err != nil {
			return nil, err
		}
		if !now.Before(root.Expires) {
			k.Warnings = append(k.Warnings, fmt.Sprintf("%s expired at %s: sign a newer version (nuon trust sign)", root.File, stamp(root.Expires)))
		}
		if rk := root.Role(role); rk != nil {
			k.Root, k.From = root, root.File
			if k.Data, err = roleData(root, role, rk, now); err != nil {
				return nil, err
			}
			if old != nil {
				k.Warnings = append(k.Warnings, fmt.Sprintf("%s on main is ignored: %s names the %s role; remove the file", legacy, root.File, role))
			}
			return k, nil
		}
	}
	if old == nil {
		return k, nil
	}
	k.From, k.Data = legacy, old
	k.Deprecated = fmt.Sprintf("%s on main is deprecated: the trust root's %s role replaces it (nuon trust migrate, then nuon trust sign)", legacy, role)
	return k, nil
}

// MainRoot returns the newest version of the trust root on main that the
// chain from version 1 reaches at now (expired versions refused); nil
// when main has no trust/root/.
func MainRoot(m Main, now time.Time) (*Root, error) {
	files, err := m.RootFiles()
	if err != nil || files == nil {
		return nil, err
	}
	return mainRoot(files, now)
}

func isRole(r Role) bool {
	for _, x := range Roles {
		if x == r {
			return true
		}
	}
	return false
}

// mainRoot is the newest version the chain reaches from version 1 among
// files, judged at now: the zero time leaves expiry to the caller.
func mainRoot(files map[string][]byte, now time.Time) (*Root, error) {
	roots, err := LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("trust root on main: %w", err)
	}
	first := First(roots)
	if first == nil {
		return nil, fmt.Errorf("trust root on main: no %s: the chain starts at version 1", FileName(1))
	}
	newest, err := Chain(first, roots, now)
	if err != nil {
		return nil, fmt.Errorf("trust root on main: %w", err)
	}
	return newest, nil
}

// RoleFile returns the keys of role valid at now in the role's legacy
// form (as Keys.Data); nil when r does not define the role. It is how a
// holder of a root (an agent) reads a role it judges itself.
func (r *Root) RoleFile(role Role, now time.Time) ([]byte, error) {
	rk := r.Role(role)
	if rk == nil {
		return nil, nil
	}
	return roleData(r, role, rk, now)
}

// roleData writes rk's keys valid at now in the role's legacy form.
func roleData(r *Root, role Role, rk *RoleKeys, now time.Time) ([]byte, error) {
	if role == RoleApprovers {
		return approversData(r, rk)
	}
	var b bytes.Buffer
	for _, key := range rk.Keys {
		if !r.validAt(key, now) {
			continue
		}
		if strings.ContainsAny(key.Name, " \t\",") || key.Name == "" {
			return nil, fmt.Errorf("%s: %s key %q: a name used as a signer's principal has no spaces, commas or quotes", r.File, role, key.Name)
		}
		b.WriteString(key.Name)
		b.WriteByte(' ')
		b.Write(bytes.TrimSpace(ssh.MarshalAuthorizedKey(key.PublicKey)))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// validAt reports whether key is inside its window and not revoked at t.
func (r *Root) validAt(key Key, t time.Time) bool {
	for _, rv := range r.Revocations {
		if rv.Fingerprint == key.Fingerprint && !t.Before(rv.At) {
			return false
		}
	}
	return (key.NotBefore.IsZero() || !t.Before(key.NotBefore)) && (key.NotAfter.IsZero() || t.Before(key.NotAfter))
}

// approversData writes the approvers role as an Approvers file: the same
// shape, a revocation folded into the key's notAfter so that approvals
// made before it stay good.
func approversData(r *Root, rk *RoleKeys) ([]byte, error) {
	out := schemas.Approvers{APIVersion: "nuon.dev/v1", Kind: "Approvers", Threshold: rk.Threshold, Scope: approverScope(rk.Scope)}
	for _, key := range rk.Keys {
		notAfter := key.NotAfter
		for _, rv := range r.Revocations {
			if rv.Fingerprint == key.Fingerprint && (notAfter.IsZero() || rv.At.Before(notAfter)) {
				notAfter = rv.At
			}
		}
		a := schemas.TrustKey{Name: key.Name, Key: string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(key.PublicKey))), Scope: approverScope(key.Scope)}
		if !key.NotBefore.IsZero() {
			a.NotBefore = stamp(key.NotBefore)
		}
		if !notAfter.IsZero() {
			a.NotAfter = stamp(notAfter)
		}
		if !key.NotBefore.IsZero() && !notAfter.After(key.NotBefore) && !notAfter.IsZero() {
			// Revoked before its window opened: it never counts.
			continue
		}
		out.Keys = append(out.Keys, a)
	}
	if len(out.Keys) < out.Threshold {
		return nil, fmt.Errorf("%s: approvers: threshold %d, but only %d keys were ever valid", r.File, out.Threshold, len(out.Keys))
	}
	return yaml.Marshal(out)
}

func approverScope(s Scope) *schemas.TrustScope {
	if len(s.InstallLabels) == 0 && len(s.Channels) == 0 && len(s.RequestKinds) == 0 {
		return nil
	}
	return &schemas.TrustScope{InstallLabels: s.InstallLabels, Channels: s.Channels, RequestKinds: s.RequestKinds}
}

// Files is a Main over files already read, path to content: a checkout,
// or a tree read from git.
type Files map[string][]byte

var _ Main = Files(nil)

// ReadFile returns files[name], or fs.ErrNotExist.
func (f Files) ReadFile(name string) ([]byte, error) {
	b, ok := f[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	return b, nil
}

// RootFiles returns the files under Dir, nil when there are none.
func (f Files) RootFiles() (map[string][]byte, error) {
	var out map[string][]byte
	for name, b := range f {
		if strings.HasPrefix(name, Dir+"/") {
			if out == nil {
				out = map[string][]byte{}
			}
			out[name] = b
		}
	}
	return out, nil
}
