package cli

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// migrateSource is one old form of a role's keys.
type migrateSource struct {
	role trust.Role
	file string
	// keys are what the file lists, as role keys; threshold and scope
	// only for approvers (the other forms have none: one key suffices).
	keys      []schemas.TrustKey
	threshold int
	scope     *schemas.TrustScope
}

func newTrustMigrateCmd(g *Globals, o *trustOptions) *cobra.Command {
	var agentTrust, vendorKey string
	cmd := &cobra.Command{
		Use:   "migrate [--agent-trust FILE] [--vendor-key cosign.pub]",
		Short: "Move the old key files of main (and an agent's --trust, --vendor-key) into roles of the next version",
		Long: `Before the trust root, each kind of key had its own file: on main
trust/requests (operators), trust/approvals (approvers), trust/builds (build
requesters) and trust/build-agents (build agents); in each install the
agent's --trust allowed_signers file (render keys) and --vendor-key (the
vendor's cosign.pub). migrate reads those found in --dir (and the two files
given) and writes their keys as the roles operators, approvers,
build-requesters, build-agents, render and vendor-artifacts into the next
version of the root, as a draft: root key holders then sign it (nuon trust
sign) and it is committed to main.

Once main's root names a role, every reader takes the role's keys and
ignores the old file (with a warning to remove it); until then the old file
is still read, with a deprecation warning. For each change migrate prints
what it lets and what it stops: a key the root has revoked, or of a type the
root does not take, stops counting when the version is signed.`,
		Example: `  nuon trust migrate --dir . --agent-trust /etc/nuon/trust --vendor-key cosign.pub
  nuon trust sign --key ~/.ssh/nuon-root-alice
  git add trust && git commit -m "trust: the old key files become roles of the root"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srcs, err := migrateSources(o.dir, agentTrust, vendorKey)
			if err != nil {
				return err
			}
			if len(srcs) == 0 {
				return fmt.Errorf("trust migrate: nothing to migrate: none of %s is in %s, and no --agent-trust or --vendor-key", strings.Join(legacyFileNames(), ", "), o.dir)
			}
			c, err := draft(o)
			if err != nil {
				return err
			}
			prev, err := newestRoot(o)
			if err != nil {
				return err
			}
			var report bytes.Buffer
			changed := false
			for _, src := range srcs {
				if migrateRole(&report, &c, prev, src, o.now()) {
					changed = true
				}
			}
			if !changed {
				g.Stdout.Write(report.Bytes())
				fmt.Fprintln(g.Stdout, "nothing to change: every key is already in the root")
				return nil
			}
			r, err := writeVersion(o, c)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "wrote %s: version %d (draft)\n", r.File, r.Version)
			g.Stdout.Write(report.Bytes())
			for _, src := range srcs {
				if strings.HasPrefix(src.file, "trust/") {
					fmt.Fprintf(g.Stdout, "then: once version %d is on main, readers ignore %s (they warn until it is removed)\n", r.Version, src.file)
				}
			}
			return printNeeds(g.Stdout, o, r)
		},
	}
	cmd.Flags().StringVar(&agentTrust, "agent-trust", "", "an agent's --trust allowed_signers file: its keys become render keys")
	cmd.Flags().StringVar(&vendorKey, "vendor-key", "", "an agent's --vendor-key (the vendor's cosign.pub, ECDSA P-256 PEM): it becomes a vendor-artifacts key")
	return cmd
}

func legacyFileNames() []string {
	var names []string
	for _, role := range trust.Roles {
		if f := trust.LegacyFiles[role]; f != "" {
			names = append(names, f)
		}
	}
	return names
}

// newestRoot is the newest version in the checkout, signed or not.
func newestRoot(o *trustOptions) (*trust.Root, error) {
	roots, err := trust.Load(os.DirFS(o.dir))
	if err != nil {
		return nil, err
	}
	return newestOf(roots), nil
}

// migrateSources reads every old form found: the legacy files in dir, in
// the order of trust.Roles, then the agent's files.
func migrateSources(dir, agentTrust, vendorKey string) ([]migrateSource, error) {
	var out []migrateSource
	for _, role := range trust.Roles {
		file := trust.LegacyFiles[role]
		if file == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("trust migrate: %w", err)
		}
		src := migrateSource{role: role, file: file}
		if role == trust.RoleApprovers {
			var a schemas.Approvers
			if _, err := schemas.DecodeLocated(schemas.SchemaApprovers, file, data, &a); err != nil {
				return nil, fmt.Errorf("trust migrate: %w", err)
			}
			src.keys, src.threshold, src.scope = a.Keys, a.Threshold, a.Scope
		} else if src.keys, err = allowedSignerKeys(file, data); err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	if agentTrust != "" {
		data, err := os.ReadFile(agentTrust)
		if err != nil {
			return nil, fmt.Errorf("trust migrate: --agent-trust: %w", err)
		}
		keys, err := allowedSignerKeys(agentTrust, data)
		if err != nil {
			return nil, err
		}
		out = append(out, migrateSource{role: trust.RoleRender, file: agentTrust, keys: keys})
	}
	if vendorKey != "" {
		k, err := cosignKey(vendorKey)
		if err != nil {
			return nil, err
		}
		out = append(out, migrateSource{role: trust.RoleVendorArtifacts, file: vendorKey, keys: []schemas.TrustKey{k}})
	}
	return out, nil
}

// allowedSignerKeys reads an allowed_signers file into role keys named by
// each line's first principal (the name a build request's requester
// gives), made unique in the file by a -2, -3, … suffix.
func allowedSignerKeys(file string, data []byte) ([]schemas.TrustKey, error) {
	as, err := signature.ParseAllowedSigners(data)
	if err != nil {
		return nil, fmt.Errorf("trust migrate: %s%w", file, err)
	}
	var keys []schemas.TrustKey
	used := map[string]int{}
	for _, s := range as.Signers {
		name := s.Principals[0]
		used[name]++
		if n := used[name]; n > 1 {
			name += "-" + strconv.Itoa(n)
		}
		keys = append(keys, schemas.TrustKey{Name: name, Key: string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(s.Key)))})
	}
	return keys, nil
}

// cosignKey reads a cosign.pub (PEM, PKIX) as an OpenSSH public key line.
func cosignKey(file string) (schemas.TrustKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return schemas.TrustKey{}, fmt.Errorf("trust migrate: --vendor-key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return schemas.TrustKey{}, fmt.Errorf("trust migrate: --vendor-key %s: not a PEM public key (cosign.pub)", file)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return schemas.TrustKey{}, fmt.Errorf("trust migrate: --vendor-key %s: %w", file, err)
	}
	sk, err := ssh.NewPublicKey(pub)
	if err != nil {
		return schemas.TrustKey{}, fmt.Errorf("trust migrate: --vendor-key %s: %w", file, err)
	}
	return schemas.TrustKey{Name: "vendor-cosign", Key: string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(sk)))}, nil
}

// migrateRole adds src's keys to c's role, writing to w what each change
// lets and stops; it reports whether c changed.
func migrateRole(w io.Writer, c *schemas.TrustRoot, prev *trust.Root, src migrateSource, now time.Time) bool {
	rk, err := roleIn(&c.Roles, src.role)
	if err != nil {
		fmt.Fprintf(w, "skip: %s: %v\n", src.file, err)
		return false
	}
	changed := false
	have := map[string]string{}
	names := map[string]bool{}
	for _, k := range rk.Keys {
		if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.Key)); err == nil {
			have[ssh.FingerprintSHA256(pub)] = k.Name
		}
		names[k.Name] = true
	}
	wasEmpty := len(rk.Keys) == 0
	for _, k := range src.keys {
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.Key))
		if err != nil {
			fmt.Fprintf(w, "stops: %s key %q from %s: not an OpenSSH public key (%v); not migrated\n", src.role, k.Name, src.file, err)
			continue
		}
		fp := ssh.FingerprintSHA256(pub)
		if name, ok := have[fp]; ok {
			fmt.Fprintf(w, "keeps: %s key %q (%s) from %s is already the root's %q\n", src.role, k.Name, fp, src.file, name)
			continue
		}
		if !slices.Contains(migratableTypes, pub.Type()) {
			fmt.Fprintf(w, "stops: %s key %q (%s) from %s is %s, which the root does not take (ed25519 or ECDSA); not migrated, so it stops counting once the version is signed\n", src.role, k.Name, fp, src.file, pub.Type())
			continue
		}
		if i := slices.IndexFunc(prev.Revocations, func(rv trust.Revocation) bool { return rv.Fingerprint == fp }); i >= 0 {
			rv := prev.Revocations[i]
			fmt.Fprintf(w, "stops: %s key %q (%s) from %s: the root revoked it at %s (%s); the file still let it sign, the root will not\n",
				src.role, k.Name, fp, src.file, rv.At.UTC().Format(time.RFC3339), rv.Reason)
			continue
		}
		name := k.Name
		for i := 2; names[name]; i++ {
			name = k.Name + "-" + strconv.Itoa(i)
		}
		names[name] = true
		k.Name = name
		rk.Keys = append(rk.Keys, k)
		have[fp] = name
		changed = true
		fmt.Fprintf(w, "lets: %q (%s) sign for %s %s, as %s let it%s\n", name, fp, src.role, migrateWindow(k, now), src.file, migrateScope(k.Scope, src.scope))
	}
	if !changed {
		return false
	}
	switch {
	case src.threshold > 0 && wasEmpty:
		rk.Threshold, rk.Scope = src.threshold, src.scope
		fmt.Fprintf(w, "keeps: %s threshold %d and scope of %s\n", src.role, src.threshold, src.file)
	case rk.Threshold == 0:
		rk.Threshold = 1
	case src.threshold > 0 && src.threshold != rk.Threshold:
		fmt.Fprintf(w, "note: %s keeps the root's threshold %d (%s says %d)\n", src.role, rk.Threshold, src.file, src.threshold)
	}
	return true
}

// migratableTypes are the key types a role of the root takes.
var migratableTypes = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519,
	ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoSKECDSA256}

func migrateWindow(k schemas.TrustKey, now time.Time) string {
	from, until := "from now", "until revoked"
	if k.NotBefore != "" {
		from = "from " + k.NotBefore
	}
	if k.NotAfter != "" {
		until = "until " + k.NotAfter
	}
	return from + " " + until
}

func migrateScope(key, role *schemas.TrustScope) string {
	var parts []string
	for _, s := range []*schemas.TrustScope{role, key} {
		if s == nil {
			continue
		}
		if len(s.Channels) > 0 {
			parts = append(parts, "channels "+strings.Join(s.Channels, ","))
		}
		if len(s.InstallLabels) > 0 {
			b, _ := yaml.Marshal(s.InstallLabels)
			parts = append(parts, "labels "+strings.TrimSpace(strings.ReplaceAll(string(b), "\n", " ")))
		}
		if len(s.RequestKinds) > 0 {
			parts = append(parts, "kinds "+strings.Join(s.RequestKinds, ","))
		}
	}
	if len(parts) == 0 {
		return " (every install)"
	}
	return " (" + strings.Join(parts, "; ") + ")"
}
