package builder

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/schemas"
)

// Serve takes build requests from the tenant server through c, parallel
// at a time, builds each (BuildPhases) and answers it, until ctx ends.
//
// Each request is taken under a lease of a.Lease, renewed every third of
// it with the build's phase. When the server says the lease is gone (it
// expired, and the request went to another agent), the build is cut
// short and not answered. When the server cannot be reached (it is
// restarting: its queue is on git refs, it keeps the request), renewals
// and the answer are tried again until it is back. Network errors when
// taking are retried after a pause; a refused or failed build is answered
// with its error. A build cut short because ctx ended is not answered:
// its lease expires and the server queues it again.
func (a *Agent) Serve(ctx context.Context, c *buildreq.Client, parallel int) error {
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if parallel < 1 {
		parallel = 1
	}
	lease := a.lease()
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sub, err := c.Next(ctx, 25, int(lease/time.Second))
				if err != nil {
					if ctx.Err() == nil {
						log.Warn("take a build request", "error", err)
						sleep(ctx, time.Second)
					}
					continue
				}
				if sub == nil {
					continue
				}
				a.answer(ctx, c, *sub, log)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (a *Agent) lease() time.Duration {
	if a.Lease <= 0 {
		return schemas.DefaultBuildLease
	}
	return min(max(a.Lease.Round(time.Second), schemas.MinBuildLease), schemas.MaxBuildLease)
}

// maxAnswerTries bounds how long an answer is tried (about 10 minutes
// with the pauses between tries).
const maxAnswerTries = 60

// answer builds one request, keeping its lease, and reports the outcome.
func (a *Agent) answer(ctx context.Context, c *buildreq.Client, sub schemas.SignedBuildRequest, log *slog.Logger) {
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(sub.Request, &id)
	log = log.With("request", id.ID)

	bctx, cut := context.WithCancel(ctx)
	defer cut()
	var (
		mu    sync.Mutex
		phase string
		lost  bool
	)
	kick := make(chan struct{}, 1)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(a.lease() / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			case <-kick:
			}
			mu.Lock()
			p := phase
			mu.Unlock()
			_, err := c.Lease(ctx, id.ID, p)
			switch {
			case err == nil:
			case buildreq.Final(err):
				log.Warn("lease lost: the build stops", "error", err)
				mu.Lock()
				lost = true
				mu.Unlock()
				cut()
				return
			default:
				log.Warn("renew the lease", "error", err)
			}
		}
	}()
	var out schemas.BuildOutcome
	res, err := a.BuildPhases(bctx, sub, func(p string) {
		mu.Lock()
		phase = p
		mu.Unlock()
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	mu.Lock()
	gone := lost
	mu.Unlock()
	if gone || ctx.Err() != nil {
		close(stop)
		<-renewed
		return
	}
	if err != nil {
		log.Warn("build failed", "error", err)
		out.Error = err.Error()
	} else if out.Result, err = json.Marshal(res); err != nil {
		out.Error = err.Error()
	} else if res.Release != nil {
		out.ReleaseCommit = res.Release.Commit
	}
	defer func() {
		close(stop)
		<-renewed
	}()
	for try := 0; try < maxAnswerTries; try++ {
		err := c.Answer(ctx, id.ID, out)
		if err == nil || ctx.Err() != nil {
			return
		}
		log.Warn("answer a build request", "error", err)
		if buildreq.Final(err) {
			return
		}
		sleep(ctx, min(time.Duration(try+1)*time.Second, 10*time.Second))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
