package lifecycle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestReapOrphans leaves a process working in a module folder with its
// parent gone (as a provider whose terraform was killed) beside one whose
// parent still works there (a live run): only the first is stopped.
func TestReapOrphans(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "module")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	// The orphan: sh leads a process group (as terraform-exec starts
	// terraform), starts sleep in the background and exits, so sleep works
	// in mod with its group's leader gone.
	orphan := exec.Command("sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!")
	orphan.Dir = mod
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := orphan.Output()
	if err != nil {
		t.Fatal(err)
	}
	var opid int
	if _, err := fmt.Sscan(string(out), &opid); err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(opid, syscall.SIGKILL) })
	// The live run: a group leader working in mod with its own child
	// there.
	live := exec.Command("sh", "-c", "sleep 300; true")
	live.Dir = mod
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-live.Process.Pid, syscall.SIGKILL); _ = live.Wait() })
	// And a process elsewhere is never touched.
	other := exec.Command("sleep", "300")
	other.Dir = dir
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	time.Sleep(200 * time.Millisecond)

	killed := reapOrphans(mod)
	if !slices.Contains(killed, opid) {
		t.Errorf("reaped %v, want the orphan %d among them", killed, opid)
	}
	if len(killed) != 1 {
		t.Errorf("reaped %v, want only the orphan %d (not the live run's leader %d or its child, not %d working elsewhere)",
			killed, opid, live.Process.Pid, other.Process.Pid)
	}
	if syscall.Kill(live.Process.Pid, 0) != nil || syscall.Kill(other.Process.Pid, 0) != nil {
		t.Error("a process that was not left behind is gone")
	}
}
