package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// stageTree is a volume mounted at root holding a real directory, links
// out of it and within it, and a runner with that volume.
func stageTree(t testing.TB) (*Kube, string, string) {
	t.Helper()
	root, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{"jobs/a/plugin-in", "jobs/b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"jobs/out": outside, "jobs/in": filepath.Join(root, "jobs/a"), "jobs/rel": "a"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	k := &Kube{Volumes: []corev1.Volume{{Name: "work"}}, VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: root}}}
	return k, root, outside
}

// TestStagedMount: a staged directory is mounted by the subPath its path
// names only when no link on its way could make that another directory.
func TestStagedMount(t *testing.T) {
	k, root, outside := stageTree(t)
	for _, tt := range []struct {
		name, dir string
		sub       string // "" when refused
		refusal   string
	}{
		{"the job's own", root + "/jobs/a/plugin-in", "jobs/a/plugin-in", ""},
		{"the mount itself", root, "", ""},
		{"a link out", root + "/jobs/out", "", "symbolic link"},
		{"a link within", root + "/jobs/in/plugin-in", "", "symbolic link"},
		{"a relative link within", root + "/jobs/rel", "", "symbolic link"},
		{"dot-dot", root + "/jobs/../../x", "", "not an absolute, clean path"},
		{"dot-dot cleaned away", filepath.Clean(root+"/jobs/../..") + "/" + filepath.Base(outside), "", "--job-state-claim"},
		{"relative", "jobs/a", "", "not an absolute, clean path"},
		{"missing", root + "/jobs/none", "", "no such file"},
		{"outside", outside, "", "--job-state-claim"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, v, err := k.stagedMount(tt.dir)
			if tt.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refusal) {
					t.Fatalf("stagedMount(%s) = %+v, %v; want refused: %q", tt.dir, m, err, tt.refusal)
				}
				return
			}
			if err != nil || m.Name != "work" || v.Name != "work" || m.SubPath != tt.sub {
				t.Fatalf("stagedMount(%s) = %+v, %+v, %v; want subPath %q of work", tt.dir, m, v, err, tt.sub)
			}
		})
	}
	// A volume mounted but not in Volumes is refused too.
	k2 := *k
	k2.Volumes = nil
	if _, _, err := k2.stagedMount(root + "/jobs/a/plugin-in"); err == nil || !strings.Contains(err.Error(), "--job-state-claim") {
		t.Errorf("a mount without its volume: %v", err)
	}
}

// FuzzStagedMount: whatever path it is given, an accepted staged
// directory is, followed through every link, the directory its subPath
// names in the volume.
func FuzzStagedMount(f *testing.F) {
	for _, s := range []string{"/jobs/a/plugin-in", "/jobs/out", "/jobs/in/plugin-in", "/jobs/rel/plugin-in", "/jobs/../jobs/a", "//jobs/a", "/jobs/a/", "/../", "/jobs/b", ""} {
		f.Add(s)
	}
	k, root, _ := stageTree(f)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, suffix string) {
		m, _, err := k.stagedMount(root + suffix)
		if err != nil {
			return
		}
		if filepath.IsAbs(m.SubPath) || strings.Contains("/"+m.SubPath+"/", "/../") {
			t.Fatalf("%q: subPath %q", suffix, m.SubPath)
		}
		real, err := filepath.EvalSymlinks(root + suffix)
		if err != nil || real != filepath.Join(realRoot, m.SubPath) {
			t.Fatalf("%q accepted as subPath %q, but it is %s (%v)", suffix, m.SubPath, real, err)
		}
	})
}
