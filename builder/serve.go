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
// at a time, builds each (Build) and answers it, until ctx ends. Network
// errors are retried after a pause; a refused or failed build is answered
// with its error.
func (a *Agent) Serve(ctx context.Context, c *buildreq.Client, parallel int) error {
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if parallel < 1 {
		parallel = 1
	}
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sub, err := c.Next(ctx, 25)
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

// answer builds one request and reports the outcome.
func (a *Agent) answer(ctx context.Context, c *buildreq.Client, sub schemas.SignedBuildRequest, log *slog.Logger) {
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(sub.Request, &id)
	var out schemas.BuildOutcome
	res, err := a.Build(ctx, sub)
	if err != nil {
		log.Warn("build failed", "request", id.ID, "error", err)
		out.Error = err.Error()
	} else if out.Result, err = json.Marshal(res); err != nil {
		out.Error = err.Error()
	}
	for try := 0; try < 5; try++ {
		if err := c.Answer(ctx, id.ID, out); err == nil || ctx.Err() != nil {
			return
		} else {
			log.Warn("answer a build request", "request", id.ID, "error", err)
		}
		sleep(ctx, time.Second)
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
