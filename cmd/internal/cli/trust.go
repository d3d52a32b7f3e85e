package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// trustOptions are the flags the trust subcommands share.
type trustOptions struct {
	// dir is a checkout of main; the versions are under dir/trust/root.
	dir string
	now func() time.Time
}

// NewTrustCmd is `nuon trust`: the trust root's versions on a checkout of
// main, edited, signed and verified offline. Each change is written as a
// draft version (no signatures yet) or into the draft already there, and
// says what it will let or stop once signed.
func NewTrustCmd(g *Globals) *cobra.Command { return newTrustCmd(g, time.Now) }

// newTrustCmd is NewTrustCmd with the clock injected.
func newTrustCmd(g *Globals, now func() time.Time) *cobra.Command {
	o := &trustOptions{now: now}
	cmd := &cobra.Command{
		Use:   "trust",
		Short: "Edit, sign and verify the trust root (trust/root/<version>.json on main)",
		Long: `The trust root names the keys of every role (render, vendor-artifacts,
builders, operators, approvers, server) with their windows, scopes and
revocations, and is signed by a threshold of offline root keys. Version N+1
needs a threshold of version N's root keys and of its own (see package trust).

init writes version 1; add-key, revoke, allow-source, require-builders and
migrate write the next version as a draft, or change the draft already there; sign adds a root key's signature to the
newest version; verify walks the chain from version 1 to the newest.
Nothing is trusted by any install until it is signed and on main.`,
	}
	cmd.PersistentFlags().StringVar(&o.dir, "dir", ".", "a checkout of main")
	cmd.AddCommand(newTrustInitCmd(g, o), newTrustAddKeyCmd(g, o), newTrustRevokeCmd(g, o),
		newTrustSignCmd(g, o), newTrustVerifyCmd(g, o), newTrustMigrateCmd(g, o),
		newTrustAllowSourceCmd(g, o), newTrustRequireBuildersCmd(g, o))
	return cmd
}

