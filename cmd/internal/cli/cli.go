// Package cli holds the commands the nuon binaries share. cmd/nuon is the
// whole CLI; cmd/nuon-agent is the install agent alone (agent, verify,
// status), without the plugins, the builder and their libraries, so the
// long-running agent stays small. Commands parse flags and wire packages;
// the work is done in the packages they call.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// ExitError carries an exit code without printing anything more.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// Globals are the flags every command shares, and where output goes.
type Globals struct {
	LogFormat string
	LogLevel  string
	// Git says where the tenant repository's credentials are: the same
	// flags for the agent and every command that opens the repository.
	Git    gitauth.Options
	Stdout io.Writer
	Stderr io.Writer

	gitAuth *gitauth.Auth
}

// GitAuth loads the credentials the --git-* and --ssh-* flags name, once.
// It then removes $NUON_GIT_TOKEN and $NUON_GIT_PASSWORD from the
// process's environment, so that no job or other child process the
// command starts inherits them.
func (g *Globals) GitAuth() (*gitauth.Auth, error) {
	if g.gitAuth != nil {
		return g.gitAuth, nil
	}
	a, err := g.Git.Load(nil)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{gitauth.EnvToken, gitauth.EnvPassword} {
		if err := os.Unsetenv(k); err != nil {
			return nil, fmt.Errorf("remove $%s from the environment: %w", k, err)
		}
	}
	g.gitAuth = a
	return a, nil
}

// Logger is the log/slog logger the global flags ask for, on Stderr.
func (g *Globals) Logger() *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(g.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if g.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(g.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(g.Stderr, opts))
}

// NewRoot makes a root command with the global flags; add builds its
// subcommands.
func NewRoot(root *cobra.Command, stdout, stderr io.Writer, add func(*Globals) []*cobra.Command) *cobra.Command {
	g := &Globals{Stdout: stdout, Stderr: stderr}
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.LogFormat, "log-format", "text", "log format: text or json")
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	g.Git.AddFlags(root.PersistentFlags())
	root.AddCommand(add(g)...)
	return root
}

// Main runs a root command with SIGINT and SIGTERM cancelling its context,
// and exits with its code.
func Main(root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	var ee ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.Code)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
		os.Exit(1)
	}
}

// CheckOutput validates --output.
func CheckOutput(o string) error {
	if o != "text" && o != "json" {
		return fmt.Errorf("--output must be text or json, not %q", o)
	}
	return nil
}

// OpenRepo opens a repository for reading or writing, with the
// credentials the global flags name.
func (g *Globals) OpenRepo(location, cacheDir string) (*gitrepo.Repo, error) {
	auth, err := g.GitAuth()
	if err != nil {
		return nil, err
	}
	opts := []gitrepo.Option{gitrepo.WithCredentials(auth)}
	if cacheDir != "" {
		opts = append(opts, gitrepo.WithCacheDir(cacheDir))
	}
	return gitrepo.Open(location, opts...)
}

// JobPlugins are the component types `nuon job run` applies. The agent
// needs only their names; cmd/nuon checks that its plugins match.
var JobPlugins = []string{schemas.TypeTerraform, schemas.TypeHelm, schemas.TypeManifests}
