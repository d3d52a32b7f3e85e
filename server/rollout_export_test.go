package server

import (
	"context"

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
