// Command nuon is the one CLI of nuon: the tenant renders installs' desired
// state, vendor CI builds and releases artifacts, and each install's agent
// applies its state and reports back. See `nuon --help`.
package main

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
)

// exitError carries an exit code without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(os.Stdout, os.Stderr)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "nuon:", err)
		os.Exit(1)
	}
}

// globals are the flags every command shares.
type globals struct {
	logFormat string
	logLevel  string
	stdout    io.Writer
	stderr    io.Writer
}

func (g *globals) logger() *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(g.logLevel))
	opts := &slog.HandlerOptions{Level: level}
	if g.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(g.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(g.stderr, opts))
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "nuon",
		Short: "Ship one application into thousands of customer cloud accounts with git",
		Long: `nuon keeps every customer install of a vendor's application in one git
repository. People promote versions with pull requests on main; vendor CI
records releases; the tenant renders each install's desired state into signed
commits on refs/heads/nuon/installs/<id>; each install's agent pulls only its
own ref, verifies the signature, applies the difference with plugin jobs and
writes signed status to refs/heads/nuon/status/<id>.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(
		newRenderCmd(g),
		newVerifyCmd(g),
		newAgentCmd(g),
		newJobCmd(g),
		newStatusCmd(g),
		newKeygenCmd(g),
		newBuildCmd(g),
		newReleaseCmd(g),
	)
	return root
}

// outputFlag validates --output.
func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return fmt.Errorf("--output must be text or json, not %q", o)
	}
	return nil
}
