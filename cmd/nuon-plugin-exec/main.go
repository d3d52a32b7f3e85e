// Command nuon-plugin-exec runs a vendor's plugin inside the plugin's own
// container image on Kubernetes: the first init container of the job's
// pod, from nuon's image, runs it with --copy-to to copy itself into a
// volume the plugin's container mounts read-only (nothing else: no
// network, no credential), and there it feeds the request the agent
// staged to the plugin's stdin and writes its response where the job
// reads it (package plugin/exchange). It links the standard library only:
// the plugin's container holds no nuon binary, no credential and no
// client for anything.
//
//	nuon-plugin-exec --in DIR --out DIR [--timeout DURATION] -- ENTRYPOINT [ARGS...]
//	nuon-plugin-exec --copy-to DIR
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"nuon.dev/nuon/plugin/exchange"
)

func main() {
	var e exchange.Exec
	var timeout time.Duration
	fs := flag.NewFlagSet("nuon-plugin-exec", flag.ContinueOnError)
	fs.StringVar(&e.In, "in", "", "the directory holding the request (read-only)")
	fs.StringVar(&e.Out, "out", "", "the directory the response, the plugin's stderr and its exit go to")
	fs.DurationVar(&timeout, "timeout", 0, "stop the plugin after this long (SIGTERM, then SIGKILL); 0: never")
	fs.Int64Var(&e.MaxResponse, "max-response", exchange.DefaultMaxResponse, "bound on the plugin's stdout")
	copyTo := fs.String("copy-to", "", "copy this executable into DIR, executable by anyone, and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *copyTo != "" {
		if err := exchange.CopySelf(*copyTo); err != nil {
			fmt.Fprintln(os.Stderr, "nuon-plugin-exec:", err)
			os.Exit(1)
		}
		return
	}
	e.Argv = fs.Args()
	if e.In == "" || e.Out == "" || len(e.Argv) == 0 {
		fmt.Fprintln(os.Stderr, "usage: nuon-plugin-exec --in DIR --out DIR [--timeout DURATION] -- ENTRYPOINT [ARGS...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := e.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nuon-plugin-exec:", err)
		os.Exit(1)
	}
}
