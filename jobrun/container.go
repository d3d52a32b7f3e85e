package jobrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/plugin/exchange"
	"nuon.dev/nuon/reconciler"
)

// ExecutorName is the executor's file name (cmd/nuon-plugin-exec), in
// the job's image beside nuon and in the volume it is copied to.
const ExecutorName = exchange.ExecutorName

// PrepareOptions are the image form's first step (`nuon job run --pod
// --plugin-prepare`), in the container of the job's pod that holds the
// registry's pull credential and the vendor's key; the plugin's own
// container, which holds neither, runs next.
type PrepareOptions struct {
	// Manifest is the job manifest's path.
	Manifest string
	// Client reaches the install registry; Key is the vendor's key.
	Client *oci.Client
	Key    signature.Verifier
	// Artifacts extracts the job's other artifacts.
	Artifacts reconciler.ArtifactSource
	// In is where this container writes the exchange's in directory;
	// Paths is where the plugin's container sees it and what else it
	// mounts.
	In    string
	Paths plugin.ContainerPaths
	// Executor is the executor to copy into Bin, the volume the plugin's
	// container runs it from.
	Executor, Bin string
}

// PreparePlugin verifies the plugin image the job pins again
// (plugin.AdmitImage: the runner admitted it before any object existed;
// the pod checks that what it runs is still what was admitted), writes
// the request for the plugin's container (plugin.Process.Prepare), and
// copies the executor for it. A refusal is written for the job's last
// step to report in the job's result, and logged to log; PreparePlugin
// then returns nil, as the job's outcome is the result. Its error is a
// failure to prepare at all (no manifest, a volume that cannot be
// written), which fails the pod.
//
// The Kubernetes runner no longer runs it in the pod: a container that
// pulls from the install registry would need the pod's NetworkPolicy to
// let out DNS and the registry, which the plugin's container of the same
// pod would then reach too. The agent stages the request itself
// (agent/jobs, "Plugin images"). It remains behind `nuon job run
// --plugin-prepare` only.
func PreparePlugin(ctx context.Context, o PrepareOptions, log io.Writer) error {
	if err := copyExecutor(o.Executor, filepath.Join(o.Bin, ExecutorName)); err != nil {
		return err
	}
	data, err := os.ReadFile(o.Manifest)
	if err != nil {
		return fmt.Errorf("read manifest: %w", err)
	}
	job, err := plugin.DecodeJob(o.Manifest, data)
	if err != nil {
		return err
	}
	p := &plugin.Process{}
	img, granted, err := plugin.AdmitImage(ctx, o.Client, job, o.Key)
	if err == nil {
		p.Manifest, p.Granted = &img.Manifest, granted
		err = p.Prepare(ctx, job, reconciler.Env{StateDir: o.Paths.State, Artifacts: o.Artifacts, Log: log}, o.In, o.Paths)
	} else {
		err = (&plugin.Process{}).Refuse(o.In, err)
	}
	if err != nil {
		fmt.Fprintf(log, "plugin %s refused: %v\n", job.Plugin, err)
		return nil
	}
	fmt.Fprintf(log, "plugin %s %s prepared: image %s, granted %+v\n", job.Plugin, img.Manifest.Version, img.Ref, granted)
	return nil
}

// copyExecutor copies the executor to dst, executable by anyone.
func copyExecutor(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("the plugin executor: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o555)
	if err != nil {
		return fmt.Errorf("the plugin executor: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("the plugin executor: %w", err)
	}
	return out.Close()
}
