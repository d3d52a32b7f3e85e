package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing/fstest"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	sigstoresig "github.com/sigstore/sigstore/pkg/signature"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/plugin/plugintest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

func newPluginCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Run and test plugins: component types behind the plugin protocol",
		Long: `A plugin applies one component type as its own process: the job hands it one
request on stdin (schemas/plugin-request.schema.json) and reads one response
on stdout (schemas/plugin-response.schema.json); the plugin logs on stderr and
exits 0 (done), 1 (failed), 2 (invalid request), 3 (unsupported operation or
protocol) or 4 (refused). A handshake comes first: the plugin states its
manifest (schemas/plugin-manifest.schema.json) with the protocol versions it
speaks, its operations (plan, apply, destroy, drift, health, debug) and the
capabilities it needs (network, secrets, cloudRole, writableState, env
variables). A job that does not grant them does not run the plugin.`,
	}
	cmd.AddCommand(newPluginServeCmd(g), newPluginTestCmd(g), newPluginReleaseCmd(g))
	return cmd
}

// pluginReleaseOptions are `nuon plugin release`'s flags.
type pluginReleaseOptions struct {
	repository, key, output string
	reg                     cli.RegistryOptions
	// imageBase is the base of the plugin's container image (a
	// reference by digest; empty: none); noImage releases no image.
	imageBase string
	noImage   bool
	stderr    io.Writer
	// The record on main: --repo, the components whose plugin it is, the
	// version (default the plugin's), the commit's key and author.
	repo, version, commitKey, author, cacheDir string
	components                                 []string
}