func newTrustInitCmd(g *Globals, o *trustOptions) *cobra.Command {
	var rootKeys, renderKeys []string
	var threshold int
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "init --root-key NAME=FILE.pub... --threshold N --render-key NAME=FILE.pub...",
		Short: "Write version 1 of the trust root, unsigned",
		Example: `  nuon trust init --root-key alice=alice.pub --root-key bob=bob.pub --root-key carol=carol.pub \
      --threshold 2 --render-key render-2026=render.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := os.Stat(filepath.Join(o.dir, trust.FileName(1))); err == nil {
				return fmt.Errorf("trust init: %s exists", trust.FileName(1))
			}
			c := schemas.TrustRoot{
				APIVersion: "nuon.dev/v1", Kind: schemas.KindTrustRoot, Version: 1,
				Expires: o.now().Add(expires).UTC().Format(time.RFC3339),
				Root:    schemas.TrustRootRole{Threshold: threshold},
			}
			for _, nk := range rootKeys {
				name, key, err := readNamedKey(nk)
				if err != nil {
					return err
				}
				c.Root.Keys = append(c.Root.Keys, schemas.TrustRootKey{Name: name, Key: key})
			}
			c.Roles.Render.Threshold = 1
			for _, nk := range renderKeys {
				name, key, err := readNamedKey(nk)
				if err != nil {
					return err
				}
				c.Roles.Render.Keys = append(c.Roles.Render.Keys, schemas.TrustKey{Name: name, Key: key})
			}
			r, err := writeVersion(o, c)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "wrote %s: version 1, expires %s\n", r.File, r.Expires.Format(time.RFC3339))
			fmt.Fprintf(g.Stdout, "lets: %s sign new versions of the root (%d of %d needed)\n", keyNames(r.RootKeys), r.RootThreshold, len(r.RootKeys))
			fmt.Fprintf(g.Stdout, "lets: %s sign rendered state for every install\n", keyNames(r.Roles[trust.RoleRender].Keys))
			fmt.Fprintf(g.Stdout, "next: %d root key holders run nuon trust sign\n", r.RootThreshold)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&rootKeys, "root-key", nil, "NAME=FILE.pub: a root key (ssh-ed25519), repeatable")
	cmd.Flags().IntVar(&threshold, "threshold", 1, "how many root keys must sign each version")
	cmd.Flags().StringArrayVar(&renderKeys, "render-key", nil, "NAME=FILE.pub: a render key, repeatable")
	cmd.Flags().DurationVar(&expires, "expires", 365*24*time.Hour, "how long version 1 stays acceptable as the newest")
	return cmd
}

func newTrustAddKeyCmd(g *Globals, o *trustOptions) *cobra.Command {
	var notBefore, notAfter string
	var threshold int
	cmd := &cobra.Command{
		Use:     "add-key ROLE NAME FILE.pub",
		Short:   "Add a key to a role in the next version",
		Example: `  nuon trust add-key render render-2027 render-2027.pub --not-before 2027-01-01T00:00:00Z`,
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			role, name := trust.Role(args[0]), args[1]
			_, key, err := readNamedKey(name + "=" + args[2])
			if err != nil {
				return err
			}
			c, err := draft(o)
			if err != nil {
				return err
			}
			k := schemas.TrustKey{Name: name, Key: key, NotBefore: notBefore, NotAfter: notAfter}
			if role == trust.RoleRoot {
				c.Root.Keys = append(c.Root.Keys, schemas.TrustRootKey{Name: name, Key: key})
			} else {
				rk, err := roleIn(&c.Roles, role)
				if err != nil {
					return err
				}
				rk.Keys = append(rk.Keys, k)
				if rk.Threshold == 0 {
					rk.Threshold = 1
				}
				if threshold > 0 {
					rk.Threshold = threshold
				}
			}
			r, err := writeVersion(o, c)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "wrote %s: version %d (draft)\n", r.File, r.Version)
			window := "from " + or(notBefore, "now") + " until " + or(notAfter, "revoked")
			if role == trust.RoleRoot {
				fmt.Fprintf(g.Stdout, "lets: %s sign versions after %d of the root, with %d of %d root keys\n", name, r.Version, r.RootThreshold, len(r.RootKeys))
			} else {
				fmt.Fprintf(g.Stdout, "lets: %s sign for %s %s (%d of the role's %d keys needed)\n", name, role, window, r.Roles[role].Threshold, len(r.Roles[role].Keys))
			}
			return printNeeds(g.Stdout, o, r)
		},
	}
	cmd.Flags().StringVar(&notBefore, "not-before", "", "RFC 3339 time from which the key counts")
	cmd.Flags().StringVar(&notAfter, "not-after", "", "RFC 3339 time from which the key no longer counts")
	cmd.Flags().IntVar(&threshold, "threshold", 0, "set the role's threshold too")
	return cmd
}

func newTrustRevokeCmd(g *Globals, o *trustOptions) *cobra.Command {
	var reason, at string
	cmd := &cobra.Command{
		Use:     "revoke FINGERPRINT --reason TEXT [--at TIME]",
		Short:   "Revoke a key in the next version",
		Example: `  nuon trust revoke SHA256:0NPYmUXYlx3WtSRRYNm9//ez1aITrB5DPA+loeyCFpk --reason leaked --at 2026-11-26T09:00:00Z`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return fmt.Errorf("trust revoke: --reason is required")
			}
			when := o.now().UTC().Format(time.RFC3339)
			if at != "" {
				when = at
			}
			c, err := draft(o)
			if err != nil {
				return err
			}
			c.Revocations = append(c.Revocations, schemas.TrustRevocation{Fingerprint: args[0], RevokedAt: when, Reason: reason})
			r, err := writeVersion(o, c)
			if err != nil {
				return err
			}
			var roles []string
			for _, role := range trust.Roles {
				if rk := r.Roles[role]; rk != nil && slices.ContainsFunc(rk.Keys, func(k trust.Key) bool { return k.Fingerprint == args[0] }) {
					roles = append(roles, string(role))
				}
			}
			if slices.ContainsFunc(r.RootKeys, func(k trust.Key) bool { return k.Fingerprint == args[0] }) {
				roles = append(roles, "root")
			}
			fmt.Fprintf(g.Stdout, "wrote %s: version %d (draft)\n", r.File, r.Version)
			fmt.Fprintf(g.Stdout, "stops: signatures by %s (%s) made at or after %s\n", args[0], or(strings.Join(roles, ", "), "in no role of this version"), when)
			fmt.Fprintf(g.Stdout, "keeps: what it signed before %s and installs applied\n", when)
			return printNeeds(g.Stdout, o, r)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.Flags().StringVar(&at, "at", "", "RFC 3339 time from which its signatures are refused (default now; for a leak, no later than the leak)")
	return cmd
}

