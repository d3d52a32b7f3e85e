package agent

import (
	"context"
	"slices"
	"sync"

	"nuon.dev/nuon/reconciler"
)

// schedule runs every plan step after the steps it waits for, at most
// limit at once, and returns when all have run. Independent steps run in
// parallel. An apply waits for the applies of its dependencies; a delete
// waits for the deletes of the components that depend on it and are
// leaving too (reconciler.NewPlan puts them in After).
func schedule(ctx context.Context, plan *reconciler.Plan, desired []string, limit int, run func(context.Context, reconciler.Step)) {
	key := func(component, action string) string { return component + "/" + action }
	finished := map[string]chan struct{}{}
	for _, s := range plan.Steps {
		finished[key(s.Component, s.Action)] = make(chan struct{})
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for _, s := range plan.Steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(finished[key(s.Component, s.Action)])
			for _, dep := range s.After {
				k := key(dep, reconciler.Apply)
				if s.Action == reconciler.Delete && !slices.Contains(desired, dep) {
					k = key(dep, reconciler.Delete)
				}
				if ch, ok := finished[k]; ok {
					<-ch
				}
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			run(ctx, s)
		}()
	}
	wg.Wait()
}