func newPluginReleaseCmd(g *cli.Globals) *cobra.Command {
	o := &pluginReleaseOptions{}
	cmd := &cobra.Command{
		Use:   "release DIR --repository REPO --key cosign.key [--repo TENANT --component NAME...]",
		Short: "Package a plugin directory as an OCI artifact, push it, sign it, and record it as a release",
		Long: `Release packages the plugin directory DIR as one OCI artifact: its config is
DIR/plugin.json, the plugin's manifest (schemas/plugin-manifest.schema.json),
its one layer the directory, with an executable for each platform the
manifest's executables name (media types ` + plugin.ConfigMediaType + `
and ` + plugin.ContentMediaType + `). It pushes it to REPO, tagged with the
plugin's version, and signs it with the vendor's cosign key as every artifact
is signed (password in COSIGN_PASSWORD). It prints the reference by digest,
which is what pins the plugin: a job fetches it by digest and runs it only when
the signature verifies.

When the manifest names a linux/amd64 executable, the release also has a
container image, the form the Kubernetes runner runs as a container of its
own: a standard OCI image (so any runtime runs it) whose one added layer is
the directory at ` + plugin.ImageDir + `, whose entrypoint is that executable, whose
config label ` + plugin.ImageManifestLabel + ` is the manifest and whose
annotation ` + plugin.ImageArtifactAnnotation + ` names the artifact's digest,
so the two are one release. It is pushed to REPO tagged VERSION-image and
signed with the same key. An executable that needs an interpreter (a script)
needs a base image that has it: --image-base REPO@sha256:…, pulled by
digest; a static executable needs none. --no-image releases the artifact
alone, and the Kubernetes runner then runs the plugin as a process of the
job's own image.

With --repo and --component it also records the artifact on main as a
release of each component of type plugin that runs this plugin, as 'nuon
release COMPONENT --artifact plugin=REPO@DIGEST' does: releases/<component>.yaml
gains VERSION (default the plugin's version) with the artifact named plugin,
and the image named plugin-image.
A channel pin moved to that version upgrades the plugin in the installs that
follow the channel, with no new agent: the agent syncs the artifact by
digest, and the job runs it with the grants nuon.yaml gives the component
(plugin.grants), refusing it when its signed manifest needs more.`,
		Example: `  nuon plugin release fixtures/plugins/zonefile \
      --repository registry.vendor.example/acme/plugins/zonefile --key cosign.key \
      --image-base registry.vendor.example/base/perl@sha256:…

  # and record it as release 0.3.0 of component dns (type plugin) on main
  nuon plugin release fixtures/plugins/zonefile \
      --repository registry.vendor.example/acme/plugins/zonefile --key cosign.key \
      --repo https://git.example.com/vendor/tenant.git --component dns

  nuon job run --plugin-artifact zonefile=registry.example/acme/plugins/zonefile@sha256:… \
      --plugin-key cosign.pub --plugin-grant zonefile=env:NUON_ZONE_DIR manifest.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.stderr = g.Stderr
			return runPluginRelease(cmd.Context(), g, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repository, "repository", "", "the repository to push to (required)")
	f.StringVar(&o.key, "key", "", "the vendor's cosign private key (cosign.key; password in COSIGN_PASSWORD) (required)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text (the reference) or json")
	f.StringVar(&o.imageBase, "image-base", "", "the base of the plugin's container image, by digest (REPO@sha256:…): what its executable needs to run, such as an interpreter (default: none, for a static executable)")
	f.BoolVar(&o.noImage, "no-image", false, "release no container image: the Kubernetes runner then runs the plugin as a process of the job's image")
	f.StringVar(&o.repo, "repo", "", "tenant repository to record the release on (a path, or a file://, https:// or ssh:// URL); needs --component")
	f.StringArrayVar(&o.components, "component", nil, "a component of type plugin that runs this plugin: record the artifact as its release (repeatable; needs --repo)")
	f.StringVar(&o.version, "version", "", "the components' version to record (default: the plugin's version)")
	f.StringVar(&o.commitKey, "commit-key", "", "OpenSSH private key that signs the release commit")
	f.StringVar(&o.author, "author", "", "the release commit's author, \"Name <email>\" (default: GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories (default: the user cache directory)")
	o.reg.Flags(f)
	return cmd
}

func runPluginRelease(ctx context.Context, g *cli.Globals, o *pluginReleaseOptions, dir string) error {
	if err := cli.CheckOutput(o.output); err != nil {
		return err
	}
	if o.repository == "" || o.key == "" {
		return errors.New("--repository and --key are required")
	}
	if (o.repo == "") != (len(o.components) == 0) {
		return errors.New("--repo and --component go together: the release is recorded on main for the components named")
	}
	repo, err := name.NewRepository(o.repository)
	if err != nil {
		return fmt.Errorf("--repository: %w", err)
	}
	sv, err := builder.LoadKey(o.key, []byte(os.Getenv("COSIGN_PASSWORD")))
	if err != nil {
		return err
	}
	img, m, err := plugin.Package(dir)
	if err != nil {
		return err
	}
	c, _, err := o.reg.Client()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	ref := repo.Digest(d.String())
	p, err := c.NewPusher(ctx, repo)
	if err != nil {
		return err
	}
	if err := p.Push(ctx, repo.Tag(m.Version), img); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	if _, err := builder.Sign(ctx, c, ref, sv); err != nil {
		return err
	}
	out := map[string]any{"name": m.Name, "version": m.Version, "ref": ref.String(), "digest": d.String()}
	image, err := releaseImage(ctx, c, o, dir, repo, m, d, sv)
	if err != nil {
		return err
	}
	if image != nil {
		out["image"] = image.String()
	}
	if o.repo != "" {
		version := o.version
		if version == "" {
			version = m.Version
		}
		var records []builder.Record
		for _, comp := range o.components {
			arts := map[string]schemas.ReleaseArtifact{
				schemas.PluginArtifactName: {Repository: repo.String(), Digest: d.String(), MediaType: string(mt)},
			}
			if image != nil {
				arts[schemas.PluginImageArtifactName] = schemas.ReleaseArtifact{Repository: repo.String(), Digest: image.DigestStr(), MediaType: string(types.OCIManifestSchema1)}
			}
			records = append(records, builder.Record{Component: comp, Version: version, Artifacts: arts})
		}
		res, err := recordRelease(ctx, g, o, m.Name, records)
		if err != nil {
			return err
		}
		out["release"] = res
	}
	if o.output == "json" {
		return json.NewEncoder(g.Stdout).Encode(out)
	}
	fmt.Fprintln(g.Stdout, ref.String())
	if image != nil {
		fmt.Fprintf(g.Stdout, "image %s\n", image)
	}
	if res, ok := out["release"].(*builder.ReleaseResult); ok {
		for _, r := range res.Unchanged {
			fmt.Fprintf(g.Stdout, "%s: already released with this plugin\n", r)
		}
		if res.Commit != "" {
			fmt.Fprintf(g.Stdout, "released %s\nmain → %s\n", strings.Join(res.Added, ", "), res.Commit)
		}
	}
	return nil
}

// releaseImage packages, pushes and signs the plugin's container image,
// tied to its artifact art; nil without one (--no-image, or no
// linux/amd64 executable).
func releaseImage(ctx context.Context, c *oci.Client, o *pluginReleaseOptions, dir string, repo name.Repository, m *schemas.PluginManifest, art v1.Hash, sv sigstoresig.SignerVerifier) (*name.Digest, error) {
	if o.noImage {
		return nil, nil
	}
	if _, ok := m.Executables[plugin.ImagePlatform]; !ok {
		if o.imageBase != "" {
			return nil, fmt.Errorf("--image-base: plugin %s names no %s executable to run in an image", m.Name, plugin.ImagePlatform)
		}
		return nil, nil
	}
	if o.imageBase == "" && isScript(filepath.Join(dir, filepath.FromSlash(m.Executables[plugin.ImagePlatform]))) {
		// An image of a script alone would not run: it needs its
		// interpreter, which only the vendor can choose.
		fmt.Fprintf(o.stderr, "no container image: %s's %s executable is a script; give its interpreter's image with --image-base (the Kubernetes runner runs it as a process of the job's image meanwhile)\n", m.Name, plugin.ImagePlatform)
		return nil, nil
	}
	var base v1.Image
	if o.imageBase != "" {
		ref, err := name.NewDigest(o.imageBase)
		if err != nil {
			return nil, fmt.Errorf("--image-base %q: want REPO@sha256:… (a base pinned by digest): %w", o.imageBase, err)
		}
		opts, err := c.Remote(ctx, ref.Context(), false)
		if err != nil {
			return nil, err
		}
		if base, err = remote.Image(ref, opts...); err != nil {
			return nil, fmt.Errorf("--image-base %s: %w", ref, err)
		}
	}
	img, _, err := plugin.PackageImage(dir, base, art)
	if err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	ref := repo.Digest(d.String())
	p, err := c.NewPusher(ctx, repo)
	if err != nil {
		return nil, err
	}
	if err := p.Push(ctx, repo.Tag(m.Version+"-image"), img); err != nil {
		return nil, fmt.Errorf("push %s: %w", ref, err)
	}
	if _, err := builder.Sign(ctx, c, ref, sv); err != nil {
		return nil, err
	}
	return &ref, nil
}

// isScript tells whether the file starts with "#!".
func isScript(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [2]byte
	n, _ := f.Read(b[:])
	return n == 2 && string(b[:]) == "#!"
}

// recordRelease records the plugin's artifact as a release of each
// component on main, as nuon release does.
func recordRelease(ctx context.Context, g *cli.Globals, o *pluginReleaseOptions, plugin string, records []builder.Record) (*builder.ReleaseResult, error) {
	opts := builder.ReleaseOptions{Now: time.Now}
	var err error
	if opts.Name, opts.Email, err = releaseAuthor(o.author); err != nil {
		return nil, err
	}
	if o.commitKey != "" {
		if opts.Signer, err = signature.LoadSigner(o.commitKey); err != nil {
			return nil, err
		}
	}
	repo, err := g.OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return nil, err
	}
	if err := checkPluginComponents(ctx, repo, plugin, records); err != nil {
		return nil, err
	}
	res, err := builder.Release(ctx, repo, records, opts)
	if errors.Is(err, builder.ErrConflict) {
		return nil, fmt.Errorf("%w; a released version never changes: release the plugin with a new version", err)
	}
	return res, err
}

func newPluginServeCmd(g *cli.Globals) *cobra.Command {
	var kubeconfig, tfConfig string
	cmd := &cobra.Command{
		Use:   "serve NAME",
		Short: "Serve a built-in plugin (terraform, helm, manifests) on stdin and stdout",
		Long: `Serve answers one plugin request on stdin with the built-in plugin NAME, on
stdout, and exits with the protocol's exit code. ` + "`nuon job run --plugin-process NAME`" + `
runs the built-ins this way, each job in a process of its own with only the
environment its manifest asks for.

Anything the plugin, its libraries or its tools write to stdout goes to
stderr: stdout carries the response alone.`,
		Example: `  echo '{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"protocols":[1],"operation":"handshake"}' |
    nuon plugin serve terraform`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: cli.JobPlugins,
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == schemas.TypeTerraform {
				if err := toolcache.CheckTerraformConfig(tfConfig, "--tf-cli-config"); err != nil {
					return err
				}
			}
			p, ok := plugins(kubeconfig, tfConfig)[args[0]]
			if !ok {
				return fmt.Errorf("no built-in plugin %q (built-in: %s)", args[0], strings.Join(cli.JobPlugins, ", "))
			}
			m, err := plugin.Builtin(args[0])
			if err != nil {
				return err
			}
			stdout, restore, err := plugin.ProtectStdout()
			if err != nil {
				return err
			}
			defer restore()
			s := &plugin.Server{Manifest: m, Plugin: p}
			if code := s.Serve(cmd.Context(), cmd.InOrStdin(), stdout, g.Stderr); code != plugin.ExitOK {
				return cli.ExitError{Code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for the helm and manifests plugins (default: KUBECONFIG, ~/.kube/config, in-cluster)")
	cmd.Flags().StringVar(&tfConfig, "tf-cli-config", cli.TerraformConfigDefault(), cli.TerraformConfigHelp)
	return cmd
}

func newPluginTestCmd(g *cli.Globals) *cobra.Command {
	var jobFile, output, artifacts string
	var env []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "test PATH [ARGS...]",
		Short: "Check a plugin executable against the protocol with the test kit",
		Long: `Test runs the plugin at PATH through the protocol the way a job does, and a
few ways a job never would, and checks each answer against the protocol's
schemas and rules (package plugin/plugintest):

  handshake                 a manifest that validates, protocol 1 agreed
  handshake in protocol 999 refused as unsupported (exit 3)
  a request that is not JSON refused as invalid (exit 2), with a response
  undeclared operations     unsupported (exit 3)
  plan, apply, apply again, drift, health, debug, destroy, drift, destroy
                            the declared ones on the sample job (--job), in a
                            state directory of the kit's own: the second apply
                            changes nothing, drift after apply finds nothing,
                            health after apply is not Failed
  an operation in protocol 999  unsupported

The plugin gets the capabilities its manifest asks for, drawn from this
command's environment and --env. It exits 1 when a check fails.`,
		Example: `  mkdir -p /tmp/zones
  nuon plugin test --env NUON_ZONE_DIR=/tmp/zones \
      --job fixtures/plugins/zonefile/job.json fixtures/plugins/zonefile/zonefile

  # a built-in, served by this binary, its module from an OCI image layout
  nuon plugin test --job network.json --artifacts ./artifacts $(command -v nuon) plugin serve terraform`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(output); err != nil {
				return err
			}
			k := plugintest.Kit{Path: args[0], Args: args[1:], Environ: os.Environ(), Timeout: timeout}
			if artifacts != "" {
				k.Artifacts = oci.Layout{Path: artifacts}
			}
			for _, kv := range env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return fmt.Errorf("--env %q: want NAME=VALUE", kv)
				}
			}
			k.Environ = append(k.Environ, env...)
			if jobFile != "" {
				data, err := os.ReadFile(jobFile)
				if err != nil {
					return err
				}
				if k.Job, err = plugin.DecodeJob(jobFile, data); err != nil {
					return err
				}
			}
			rep, err := k.Run(cmd.Context())
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(g.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printReport(g, rep)
			}
			if rep.Failed() > 0 {
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&jobFile, "job", "", "the sample job manifest (JSON) to run the operations with; its plugin may be any plugin's name")
	f.StringVar(&artifacts, "artifacts", "", "an OCI image layout holding the sample job's artifacts, by the digests it pins")
	f.StringArrayVar(&env, "env", nil, "NAME=VALUE added to the environment the plugin's grants are drawn from (repeatable)")
	f.DurationVar(&timeout, "timeout", plugintest.DefaultTimeout, "bound on each call to the plugin")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func printReport(g *cli.Globals, rep *plugintest.Report) {
	if m := rep.Plugin; m != nil {
		fmt.Fprintf(g.Stdout, "plugin %s %s, protocol %d\n", m.Name, m.Version, rep.Protocol)
	}
	for _, r := range rep.Results {
		mark := "ok  "
		if !r.OK {
			mark = "FAIL"
		}
		msg := strings.ReplaceAll(strings.TrimSpace(r.Message), "\n", "\n       ")
		fmt.Fprintf(g.Stdout, "%s %-34s %6s  %s\n", mark, r.Check, r.Duration.Round(time.Millisecond), msg)
	}
	fmt.Fprintf(g.Stdout, "%d checks, %d failed\n", len(rep.Results), rep.Failed())
}

