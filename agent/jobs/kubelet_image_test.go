package jobs

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/jobrun"
)

// The test kubelet runs a container of an image (any image but nuon's, a
// reference by digest) as a container runtime would, within what this
// machine allows a test running as root: the image pulled from its
// registry by digest and its layers unpacked into a root of its own (once
// per digest, as a node keeps the images it pulled); this
// test binary, as containerProcess, in a mount namespace of its own, binds
// the container's volumes into that root (read-only where the pod says
// so) and /dev/null, /dev/zero and /dev/urandom, makes the root read-only
// when the pod asks a read-only root filesystem, chroots into it, drops to
// the container's user and group, and execs its command. The container
// thus sees its image and its volumes and nothing of the host's files; it
// shares the host's network, processes and kernel (no network, PID or
// user namespace, no seccomp profile, no dropped capabilities beyond
// those of a non-root user).
const (
	envContainer = "NUON_JOBS_TEST_CONTAINER"
	// envExecutor names the plugin executor the executor container copies.
	envExecutor = "NUON_JOBS_TEST_EXECUTOR"
)

// containerSpec is what containerProcess runs.
type containerSpec struct {
	Root         string           `json:"root"`
	Mounts       []containerMount `json:"mounts"`
	ReadOnlyRoot bool             `json:"readOnlyRoot"`
	UID, GID     int
	Argv         []string `json:"argv"`
	Env          []string `json:"env"`
}

type containerMount struct {
	Host, Path string
	ReadOnly   bool
}

// imageCommand is the command that runs container c of pod p from its
// image: pulled, unpacked into a root of its own, run by
// containerProcess.
func (k *kubelet) imageCommand(ctx context.Context, p *corev1.Pod, c *corev1.Container, dir string, vols map[string]string, env []string) (*exec.Cmd, error) {
	ref, err := name.NewDigest(c.Image)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	// Unpacked once per digest, as a node keeps an image it pulled; each
	// container's root is that tree, bound read-only when it asks.
	root := filepath.Join(k.root, "images", strings.TrimPrefix(ref.DigestStr(), "sha256:"))
	k.mu.Lock()
	if _, err := os.Stat(root); err != nil {
		rc := mutate.Extract(img)
		err = unpack(rc, root+".tmp")
		rc.Close()
		if err == nil {
			err = os.Rename(root+".tmp", root)
		}
		if err != nil {
			k.mu.Unlock()
			return nil, fmt.Errorf("unpack %s: %w", ref, err)
		}
	}
	k.mu.Unlock()
	spec := containerSpec{Root: root, Env: append(append([]string{}, cf.Config.Env...), env...),
		ReadOnlyRoot: c.SecurityContext != nil && ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false)}
	spec.Argv = c.Command
	if len(spec.Argv) == 0 {
		spec.Argv = append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...)
	}
	if sc := c.SecurityContext; sc != nil {
		spec.UID, spec.GID = int(ptr.Deref(sc.RunAsUser, 0)), int(ptr.Deref(sc.RunAsGroup, 0))
	}
	if spec.UID == 0 {
		return nil, errors.New("the test kubelet runs no image as root")
	}
	for _, m := range c.VolumeMounts {
		host := vols[m.Name]
		if m.SubPath != "" {
			host = filepath.Join(host, m.SubPath)
			if err := os.MkdirAll(host, 0o777); err != nil {
				return nil, err
			}
		}
		spec.Mounts = append(spec.Mounts, containerMount{Host: host, Path: path.Clean(m.MountPath), ReadOnly: m.ReadOnly})
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "container-"+c.Name+".json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{envContainer + "=" + file}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	return cmd, nil
}

// unpack writes a flattened image's tar into root.
func unpack(r io.Reader, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(root, filepath.FromSlash(path.Clean("/"+h.Name)))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(target)
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			_ = os.Remove(target)
			if err := os.Link(filepath.Join(root, filepath.FromSlash(path.Clean("/"+h.Linkname))), target); err != nil {
				return err
			}
		}
	}
}

// containerProcess is this test binary as a container's first process:
// see the package's test kubelet. It never returns when it runs the
// container.
func containerProcess(file string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "container:", err)
		return 128
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fail(err)
	}
	var s containerSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return fail(err)
	}
	// Nothing mounted here reaches the host's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("private mounts: %w", err))
	}
	if err := syscall.Mount(s.Root, s.Root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fail(err)
	}
	bind := func(host, target string, dir, ro bool) error {
		if dir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(target, nil, 0o644); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		}
		if err := syscall.Mount(host, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", target, err)
		}
		if ro {
			return syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, "")
		}
		return nil
	}
	for _, m := range s.Mounts {
		if err := bind(m.Host, filepath.Join(s.Root, m.Path), true, m.ReadOnly); err != nil {
			return fail(err)
		}
	}
	for _, d := range []string{"/dev/null", "/dev/zero", "/dev/urandom"} {
		if err := bind(d, filepath.Join(s.Root, d), false, false); err != nil {
			return fail(err)
		}
	}
	if s.ReadOnlyRoot {
		if err := syscall.Mount("", s.Root, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fail(fmt.Errorf("read-only root: %w", err))
		}
	}
	if err := syscall.Chroot(s.Root); err != nil {
		return fail(err)
	}
	if err := os.Chdir("/"); err != nil {
		return fail(err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fail(err)
	}
	if err := syscall.Setgid(s.GID); err != nil {
		return fail(err)
	}
	if err := syscall.Setuid(s.UID); err != nil {
		return fail(err)
	}
	return fail(syscall.Exec(s.Argv[0], s.Argv, s.Env))
}

// pluginExecutor builds cmd/nuon-plugin-exec once, static, as the job's
// image holds it, and names it in envExecutor for the pods.
func pluginExecutor(t testing.TB) string {
	t.Helper()
	executorOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nuon-plugin-exec-")
		if err != nil {
			executorErr = err
			return
		}
		executorPath = filepath.Join(dir, jobrun.ExecutorName)
		cmd := exec.Command("go", "build", "-o", executorPath, "../../cmd/nuon-plugin-exec")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			executorErr = fmt.Errorf("go build nuon-plugin-exec: %v\n%s", err, out)
		}
	})
	if executorErr != nil {
		t.Fatal(executorErr)
	}
	t.Setenv(envExecutor, executorPath)
	return executorPath
}

var (
	executorOnce sync.Once
	executorPath string
	executorErr  error
)

// argAfter is the argument after flag in os.Args, or "".
func argAfter(flag string) string {
	for i, a := range os.Args[:len(os.Args)-1] {
		if a == flag {
			return os.Args[i+1]
		}
	}
	return ""
}
