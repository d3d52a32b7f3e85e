package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"nuon.dev/nuon/cmd/internal/cli"
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
	cmd.AddCommand(newPluginServeCmd(g), newPluginTestCmd(g))
	return cmd
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
	var jobFile, output string
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
                            health after apply is Ready
  an operation in protocol 999  unsupported

The plugin gets the capabilities its manifest asks for, drawn from this
command's environment and --env. It exits 1 when a check fails.`,
		Example: `  mkdir -p /tmp/zones
  nuon plugin test --env NUON_ZONE_DIR=/tmp/zones \
      --job fixtures/plugins/zonefile/job.json fixtures/plugins/zonefile/zonefile

  # a built-in, served by this binary
  nuon plugin test --job job.json $(command -v nuon) plugin serve terraform`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(output); err != nil {
				return err
			}
			k := plugintest.Kit{Path: args[0], Args: args[1:], Environ: os.Environ(), Timeout: timeout}
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
	specs  []string
	grants []string
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
	f.StringArrayVar(&p.grants, "plugin-grant", nil, "capabilities granted to an executable plugin: NAME=network,secrets,cloudRole,writableState,env:VAR (repeatable); a built-in gets what it needs")
}

// apply replaces or adds the plugins --plugin-process names.
func (p *processPlugins) apply(ps map[string]reconciler.Plugin, kubeconfig, tfConfig string) error {
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
		ps[name] = &plugin.Process{Runner: plugin.Runner{Path: path}, Granted: grants[name]}
	}
	return nil
}