// processPlugins is `nuon job run --plugin-process`: which plugins a job
// runs behind the protocol, as processes of their own, instead of in the
// job process.
type processPlugins struct {
	specs     []string
	grants    []string
	artifacts []string
	key       string
	shared    bool
	// In a vendor's plugin's job's pod (agent/jobs, "Plugin jobs"): run
	// the plugin the agent staged in staged; or, in the image form, read
	// the plugin container's answer from exchangeIn and exchangeOut.
	staged                  string
	exchangeIn, exchangeOut string
}

// envProcessPlugins is the default of --plugin-process, so that an agent
// whose environment sets it runs every job's plugins that way.
const envProcessPlugins = "NUON_PLUGIN_PROCESS"

func (p *processPlugins) register(f *pflag.FlagSet) {
	var def []string
	if v := os.Getenv(envProcessPlugins); v != "" {
		def = strings.Split(v, ",")
	}
	f.StringSliceVar(&p.specs, "plugin-process", def, "run plugin NAME as its own process behind the plugin protocol: a built-in served by this binary (NAME), or an executable (NAME=PATH); default $"+envProcessPlugins)
	f.StringArrayVar(&p.artifacts, "plugin-artifact", nil, "run plugin NAME from its released artifact, pinned by digest (NAME=REPO@sha256:…), fetched only when --plugin-key verifies its signature (repeatable)")
	f.StringVar(&p.key, "plugin-key", "", "the vendor's cosign public key that --plugin-artifact's signatures must verify with")
	f.BoolVar(&p.shared, "plugin-shared-network", false, "run plugins not granted the network in the job's network all the same, where network namespaces are not allowed (default: a namespace of their own, with nothing in it)")
	f.StringVar(&p.staged, "plugin-staged", "", "in a Kubernetes job's pod: run the plugin the manifest pins from this directory, where the agent staged its artifact and the job's artifacts, reading no registry; the plugin runs only if the staged artifact hashes to the digest the manifest pins")
	f.StringVar(&p.exchangeIn, "plugin-exchange-in", "", "in a Kubernetes job's pod, the image form's last step: the directory the agent staged the plugin's request in; the job's plugin answers from --plugin-exchange-out")
	f.StringVar(&p.exchangeOut, "plugin-exchange-out", "", "with --plugin-exchange-in: the directory the plugin's container wrote its response into")
	f.StringArrayVar(&p.grants, "plugin-grant", nil, "capabilities granted to an executable plugin: NAME=network,secrets,cloudRole,writableState,env:VAR (repeatable); a built-in gets what it needs")
}

