package server

import (
	"context"
	"runtime"
	"syscall"
	"time"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// LoadRollouts has the rollout controller read main's rollouts again, as
// it does when main moves: the benchmark of a main change times it.
func (s *Server) LoadRollouts(ctx context.Context) error {
	r := s.rollouts
	r.mu.Lock()
	defer r.mu.Unlock()
	repo, err := gitrepo.Open(s.cfg.Dir)
	if err != nil {
		return err
	}
	main, err := revParse(ctx, s.cfg.Dir, schemas.MainRef)
	if err != nil {
		return err
	}
	return r.load(ctx, repo, main)
}

// EvaluateRolloutsCPU is EvaluateRollouts on a thread of its own, and
// the CPU time that thread spent: the controller's own work, apart from
// what the server does at the same time for agents. A decision's render
// runs on other threads too, so its CPU is not all counted.
func (s *Server) EvaluateRolloutsCPU(ctx context.Context) ([]*schemas.RolloutState, time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadCPU()
	out, err := s.rollouts.evaluate(ctx, true)
	return out, threadCPU() - before, err
}

// threadCPU is the CPU time of the calling thread (Linux's
// RUSAGE_THREAD).
func threadCPU() time.Duration {
	const rusageThread = 1
	var ru syscall.Rusage
	_ = syscall.Getrusage(rusageThread, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MillionRepo is millionRepo, for the external test package's benchmarks.
var MillionRepo = millionRepo