func newTrustSignCmd(g *Globals, o *trustOptions) *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use:     "sign --key FILE",
		Short:   "Add a root key's signature to the newest version",
		Example: `  nuon trust sign --key ~/.ssh/nuon-root-alice`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := signature.LoadSigner(keyFile)
			if err != nil {
				return err
			}
			roots, err := trust.Load(os.DirFS(o.dir))
			if err != nil {
				return err
			}
			newest := newestOf(roots)
			b, err := trust.Sign(newest, s.SSH())
			if err != nil {
				return err
			}
			r, err := trust.Parse(newest.File, b)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(o.dir, r.File), b, 0o644); err != nil {
				return fmt.Errorf("trust sign: %w", err)
			}
			fmt.Fprintf(g.Stdout, "signed %s with %s\n", r.File, ssh.FingerprintSHA256(s.PublicKey()))
			return printNeeds(g.Stdout, o, r)
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "the root key's private key file (OpenSSH, unencrypted)")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

func newTrustVerifyCmd(g *Globals, o *trustOptions) *cobra.Command {
	var pinnedFile string
	cmd := &cobra.Command{
		Use:   "verify [--pinned FILE]",
		Short: "Walk the chain from version 1 (or a pinned file) to the newest, as an agent will",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			roots, err := trust.Load(os.DirFS(o.dir))
			if err != nil {
				return err
			}
			pinned := slices.IndexFunc(roots, func(r *trust.Root) bool { return r.Version == 1 })
			var pin *trust.Root
			if pinnedFile != "" {
				b, err := os.ReadFile(pinnedFile)
				if err != nil {
					return fmt.Errorf("trust verify: %w", err)
				}
				if pin, err = trust.Parse(pinnedFile, b); err != nil {
					return err
				}
			} else if pinned >= 0 {
				pin = roots[pinned]
			} else {
				return fmt.Errorf("trust verify: no %s", trust.FileName(1))
			}
			newest, err := trust.Chain(pin, roots, o.now())
			if err != nil {
				fmt.Fprintln(g.Stdout, err)
				return ExitError{Code: 1}
			}
			fmt.Fprintf(g.Stdout, "trusted: version %d (%s), expires %s\n", newest.Version, newest.File, newest.Expires.Format(time.RFC3339))
			for _, role := range trust.Roles {
				if rk := newest.Roles[role]; rk != nil {
					fmt.Fprintf(g.Stdout, "  %-16s %d of %s\n", role, rk.Threshold, keyNames(rk.Keys))
				}
			}
			for _, rv := range newest.Revocations {
				fmt.Fprintf(g.Stdout, "  revoked          %s from %s (%s)\n", rv.Fingerprint, rv.At.Format(time.RFC3339), rv.Reason)
			}
			printProvenance(g.Stdout, newest)
			return nil
		},
	}
	cmd.Flags().StringVar(&pinnedFile, "pinned", "", "the version an install was given (default trust/root/1.json)")
	return cmd
}