// apply replaces or adds the plugins --plugin-process names.
func (p *processPlugins) apply(ps map[string]reconciler.Plugin, kubeconfig, tfConfig string) error {
	return p.applyFetch(context.Background(), ps, kubeconfig, tfConfig, nil, "")
}

// applyFetch is apply, and adds the plugins --plugin-artifact names,
// fetched through c into dir.
func (p *processPlugins) applyFetch(ctx context.Context, ps map[string]reconciler.Plugin, kubeconfig, tfConfig string, c *oci.Client, dir string) error {
	grants := map[string]schemas.PluginCapabilities{}
	for _, g := range p.grants {
		name, list, ok := strings.Cut(g, "=")
		if !ok {
			return fmt.Errorf("--plugin-grant %q: want NAME=CAPABILITY,…", g)
		}
		c := grants[name]
		for _, cap := range strings.Split(list, ",") {
			switch {
			case cap == "network":
				c.Network = true
			case cap == "secrets":
				c.Secrets = true
			case cap == "cloudRole":
				c.CloudRole = true
			case cap == "writableState":
				c.WritableState = true
			case strings.HasPrefix(cap, "env:") && len(cap) > 4:
				c.Env = append(c.Env, cap[4:])
			default:
				return fmt.Errorf("--plugin-grant %q: unknown capability %q (network, secrets, cloudRole, writableState, env:VAR)", g, cap)
			}
		}
		grants[name] = c
	}
	for _, spec := range p.specs {
		name, path, external := strings.Cut(spec, "=")
		if !external {
			if !slices.Contains(cli.JobPlugins, name) {
				return fmt.Errorf("--plugin-process %q: no built-in plugin %q; name an executable with %s=PATH", spec, name, name)
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			args := []string{"plugin", "serve", name, "--tf-cli-config", tfConfig}
			if kubeconfig != "" {
				args = append(args, "--kubeconfig", kubeconfig)
			}
			// The built-in's manifest is this binary's own: no handshake.
			m, err := plugin.Builtin(name)
			if err != nil {
				return err
			}
			m.Operations = plugin.Operations(ps[name])
			ps[name] = &plugin.Process{Runner: plugin.Runner{Path: exe, Args: args}, Granted: plugin.BuiltinGrant(name), Manifest: &m}
			continue
		}
		if !plugin.ValidName(name) || path == "" {
			return fmt.Errorf("--plugin-process %q: want NAME=PATH with NAME a plugin name", spec)
		}
		ps[name] = &plugin.Process{Runner: plugin.Runner{Path: path, SharedNetwork: p.shared}, Granted: grants[name]}
	}
	if len(p.artifacts) == 0 {
		return nil
	}
	if p.key == "" {
		return errors.New("--plugin-artifact needs --plugin-key, the vendor's public key")
	}
	v, err := oci.LoadPublicKey(p.key)
	if err != nil {
		return err
	}
	for _, spec := range p.artifacts {
		pname, refStr, ok := strings.Cut(spec, "=")
		ref, err := name.NewDigest(refStr)
		if !ok || !plugin.ValidName(pname) || err != nil {
			return fmt.Errorf("--plugin-artifact %q: want NAME=REPO@sha256:…", spec)
		}
		if c == nil {
			return errors.New("--plugin-artifact: no registry client")
		}
		// A plugin that cannot be fetched fails the job with why, in its
		// result, as a plugin that fails does.
		f, err := plugin.Fetch(ctx, c, ref, v, filepath.Join(dir, pname), "")
		switch {
		case err != nil:
			ps[pname] = refusedPlugin{err}
		case f.Manifest.Name != pname:
			ps[pname] = refusedPlugin{fmt.Errorf("plugin %s: the artifact %s is plugin %s", pname, ref, f.Manifest.Name)}
		default:
			fp := f.Process(grants[pname])
			fp.Runner.SharedNetwork = p.shared
			ps[pname] = fp
		}
	}
	return nil
}

// run is apply for `nuon job run`: it fetches artifacts through the
// job's registry options into a directory of the job's own, which the
// returned function removes. A job of a vendor's plugin (the manifest at
// manifestPath carries grants) runs the plugin its manifest pins, from
// the install registry, as plugin.Pinned checks it: the grants come from
// the signed desired state, never from this command's flags.
func (p *processPlugins) run(ctx context.Context, ps map[string]reconciler.Plugin, kubeconfig, tfConfig string, reg *cli.RegistryOptions, manifestPath string) (func(), error) {
	job := pinnedJob(manifestPath)
	switch {
	case p.exchangeIn != "" && job != nil:
		if q, err := plugin.Exchanged(p.exchangeIn, p.exchangeOut); err != nil {
			ps[job.Plugin] = refusedPlugin{err}
		} else {
			ps[job.Plugin] = q
		}
		return func() {}, nil
	case p.staged != "" && job != nil:
		dir, err := os.MkdirTemp("", "nuon-plugins-")
		if err != nil {
			return nil, err
		}
		q, err := plugin.Staged(ctx, job, p.staged, filepath.Join(dir, "plugin"))
		if err != nil {
			ps[job.Plugin] = refusedPlugin{err}
		} else {
			q.Runner.SharedNetwork = p.shared
			ps[job.Plugin] = q
		}
		return func() { os.RemoveAll(dir) }, nil
	}
	if len(p.artifacts) == 0 && job == nil {
		return func() {}, p.apply(ps, kubeconfig, tfConfig)
	}
	c, _, err := reg.Client()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nuon-plugins-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := p.applyFetch(ctx, ps, kubeconfig, tfConfig, c, dir); err != nil {
		cleanup()
		return nil, err
	}
	if job != nil {
		ps[job.Plugin] = p.pinned(ctx, c, job, filepath.Join(dir, "pinned"))
	}
	return cleanup, nil
}

// pinnedJob is the job at path when it is a job of a vendor's plugin
// pinned by its desired state; nil otherwise, and for a manifest that
// does not read, which the job itself then reports.
func pinnedJob(path string) *schemas.Job {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	job, err := plugin.DecodeJob(path, data)
	if err != nil || job.Grants == nil {
		return nil
	}
	return job
}

// pinned is the plugin job's manifest pins, or a plugin that fails the
// job with why it was refused.
func (p *processPlugins) pinned(ctx context.Context, c *oci.Client, job *schemas.Job, dir string) reconciler.Plugin {
	var v sigstoresig.Verifier
	if p.key != "" {
		var err error
		if v, err = oci.LoadPublicKey(p.key); err != nil {
			return refusedPlugin{fmt.Errorf("plugin %s: --plugin-key: %w", job.Plugin, err)}
		}
	}
	fp, err := plugin.Pinned(ctx, c, job, v, dir)
	if err != nil {
		return refusedPlugin{err}
	}
	fp.Runner.SharedNetwork = p.shared
	return fp
}

// refusedPlugin is a plugin the job process would not run: each
// operation fails with why.
type refusedPlugin struct{ err error }

func (r refusedPlugin) Apply(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	return nil, r.err
}

func (r refusedPlugin) Destroy(context.Context, *schemas.Job, reconciler.Env) error { return r.err }

// checkPluginComponents refuses to record the plugin name as the release
// of a component that main's nuon.yaml does not declare of type plugin,
// run by that plugin: its job would refuse the artifact anyway.
func checkPluginComponents(ctx context.Context, repo *gitrepo.Repo, name string, records []builder.Record) error {
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return err
	}
	head, err := repo.Ref(builder.MainRef)
	if err != nil {
		return err
	}
	if head.IsZero() {
		return fmt.Errorf("%s has no %s", repo.Location, builder.MainRef)
	}
	app, err := readMainFile(repo, head, schemas.AppFile)
	if err != nil {
		return err
	}
	src, err := schemas.Load(fstest.MapFS{schemas.AppFile: {Data: app}})
	if err != nil {
		return fmt.Errorf("main's %s: %w", schemas.AppFile, err)
	}
	for _, r := range records {
		c, ok := src.Component(r.Component)
		switch {
		case !ok:
			return fmt.Errorf("--component %s: no such component in main's %s", r.Component, schemas.AppFile)
		case c.Type != schemas.TypePlugin || c.Plugin == nil:
			return fmt.Errorf("--component %s: a component of type %s, not plugin: its releases hold no plugin", r.Component, c.Type)
		case c.Plugin.Name != name:
			return fmt.Errorf("--component %s runs plugin %s, not %s (main's %s)", r.Component, c.Plugin.Name, name, schemas.AppFile)
		}
	}
	return nil
}

// readMainFile reads the file name of main's commit head, at most a
// source file's size.
func readMainFile(repo *gitrepo.Repo, head plumbing.Hash, name string) ([]byte, error) {
	c, err := gitobj.ReadCommit(repo.Storer(), head)
	if err != nil {
		return nil, fmt.Errorf("read main: %w", err)
	}
	root, err := gitobj.ReadTree(repo.Storer(), c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("read main: %w", err)
	}
	e, err := root.FindEntry(name)
	if err != nil || !e.Mode.IsFile() {
		return nil, fmt.Errorf("main has no file %s", name)
	}
	return gitobj.ReadBlob(repo.Storer(), e.Hash, schemas.DefaultMaxFileSize)
}
