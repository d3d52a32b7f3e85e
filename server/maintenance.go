package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Repository maintenance: the server keeps its own repository healthy.
//
// Every accepted push is written as loose objects (Status pushes), and a
// fleet pushes for years. Every MaintenanceInterval (default 1h; negative
// turns it off) the server runs, as child processes at the lowest CPU and
// I/O priority (nice 19, ionice idle), git's own incremental maintenance:
//
//  1. git repack --geometric=2 -d --write-midx: the loose objects go into
//     one new pack and packs are rolled up only as far as a geometric
//     progression needs (each pack at least twice the size of the ones
//     after it), so a run costs what arrived since the last, not the
//     repository; a multi-pack index lets readers find an object in one
//     lookup. No object is dropped (no -a, no prune): an object a push is
//     writing is never at risk, and prune-packed removes only loose
//     objects that a pack now holds;
//  2. git maintenance run --task=commit-graph --task=pack-refs: an
//     incremental (split) commit-graph of what is reachable, and loose
//     refs packed into packed-refs.
//
// None of it blocks a poll (answered from the ref table), a fetch (its
// git cat-file and pack-objects find packs as they come and go) or a push
// (its objects are written beside the repack; its ref is updated under
// git's ref lock, which pack-refs takes too, and waits as git does). The
// server sets gc.auto=0 in the repository unless the operator set it, so
// the git gc --auto after each check of main no longer starts a full gc
// in the follow loop: maintenance owns repacking. Each run is logged, and
// its duration, result and the repository's loose objects and packs
// after it are metrics (nuon_server_maintenance_*,
// nuon_server_repository_*). TestMaintenanceBesidePushes pushes and polls
// while maintenance runs back to back.

// DefaultMaintenanceInterval is how often the server maintains its
// repository by default.
const DefaultMaintenanceInterval = time.Hour

// maintenanceTask is one step of a maintenance run: its name (the metrics'
// label) and git's arguments.
type maintenanceTask struct {
	name string
	args []string
}

var maintenanceTasks = []maintenanceTask{
	{"geometric-repack", []string{"repack", "--geometric=2", "-d", "--write-midx", "--quiet"}},
	{"commit-graph", []string{"maintenance", "run", "--task=commit-graph", "--quiet"}},
	{"pack-refs", []string{"maintenance", "run", "--task=pack-refs", "--quiet"}},
}

// maintenance is the server's maintenance loop: one run at a time.
type maintenance struct {
	mu   sync.Mutex // held by a run
	stop context.CancelFunc
	done chan struct{}
}

// repoStats is what git count-objects -v says of the repository.
type repoStats struct {
	Loose, Packs, PackBytes int64
}

// startMaintenance prepares the repository (gc.auto) and starts the
// maintenance loop, until Close.
func (s *Server) startMaintenance(ctx context.Context) {
	if s.cfg.MaintenanceInterval < 0 {
		return
	}
	if _, err := gitOutput(ctx, s.cfg.Dir, nil, "config", "--get", "gc.auto"); err != nil {
		// Unset: maintenance repacks, not git gc --auto.
		if err := git(ctx, s.cfg.Dir, "config", "gc.auto", "0"); err != nil {
			s.log.Warn("maintenance: set gc.auto", "error", err)
		}
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.maint.stop, s.maint.done = cancel, make(chan struct{})
	go func() {
		defer close(s.maint.done)
		t := time.NewTicker(s.cfg.MaintenanceInterval)
		defer t.Stop()
		for {
			select {
			case <-mctx.Done():
				return
			case <-t.C:
				s.Maintain(mctx)
			}
		}
	}()
}

// stopMaintenance ends the loop and a run in progress (its git process
// group is killed; what git left is its own temporary files).
func (s *Server) stopMaintenance() {
	if s.maint.stop != nil {
		s.maint.stop()
		<-s.maint.done
	}
}

// Maintain runs one maintenance of the repository now (see the package's
// Repository maintenance), after the one running if any, and returns the
// first task's error; the other tasks run anyway.
func (s *Server) Maintain(ctx context.Context) error {
	s.maint.mu.Lock()
	defer s.maint.mu.Unlock()
	start := time.Now()
	var first error
	for _, task := range maintenanceTasks {
		if ctx.Err() != nil {
			return ctx.Err() // stopping: the rest waits for the next start
		}
		t0 := time.Now()
		err := runLowPriority(ctx, s.cfg.Dir, task.args...)
		result := resultOK
		if err != nil {
			result = resultError
			if first == nil {
				first = fmt.Errorf("maintenance %s: %w", task.name, err)
			}
			if ctx.Err() == nil {
				s.log.Warn("maintenance", "task", task.name, "error", err)
			}
		}
		s.metrics.maintenanceRuns.WithLabelValues(task.name, result).Inc()
		s.metrics.maintenanceDuration.WithLabelValues(task.name).Observe(time.Since(t0).Seconds())
	}
	st, err := countObjects(ctx, s.cfg.Dir)
	if err == nil {
		s.metrics.looseObjects.Set(float64(st.Loose))
		s.metrics.packs.Set(float64(st.Packs))
		s.metrics.packBytes.Set(float64(st.PackBytes))
	}
	s.log.Info("maintenance", "duration", time.Since(start).Round(time.Millisecond), "loose_objects", st.Loose, "packs", st.Packs, "pack_bytes", st.PackBytes, "error", first)
	return first
}

// runLowPriority runs git in dir at the lowest CPU and I/O priority, in
// its own process group, killed whole when ctx ends.
func runLowPriority(ctx context.Context, dir string, args ...string) error {
	argv := append([]string{"git"}, args...)
	if p, err := exec.LookPath("ionice"); err == nil {
		argv = append([]string{p, "-c", "3"}, argv...)
	}
	if p, err := exec.LookPath("nice"); err == nil {
		argv = append([]string{p, "-n", "19"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("git %s: %w", strings.Join(args, " "), ctx.Err())
	}
}

// countObjects reads git count-objects -v.
func countObjects(ctx context.Context, dir string) (repoStats, error) {
	b, err := gitOutput(ctx, dir, nil, "count-objects", "-v")
	if err != nil {
		return repoStats{}, err
	}
	out := string(b)
	var st repoStats
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "count":
			st.Loose = n
		case "packs":
			st.Packs = n
		case "size-pack":
			st.PackBytes = n * 1024
		}
	}
	if st == (repoStats{}) && !strings.Contains(out, "count:") {
		return st, errors.New("git count-objects: no count")
	}
	return st, nil
}
