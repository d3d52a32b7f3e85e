package jobs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/reconciler"
)

// The agent, not the pod, does what needs the install registry for a
// job of a vendor's plugin, in either form: it extracts the job's
// artifacts into the run's staged directory, StagedDir of the job's
// directory, on the volume of Kube.VolumeMounts that holds it (the
// agent's workdir, --job-state-claim), and writes there the plugin's
// request (the image form: plugin.Process.Prepare) or the plugin's
// artifact as it verified it (the process form: plugin.Artifact.Stage).
// The pod mounts that directory alone, read-only, by subPath. No
// container of the pod then needs the network for nuon's own sake.

// StagedDir is the staged directory of the job of a vendor's plugin
// whose directory is dir, as the pod mounts it at PodPluginIn.
func StagedDir(dir string) string { return filepath.Join(dir, "plugin-in") }

// ErrNoStagingVolume means a job of a vendor's plugin has no volume
// shared with the agent to stage what it reads on.
var ErrNoStagingVolume = errors.New("no volume shared with the jobs to stage the plugin's request on (nuon agent --job-state-claim)")

// stagedMount is the mount of the directory staged alone, through the
// volume of Kube.VolumeMounts that holds it, and that volume. staged must
// be an absolute, clean path under one of those mounts, with no symbolic
// link between the mount and it: the pod's subPath is computed from the
// path, so a link would hand the plugin another directory of the volume
// than the one the agent wrote.
func (k *Kube) stagedMount(staged string) (corev1.VolumeMount, corev1.Volume, error) {
	var none corev1.VolumeMount
	if !filepath.IsAbs(staged) || filepath.Clean(staged) != staged || slices.Contains(strings.Split(filepath.ToSlash(staged), "/"), "..") {
		return none, corev1.Volume{}, fmt.Errorf("staged directory %q: not an absolute, clean path", staged)
	}
	mount, ok := stateMount(staged, k.VolumeMounts)
	if !ok {
		return none, corev1.Volume{}, fmt.Errorf("staged directory %s: %w", staged, ErrNoStagingVolume)
	}
	i := slices.IndexFunc(k.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 {
		return none, corev1.Volume{}, fmt.Errorf("staged directory %s: volume %s of Kube.VolumeMounts is not in Kube.Volumes: %w", staged, mount.Name, ErrNoStagingVolume)
	}
	var root string
	for _, m := range k.VolumeMounts {
		if m.Name == mount.Name && (staged == path.Clean(m.MountPath) || strings.HasPrefix(staged, path.Clean(m.MountPath)+"/")) {
			root = path.Clean(m.MountPath)
			break
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return none, corev1.Volume{}, fmt.Errorf("staged directory %s: the volume's mount: %w", staged, err)
	}
	real, err := filepath.EvalSymlinks(staged)
	if err != nil {
		return none, corev1.Volume{}, fmt.Errorf("staged directory %s: %w", staged, err)
	}
	rel, _ := filepath.Rel(root, staged)
	if real != filepath.Join(realRoot, rel) {
		return none, corev1.Volume{}, fmt.Errorf("staged directory %s is %s: a symbolic link on its way from the volume's mount %s", staged, real, root)
	}
	return mount, k.Volumes[i], nil
}

// stage writes, for a job of a vendor's plugin, what its pod reads into
// the run's staged directory (StagedDir), made afresh, readable by the
// plugin's user, and keeps its mount for the pod: the job's artifacts,
// and the plugin's request (the image form) or the plugin's artifact, as
// admitted (the process form). It runs once nothing of an earlier run of
// the job is active (clearFinished). A failure removes what it wrote and
// fails the job before any object of it exists.
func (r *kubeRun) stage(ctx context.Context) error {
	if r.granted == nil {
		return nil
	}
	k := r.k
	form := "process form"
	if r.image != nil {
		form = "image form"
	}
	if k.PluginArtifacts == nil {
		return fmt.Errorf("%w: plugin %s in its %s: the runner has no Kube.PluginArtifacts to stage the job's artifacts from", ErrJobFailed, r.job.Plugin, form)
	}
	// The job's directory first: nothing is removed or written through
	// a link.
	if _, _, err := k.stagedMount(r.dir); err != nil {
		return fmt.Errorf("%w: plugin %s in its %s: %w", ErrJobFailed, r.job.Plugin, form, err)
	}
	staged := StagedDir(r.dir)
	r.staged = true
	if err := os.RemoveAll(staged); err != nil {
		return err
	}
	if err := os.Mkdir(staged, 0o755); err != nil {
		return err
	}
	mount, vol, err := k.stagedMount(staged)
	if err != nil {
		return fmt.Errorf("%w: plugin %s in its %s: %w", ErrJobFailed, r.job.Plugin, form, err)
	}
	env := reconciler.Env{StateDir: PodPluginState, Artifacts: k.PluginArtifacts, Log: &logWriter{r.logger}}
	// The job as the pod's manifest has it: its result file in the pod.
	job := r.job
	job.ResultFile = PodResultFile
	if r.image != nil {
		p := &plugin.Process{Manifest: &r.image.Manifest, Granted: *r.granted}
		err = p.Prepare(ctx, &job, env, staged, PluginContainerPaths)
	} else {
		p := &plugin.Process{Manifest: &r.artifact.Manifest, Granted: *r.granted}
		if err = r.artifact.Stage(ctx, staged); err == nil {
			err = p.Stage(ctx, &job, env, staged)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			// Stopped, not failed: the job runs again.
			return fmt.Errorf("stage plugin %s: %w", r.job.Plugin, ctx.Err())
		}
		return fmt.Errorf("%w: plugin %s: %w", ErrJobFailed, r.job.Plugin, err)
	}
	if err := readableTree(staged); err != nil {
		return err
	}
	mount.MountPath, mount.ReadOnly = PodPluginIn, true
	r.form = &stagedForm{image: r.image, in: mount, volume: vol}
	r.logger.Info("plugin job staged", "form", form, "dir", staged, "sub_path", mount.SubPath)
	return nil
}

// stagedForm is what the pod of a job of a vendor's plugin takes from its
// run: the staged directory's mount and volume, and the admitted image
// in the image form (nil in the process form).
type stagedForm struct {
	image  *plugin.Image
	in     corev1.VolumeMount
	volume corev1.Volume
}

// unstage removes the run's staged directory, if the run made one.
func (r *kubeRun) unstage() {
	if r.staged {
		unstage(r.dir, r.logger)
	}
}

// unstage removes the staged directory of the job whose directory is
// dir, if there is one.
func unstage(dir string, logger *slog.Logger) {
	if err := os.RemoveAll(StagedDir(dir)); err != nil {
		logger.Warn("remove the staged plugin request", "error", err)
	}
}

// readableTree makes the tree at root readable by anyone (directories
// 0755, files keep their execute bits and gain read): the plugin's
// container runs as PluginUser, whoever the agent runs as.
func readableTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return nil
		case d.IsDir():
			return os.Chmod(p, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&0o111|0o444)
	})
}

// logWriter writes what the staging logs (artifact extraction) to the
// runner's logger.
type logWriter struct {
	l interface{ Info(string, ...any) }
}

func (w *logWriter) Write(b []byte) (int, error) {
	if s := strings.TrimSpace(string(b)); s != "" {
		w.l.Info("staging", "message", s)
	}
	return len(b), nil
}