// draft returns the content to change: the newest version when it has no
// signatures yet, otherwise a copy of it as the next version.
func draft(o *trustOptions) (schemas.TrustRoot, error) {
	var c schemas.TrustRoot
	roots, err := trust.Load(os.DirFS(o.dir))
	if err != nil {
		return c, err
	}
	newest := newestOf(roots)
	if err := json.Unmarshal(newest.Signed(), &c); err != nil {
		return c, fmt.Errorf("%s: %w", newest.File, err)
	}
	if len(newest.Signatures) > 0 {
		c.Version++
	}
	return c, nil
}

// writeVersion checks c as a file and writes it, unsigned, under its
// version's name.
func writeVersion(o *trustOptions, c schemas.TrustRoot) (*trust.Root, error) {
	b, err := trust.Encode(c)
	if err != nil {
		return nil, err
	}
	r, err := trust.Parse(trust.FileName(c.Version), b)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.dir, r.File)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", r.File, err)
	}
	return r, nil
}

// printNeeds says what r still needs before installs follow it.
func printNeeds(w io.Writer, o *trustOptions, r *trust.Root) error {
	roots, err := trust.Load(os.DirFS(o.dir))
	if err != nil {
		return err
	}
	prev := slices.IndexFunc(roots, func(p *trust.Root) bool { return p.Version == r.Version-1 })
	var err2 error
	if prev >= 0 {
		err2 = trust.Verify(roots[prev], r, o.now())
	} else {
		err2 = trust.SelfSigned(r)
	}
	if err2 != nil {
		fmt.Fprintf(w, "not yet trusted: %v\n", err2)
		return nil
	}
	fmt.Fprintf(w, "ready: version %d verifies; commit it to main\n", r.Version)
	return nil
}

func newestOf(roots []*trust.Root) *trust.Root {
	return slices.MaxFunc(roots, func(a, b *trust.Root) int { return int(a.Version - b.Version) })
}

func roleIn(rs *schemas.TrustRoles, role trust.Role) (*schemas.TrustRole, error) {
	slot := map[trust.Role]**schemas.TrustRole{
		trust.RoleVendorArtifacts: &rs.VendorArtifacts, trust.RoleBuilders: &rs.Builders,
		trust.RoleOperators: &rs.Operators, trust.RoleApprovers: &rs.Approvers, trust.RoleServer: &rs.Server,
		trust.RoleBuildRequesters: &rs.BuildRequesters, trust.RoleBuildAgents: &rs.BuildAgents,
	}
	if role == trust.RoleRender {
		return &rs.Render, nil
	}
	p, ok := slot[role]
	if !ok {
		return nil, fmt.Errorf("trust: unknown role %q (root, %s)", role, strings.Join(func() []string {
			var s []string
			for _, r := range trust.Roles {
				s = append(s, string(r))
			}
			return s
		}(), ", "))
	}
	if *p == nil {
		*p = &schemas.TrustRole{}
	}
	return *p, nil
}

// readNamedKey reads NAME=FILE.pub into the name and the key's
// authorized_keys line.
func readNamedKey(nk string) (name, key string, err error) {
	name, file, ok := strings.Cut(nk, "=")
	if !ok || name == "" || file == "" {
		return "", "", fmt.Errorf("key %q: want NAME=FILE.pub", nk)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("key %s: %w", name, err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return "", "", fmt.Errorf("key %s (%s): %w", name, file, err)
	}
	return name, string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(pub))), nil
}

func keyNames(keys []trust.Key) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	return strings.Join(names, ", ")
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// EnvTrustRoot is the default of --trust-root (the agent's and nuon
// verify's).
const EnvTrustRoot = "NUON_TRUST_ROOT"

// TrustRootHelp describes --trust-root.
var TrustRootHelp = "the trust root's version 1 (trust/root/1.json on main), given once at install creation: desired state is judged by the render keys of the newest version the chain reaches from it (default $" + EnvTrustRoot + ")"

