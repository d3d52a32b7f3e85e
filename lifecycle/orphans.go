package lifecycle

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// reapOrphans kills the processes a killed run of this command left
// working in dir: terraform-exec runs terraform with a parent-death
// signal, so when `nuon install create` is killed its terraform dies at
// once, but the provider plugins terraform started do not — they wait for
// a terraform that will never call again, holding the module folder open.
// terraform-exec also starts terraform in a process group of its own,
// which its providers join: a process counts as left behind when its
// working directory is in dir and the leader of its group is gone, so a
// run of this install that is still going (its terraform alive) is never
// touched. It reads /proc; elsewhere it does nothing.
func reapOrphans(dir string) []int {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !workingIn(pid, dir) {
			continue
		}
		if pgid := groupOf(pid); pgid <= 0 || pgid == pid || syscall.Kill(pgid, 0) == nil {
			continue // its group's leader is alive, or it leads one
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	return killed
}

// workingIn reports whether process pid's working directory is dir or
// below it.
func workingIn(pid int, dir string) bool {
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return false
	}
	return cwd == dir || strings.HasPrefix(cwd, dir+string(filepath.Separator))
}

// groupOf is the process group of process pid from /proc/pid/stat, or 0.
func groupOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0
	}
	pgid, _ := strconv.Atoi(f[2])
	return pgid
}
