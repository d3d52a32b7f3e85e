package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"

	"nuon.dev/nuon/reconciler"
)

// PodMain is Main for a job that runs in a Kubernetes pod (`nuon job run
// --pod MANIFEST`): it runs the job as Main does, then hands the result
// to the Kubernetes runner, which cannot read the pod's files: as the
// last line of out, prefixed ResultLinePrefix, and as the container's
// termination message when it fits. It returns Main's error.
func PodMain(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer) error {
	return podMain(ctx, manifestPath, plugins, artifacts, out, TerminationMessagePath)
}

func podMain(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer, termination string) error {
	if out == nil {
		out = io.Discard
	}
	runErr := Main(ctx, manifestPath, plugins, artifacts, out)
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		return runErr
	}
	var job struct {
		ResultFile string `json:"resultFile"`
	}
	if json.Unmarshal(data, &job) != nil || job.ResultFile == "" {
		return runErr
	}
	res, err := readResult(job.ResultFile)
	if err != nil {
		// No result: the manifest was invalid; the error is in the log.
		return runErr
	}
	line, err := json.Marshal(res)
	if err != nil {
		return errors.Join(runErr, err)
	}
	if len(line) <= maxTerminationMessage {
		// Best effort: the log line is there if this fails.
		_ = os.WriteFile(termination, line, 0o644)
	}
	return errors.Join(runErr, writeResultLine(out, line))
}