// loadRenderTrust reads what judges desired state: the trust root's
// version given by --trust-root, or else the allowed_signers file of
// --trust (deprecated, kept for agents created before the root).
func loadRenderTrust(trustFile, rootFile string) (*signature.AllowedSigners, *trust.Root, error) {
	switch {
	case rootFile != "":
		data, err := os.ReadFile(rootFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--trust-root: %w", err)
		}
		r, err := trust.Parse(rootFile, data)
		if err != nil {
			return nil, nil, fmt.Errorf("--trust-root: %w", err)
		}
		if err := trust.SelfSigned(r); err != nil {
			return nil, nil, fmt.Errorf("--trust-root: %w", err)
		}
		return nil, r, nil
	case trustFile != "":
		as, err := signature.LoadAllowedSigners(trustFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--trust: %w", err)
		}
		return as, nil, nil
	}
	return nil, nil, fmt.Errorf("no render trust: give --trust-root FILE (trust/root/1.json on main, or $%s), or the deprecated --trust allowed_signers file", EnvTrustRoot)
}

// heldRoot is the newest version of the trust root nuon verify trusts:
// the chain from given through the versions on --source, when it is a ref
// the repository has. A version there that does not chain is an error:
// main is the vendor's own record of the root.
func (o *verifyOptions) heldRoot(ctx context.Context, repo *gitrepo.Repo, given *trust.Root) (*trust.Root, error) {
	if !strings.HasPrefix(o.source, "refs/") {
		return given, nil
	}
	if err := repo.Fetch(ctx, o.source); err != nil {
		return nil, err
	}
	src, err := repo.Resolve(o.source)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", o.source, err)
	}
	files, err := agent.ReadRootFiles(repo.Storer(), src)
	if err != nil {
		return nil, fmt.Errorf("trust root on %s: %w", o.source, err)
	}
	roots, err := trust.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("trust root on %s: %w", o.source, err)
	}
	// Expiry is judged with the commit (a refusal, as the agent's), not
	// here: the zero time is before any.
	held, err := trust.Chain(given, roots, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("trust root on %s: %w", o.source, err)
	}
	return held, nil
}

// ProvenanceSourceHelp describes the agent's --provenance-source.
const ProvenanceSourceHelp = "REPO=REF: with --vendor-key and --trust-root, the fallback for a trust root that names no provenance.sources: copy only artifacts whose SLSA provenance (nuon build --builder-key) is signed by a builder of the trust root, names the artifact's digest and was built from repository REPO at a ref matching REF (a pattern, e.g. git+https://git.example.com/acme/shop=refs/tags/v*); repeatable. The root's provenance.sources (per component) and provenance.builders (distinct builders per channel) come first: with them, provenance is required even without this flag"

// provenanceConfig is the syncer's provenance policy: the root's
// provenance rules, with the --provenance-source flags as the fallback
// sources. Without flags and without a trust root, nil (provenance is not
// required); without flags but with a root, provenance is required
// whenever the root in force names provenance rules.
func provenanceConfig(flags []string, root func() *trust.Root) (*sync.ProvenanceConfig, error) {
	if len(flags) == 0 {
		if root() == nil {
			return nil, nil
		}
		return &sync.ProvenanceConfig{Root: root, RootOnly: true}, nil
	}
	if root() == nil {
		return nil, fmt.Errorf("--provenance-source: the builders are named by the trust root: give --trust-root")
	}
	pc := &sync.ProvenanceConfig{Root: root}
	for _, f := range flags {
		repo, ref, ok := strings.Cut(f, "=")
		if !ok || repo == "" || ref == "" {
			return nil, fmt.Errorf("--provenance-source %q: want REPO=REF", f)
		}
		if _, err := path.Match(ref, ""); err != nil {
			return nil, fmt.Errorf("--provenance-source %q: %w", f, err)
		}
		pc.Sources = append(pc.Sources, sync.Source{Repository: repo, Ref: ref})
	}
	return pc, nil
}
