package manifests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNotReady reports objects that did not become ready within the
// component's timeout. The objects are applied and recorded; a later job
// waits again.
var ErrNotReady = errors.New("not ready")

// wait waits, with manifests.wait, until every object is ready as kstatus
// computes it (Deployments available, Jobs complete, CRDs established…),
// or the timeout passes.
func (r *run) wait(ctx context.Context) error {
	if !r.settings.Wait || len(r.desired) == 0 {
		return nil
	}
	set := make(object.ObjMetadataSet, len(r.desired))
	for i, d := range r.desired {
		set[i] = d.id
	}
	timeout := r.waitTimeout(ctx)
	began := time.Now()
	err := r.manager.WaitForSetWithContext(ctx, set, ssa.WaitOptions{Interval: r.p.pollInterval(), Timeout: timeout, FailFast: true})
	if err == nil {
		fmt.Fprintf(r.log, "manifests %s: %d objects ready after %s\n", r.job.Component, len(set), time.Since(began).Round(time.Millisecond))
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	when := "after " + timeout.String()
	if time.Since(began) < timeout {
		when = "(an object failed)"
	}
	return r.notReady(ctx, when, err)
}

// notReady explains a wait that timed out or failed early: each object
// that is not ready, with its status and kstatus's message.
func (r *run) notReady(ctx context.Context, when string, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var lines []string
	for _, d := range r.desired {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(d.obj.GroupVersionKind())
		if err := r.client.Get(ctx, client.ObjectKeyFromObject(d.obj), u); err != nil {
			lines = append(lines, fmt.Sprintf("%s: %v", fmtID(d.id), err))
			continue
		}
		res, err := status.Compute(u)
		switch {
		case err != nil:
			lines = append(lines, fmt.Sprintf("%s: %v", fmtID(d.id), err))
		case res.Status != status.CurrentStatus:
			line := fmt.Sprintf("%s is %s", fmtID(d.id), res.Status)
			if res.Message != "" {
				line += " (" + res.Message + ")"
			}
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return fmt.Errorf("%w %s: %w", ErrNotReady, when, cause)
	}
	return fmt.Errorf("%w %s: %d of %d objects: %s", ErrNotReady, when, len(lines), len(r.desired), strings.Join(lines, "; "))
}

// waitTimeout is manifests.timeout, bounded by the job's deadline; or the
// time left before the deadline, less a tenth to report and record; or
// DefaultWaitTimeout.
func (r *run) waitTimeout(ctx context.Context) time.Duration {
	var left time.Duration
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
		left -= left / 10
		left = max(left, time.Second)
	}
	if d, err := time.ParseDuration(r.settings.Timeout); err == nil && d > 0 {
		if left > 0 {
			return min(d, left)
		}
		return d
	}
	if left > 0 {
		return left
	}
	return DefaultWaitTimeout
}

// diffPaths returns the paths, sorted and at most maxDriftFields, where
// live and merged differ: labels, annotations and everything outside
// metadata and status.
func diffPaths(live, merged map[string]any) []string {
	var paths []string
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, am[k], bm[k])
			}
			return
		}
		as, aok := a.([]any)
		bs, bok := b.([]any)
		if aok && bok && len(as) == len(bs) {
			for i := range as {
				walk(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])
			}
			return
		}
		if !reflect.DeepEqual(a, b) {
			paths = append(paths, path)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		switch k {
		case "status", "apiVersion", "kind":
			continue
		case "metadata":
			lm, _ := live[k].(map[string]any)
			mm, _ := merged[k].(map[string]any)
			walk("metadata.labels", lm["labels"], mm["labels"])
			walk("metadata.annotations", lm["annotations"], mm["annotations"])
		default:
			walk(k, live[k], merged[k])
		}
	}
	if len(paths) > maxDriftFields {
		paths = append(paths[:maxDriftFields], fmt.Sprintf("(%d more)", len(paths)-maxDriftFields))
	}
	return paths
}
