package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"nuon.dev/nuon/reconciler"
)

// What a job's pod hands its runner besides its files.
const (
	// ResultLinePrefix starts the line of a job's output that holds its
	// result.
	ResultLinePrefix = "nuon-result: "
	// TerminationMessagePath is where a container's termination message
	// goes by default.
	TerminationMessagePath = "/dev/termination-log"
	// MaxTerminationMessage is Kubernetes' limit for one container.
	MaxTerminationMessage = 4096
)

// PodMain is Main for a job that runs in a Kubernetes pod (`nuon job run
// --pod MANIFEST`): it runs the job as Main does, then hands the result
// to the Kubernetes runner, which cannot read the pod's files: as the
// last line of out, prefixed ResultLinePrefix, and as the container's
// termination message when it fits. It returns Main's error.
func PodMain(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer, opts ...Option) error {
	return podMain(ctx, manifestPath, plugins, artifacts, out, TerminationMessagePath, opts...)
}

func podMain(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer, termination string, opts ...Option) error {
	if out == nil {
		out = io.Discard
	}
	res, runErr := run(ctx, manifestPath, plugins, artifacts, out, opts)
	if res == nil {
		// No result: the manifest was invalid; the error is in the log.
		return runErr
	}
	line, err := json.Marshal(res)
	if err != nil {
		return errors.Join(runErr, err)
	}
	if len(line) <= MaxTerminationMessage {
		// Best effort: the log line is there if this fails.
		_ = os.WriteFile(termination, line, 0o644)
	}
	_, err = fmt.Fprintf(out, "%s%s\n", ResultLinePrefix, line)
	return errors.Join(runErr, err)
}
