// Command nuon-prereceive is the tenant server's pre-receive check alone:
// git receive-pack runs it for every status push, in the repository, with
// the install and its key in the environment (see server.RunPreReceive).
// `nuon server` uses it when it lies beside the nuon binary, else runs
// `nuon server pre-receive`, which does the same.
//
// It exists because a push starts it once: the whole nuon binary (about
// 150 MB, every plugin linked) took 136 ms to start on the project's
// loaded 2-core machine against 14 ms for this one (20 runs each, see the
// server package doc), which bounded status write-back.
package main

import (
	"context"
	"os"

	"nuon.dev/nuon/server"
)

func main() {
	if err := server.RunPreReceive(context.Background(), os.Stdin, os.Stderr, os.Getenv); err != nil {
		os.Exit(1)
	}
}
