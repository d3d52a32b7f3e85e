package manifests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// ErrPlanMismatch means a plan-bound apply found no saved plan with the
// approved hash, a file whose content has another hash, or a plan made
// over an inventory that has moved since: nothing is applied. Only a new
// plan and its approval help.
var ErrPlanMismatch = errors.New("no saved plan with the approved hash")

// savedExt ends the name of a saved manifests plan: the exact object set
// as canonical JSON (SavedSet), whose SHA-256 is the plan hash.
const savedExt = ".objects.json"

// SavedSet is a saved manifests plan: every object the apply sends, as
// rendered (inputs substituted, namespace and owner labels set), sorted by
// id, the inventory entries it prunes, and the inventory it was planned
// over. Encoded with sorted keys and no spaces, the same change always
// has the same bytes, so an identical re-plan has the same hash.
type SavedSet struct {
	Component string           `json:"component"`
	Objects   []map[string]any `json:"objects"`
	Prune     []Entry          `json:"prune"`
	// Base is the inventory the plan was made over (ids and digests): an
	// apply over another inventory is stale and refused.
	Base []Entry `json:"base"`
	// Recreate is manifests.recreate when the plan was made: whether a
	// replace deletes and creates the object. It is part of what is
	// approved, so the apply takes it from here, not from the job.
	Recreate bool `json:"recreate,omitempty"`
}

// encode is the canonical form of s.
func (s *SavedSet) encode() ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	// Re-encode through generic maps: every key sorted, the struct's too.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// plansPath is where this component's saved plans are.
func (r *run) plansPath() string { return filepath.Join(r.dir, reconciler.PlansDir) }

func (r *run) savedFile(h, ext string) string {
	return filepath.Join(r.plansPath(), strings.TrimPrefix(h, "sha256:")+ext)
}

// applyPlanBound routes a plan-bound job: Record or ApplySaved.
func (p *Plugin) applyPlanBound(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	switch job.Plan.Mode {
	case schemas.PlanRecordMode:
		return p.Record(ctx, job, env)
	case schemas.PlanApplyMode:
		return p.ApplySaved(ctx, job, env)
	default:
		return nil, fmt.Errorf("manifests %s: unknown plan mode %q", job.Component, job.Plan.Mode)
	}
}

// change is one object's entry in a manifests plan.
type change struct {
	id     string
	kind   string // schemas.Change*
	obj    map[string]any
	fields []string
	before map[string]any // the live object, for an update
	after  map[string]any // the dry-run's result, for an update
	why    string         // a replace's cause
}

// Record plans the job's change with server-side dry-runs and keeps the
// saved plan for a later plan-bound apply, changing nothing. Each object
// is a create (it does not exist), an update (the dry-run changes fields
// of it, listed), a replace (the API server refuses the change of an
// immutable field) or a no-op; each inventory object the manifests no
// longer hold is a delete. The plan hash is the SHA-256 of the saved
// object set (SavedSet), so an identical re-plan keeps its hash and its
// approval. Every other saved plan of the component is removed.
func (p *Plugin) Record(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	var rec *schemas.PlanRecord
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"load", r.load},
		step{"inventory", r.readInventory},
		step{"plan", r.planChanges},
		step{"record", func(ctx context.Context) (err error) { rec, err = r.recordPlan(ctx); return err }},
	); err != nil {
		return nil, err
	}
	s := rec.Summary
	fmt.Fprintf(r.log, "manifests %s: plan %s saved: %d to create, %d to update, %d to delete, %d to replace\n", job.Component, rec.Hash,
		s.Counts[schemas.ChangeCreate], s.Counts[schemas.ChangeUpdate], s.Counts[schemas.ChangeDelete], s.Counts[schemas.ChangeReplace])
	return &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID, Plan: rec}, nil
}

// savedSet is the object set of this run's plan.
func (r *run) savedSet() *SavedSet {
	s := &SavedSet{Component: r.job.Component, Prune: []Entry{}, Base: []Entry{}}
	ds := slices.Clone(r.desired)
	slices.SortFunc(ds, func(a, b *desired) int { return strings.Compare(fmtID(a.id), fmtID(b.id)) })
	for _, d := range ds {
		s.Objects = append(s.Objects, d.obj.Object)
	}
	for _, e := range r.plan.prune {
		e.ResourceVersion = ""
		s.Prune = append(s.Prune, e)
	}
	s.Base = baseOf(r.inv)
	s.Recreate = r.settings.Recreate
	return s
}

// baseOf is inv's entries without their resourceVersions (a status write
// does not make a plan stale), sorted.
func baseOf(inv *Inventory) []Entry {
	out := []Entry{}
	if inv == nil {
		return out
	}
	for _, e := range inv.Objects {
		e.ResourceVersion = ""
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// recordPlan dry-runs the changed objects, writes the saved set, its JSON
// form for the policies and its record, and returns the record.
func (r *run) recordPlan(ctx context.Context) (*schemas.PlanRecord, error) {
	changes, err := r.dryRunAll(ctx)
	if err != nil {
		return nil, err
	}
	data, err := r.savedSet().encode()
	if err != nil {
		return nil, err
	}
	h := hashBytes(data)
	red, err := r.redactor()
	if err != nil {
		return nil, err
	}
	rec := &schemas.PlanRecord{
		Component: r.job.Component,
		Hash:      h,
		Job:       r.job.ID,
		Size:      int64(len(data)),
		Summary:   summarize(changes),
	}
	rec.Diff, rec.DiffTruncated = boundDiff(red.String(readableDiff(changes)))
	planJSON, err := json.Marshal(PolicyInput(changes))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.plansPath(), 0o700); err != nil {
		return nil, err
	}
	// The saved set holds Secrets' data: owner only, never out of the
	// install.
	if err := atomicfile.Write(r.savedFile(h, savedExt), data, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(r.savedFile(h, reconciler.PlanJSONExt), planJSON, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteJSON(r.savedFile(h, ".json"), reconciler.SavedPlan{Record: *rec, Content: h}); err != nil {
		return nil, err
	}
	r.prunePlans(h)
	return rec, nil
}

// dryRunAll finds each object's change: creates and no-ops from the
// plan's LIST, updates and replaces from a server-side dry-run.
func (r *run) dryRunAll(ctx context.Context) ([]change, error) {
	var mu sync.Mutex
	var out []change
	add := func(c change) {
		mu.Lock()
		out = append(out, c)
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.p.concurrency())
	for _, d := range r.desired {
		id := fmtID(d.id)
		switch d.action {
		case actionCreate:
			add(change{id: id, kind: schemas.ChangeCreate, obj: d.obj.Object})
			continue
		case actionSkip:
			add(change{id: id, kind: schemas.ChangeNoop, obj: d.obj.Object})
			continue
		}
		g.Go(func() error {
			entry, live, merged, err := r.manager.Diff(gctx, d.obj.DeepCopy(), ssa.DiffOptions{})
			if err != nil {
				cause := err
				var dre *ssaerrors.DryRunErr
				if errors.As(err, &dre) {
					cause = dre.Unwrap()
				}
				if apierrors.IsInvalid(cause) && strings.Contains(cause.Error(), "immutable") {
					add(change{id: id, kind: schemas.ChangeReplace, obj: d.obj.Object, why: cause.Error()})
					return nil
				}
				return fmt.Errorf("%s (%s): dry-run: %w", id, d.file, cause)
			}
			switch entry.Action {
			case ssa.CreatedAction:
				add(change{id: id, kind: schemas.ChangeCreate, obj: d.obj.Object})
			case ssa.ConfiguredAction:
				c := change{id: id, kind: schemas.ChangeUpdate, obj: d.obj.Object}
				if live != nil && merged != nil {
					c.before, c.after = live.Object, merged.Object
					c.fields = diffPaths(live.Object, merged.Object)
				}
				add(c)
			default:
				add(change{id: id, kind: schemas.ChangeNoop, obj: d.obj.Object})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, e := range r.plan.prune {
		add(change{id: e.String(), kind: schemas.ChangeDelete, obj: e.Object().Object})
	}
	slices.SortFunc(out, func(a, b change) int { return strings.Compare(a.id, b.id) })
	return out, nil
}

// summarize lists the changes per kind, cut at schemas.MaxPlanAddresses
// in all; the counts stay exact.
func summarize(changes []change) schemas.PlanSummary {
	s := schemas.PlanSummary{Counts: map[string]int{}}
	listed := 0
	for _, c := range changes {
		var list *[]string
		switch c.kind {
		case schemas.ChangeCreate:
			list = &s.Create
		case schemas.ChangeUpdate:
			list = &s.Update
		case schemas.ChangeDelete:
			list = &s.Delete
		case schemas.ChangeReplace:
			list = &s.Replace
		default:
			continue
		}
		s.Counts[c.kind]++
		if listed >= schemas.MaxPlanAddresses {
			s.Truncated++
			continue
		}
		listed++
		*list = append(*list, c.id)
	}
	if len(s.Counts) == 0 {
		s.Counts = nil
	}
	return s
}

// PolicyInput is the plan as the policies read it (input.plan), in the
// shape of a Terraform plan's JSON where it can be: resource_changes, each
// with an address (Kind/namespace/name), a type (kubernetes_ and the kind
// in snake case, as the Terraform kubernetes provider names it:
// kubernetes_persistent_volume_claim), mode managed and change.actions
// (create, update, delete, or delete and create for a replace), plus the
// object's apiVersion, kind, namespace and name. No values: the policies
// judge what changes, and Secrets' data stays out.
func PolicyInput(changes []change) map[string]any {
	rcs := []any{}
	for _, c := range changes {
		u := unstructured.Unstructured{Object: c.obj}
		var actions []any
		switch c.kind {
		case schemas.ChangeNoop:
			actions = []any{"no-op"}
		case schemas.ChangeReplace:
			actions = []any{"delete", "create"}
		default:
			actions = []any{c.kind}
		}
		fields := make([]any, len(c.fields))
		for i, f := range c.fields {
			fields[i] = f
		}
		rcs = append(rcs, map[string]any{
			"address":    c.id,
			"type":       "kubernetes_" + snake(u.GetKind()),
			"name":       u.GetName(),
			"namespace":  u.GetNamespace(),
			"kind":       u.GetKind(),
			"apiVersion": u.GetAPIVersion(),
			"mode":       "managed",
			"change":     map[string]any{"actions": actions, "fields": fields},
		})
	}
	return map[string]any{"format": "nuon-manifests", "resource_changes": rcs}
}

// snake is PersistentVolumeClaim → persistent_volume_claim.
func snake(kind string) string {
	var b strings.Builder
	rs := []rune(kind)
	for i, c := range rs {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// secretValue is what the diff shows for any value of a Secret.
const secretValue = "(secret value)"

// readableDiff is the plan as a person reads it: per object, its action;
// a create's object as YAML; an update's changed fields, before → after.
// A Secret's data and stringData never appear, nor its changed values.
func readableDiff(changes []change) string {
	var b strings.Builder
	marks := map[string]string{schemas.ChangeCreate: "+", schemas.ChangeUpdate: "~", schemas.ChangeDelete: "-", schemas.ChangeReplace: "-/+"}
	for _, c := range changes {
		mark, ok := marks[c.kind]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%s %s %s\n", mark, c.kind, c.id)
		secret := isSecret(c.obj)
		switch c.kind {
		case schemas.ChangeCreate, schemas.ChangeReplace:
			if c.why != "" {
				fmt.Fprintf(&b, "    # %s\n", c.why)
			}
			y, err := yaml.Marshal(masked(c.obj))
			if err != nil {
				continue
			}
			for line := range strings.SplitSeq(strings.TrimRight(string(y), "\n"), "\n") {
				fmt.Fprintf(&b, "    %s\n", line)
			}
		case schemas.ChangeUpdate:
			for _, f := range c.fields {
				if secret && (f == "data" || f == "stringData" || strings.HasPrefix(f, "data.") || strings.HasPrefix(f, "stringData.")) {
					fmt.Fprintf(&b, "    %s: %s\n", f, secretValue)
					continue
				}
				fmt.Fprintf(&b, "    %s: %s → %s\n", f, valueAt(c.before, f), valueAt(c.after, f))
			}
		}
	}
	return b.String()
}

func isSecret(obj map[string]any) bool {
	u := unstructured.Unstructured{Object: obj}
	return u.GetKind() == "Secret" && u.GroupVersionKind().Group == ""
}

// masked is obj with a Secret's data and stringData values replaced.
func masked(obj map[string]any) map[string]any {
	if !isSecret(obj) {
		return obj
	}
	out := (&unstructured.Unstructured{Object: obj}).DeepCopy().Object
	for _, field := range []string{"data", "stringData"} {
		m, ok := out[field].(map[string]any)
		if !ok {
			if _, present := out[field]; present {
				out[field] = secretValue
			}
			continue
		}
		for k := range m {
			m[k] = secretValue
		}
	}
	return out
}

// maxValue bounds one value shown in an update's diff.
const maxValue = 200

// valueAt is the value at a diffPaths path in obj, as compact JSON.
func valueAt(obj map[string]any, path string) string {
	var v any = obj
	for part := range strings.SplitSeq(path, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			fmt.Sscanf(part[i:], "[%d]", &index)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "(none)"
		}
		if v, ok = m[name]; !ok {
			return "(none)"
		}
		if index >= 0 {
			list, ok := v.([]any)
			if !ok || index >= len(list) {
				return "(none)"
			}
			v = list[index]
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	if len(b) > maxValue {
		return strings.ToValidUTF8(string(b[:maxValue]), "") + "…"
	}
	return string(b)
}

// boundDiff cuts diff at schemas.MaxPlanDiff bytes, at a line's end.
func boundDiff(diff string) (string, bool) {
	diff = strings.TrimSpace(diff)
	if len(diff) <= schemas.MaxPlanDiff {
		return diff, false
	}
	cut := diff[:schemas.MaxPlanDiff]
	if i := strings.LastIndexByte(cut, '\n'); i > 0 {
		cut = cut[:i]
	}
	return strings.ToValidUTF8(cut, ""), true
}

// redactor redacts the values of the job's secrets from the record.
func (r *run) redactor() (*redact.Redactor, error) {
	inputs, err := normalizeInputs(r.job.Inputs)
	if err != nil {
		return nil, err
	}
	_, used, err := reconciler.ResolveSecrets(inputs, r.p.lookup())
	if err != nil {
		return nil, err
	}
	red, err := redact.FromValues(used)
	if err != nil {
		return nil, fmt.Errorf("redact the plan: %w", err)
	}
	return red, nil
}

// prunePlans removes every saved plan but keep's.
func (r *run) prunePlans(keep string) {
	entries, _ := os.ReadDir(r.plansPath())
	stem := strings.TrimPrefix(keep, "sha256:")
	for _, e := range entries {
		if s, _, _ := strings.Cut(e.Name(), "."); keep != "" && s == stem {
			continue
		}
		if err := os.Remove(filepath.Join(r.plansPath(), e.Name())); err != nil {
			r.logger.Warn("manifests prune saved plan", "file", e.Name(), "error", err)
		}
	}
}

// ApplySaved applies the saved plan whose hash job.Plan.Hash names, and
// nothing else: the objects are the saved set's, not the job's manifests
// read again. A plan that is not saved, whose file no longer has that
// hash, or that was made over another inventory (another apply happened
// since) fails with ErrPlanMismatch before anything is sent. The result's
// Plan is the applied plan's record; the saved plan is gone after.
func (p *Plugin) ApplySaved(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	var rec *schemas.PlanRecord
	if err := r.do(ctx,
		step{"inventory", r.readInventory},
		step{"saved", func(context.Context) (err error) { rec, err = r.loadSaved(); return err }},
		step{"connect", r.connect},
		step{"plan", r.planChanges},
		step{"apply", r.apply},
		step{"prune", r.prune},
		step{"record", r.record},
		step{"wait", r.wait},
		step{"health", r.healthAfterApply},
	); err != nil {
		r.keepCreated()
		return nil, err
	}
	r.prunePlans("")
	res := r.report()
	res.Plan = rec
	return res, nil
}

// loadSaved reads the saved set the job names, checks its hash and its
// base, and makes its objects the run's desired ones.
func (r *run) loadSaved() (*schemas.PlanRecord, error) {
	want := r.job.Plan.Hash
	if !schemas.ValidPlanHash(want) {
		return nil, fmt.Errorf("%w: %q is not a plan hash", ErrPlanMismatch, want)
	}
	data, err := os.ReadFile(r.savedFile(want, savedExt))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is not saved in this install", ErrPlanMismatch, want)
	}
	if err != nil {
		return nil, err
	}
	if h := hashBytes(data); h != want {
		return nil, fmt.Errorf("%w: the saved plan %s now hashes to %s", ErrPlanMismatch, want, h)
	}
	var s SavedSet
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: saved plan %s: %w", ErrPlanMismatch, want, err)
	}
	if s.Component != r.job.Component {
		return nil, fmt.Errorf("%w: saved plan %s is component %s's", ErrPlanMismatch, want, s.Component)
	}
	if base := baseOf(r.inv); !slices.Equal(base, s.Base) {
		return nil, fmt.Errorf("%w: plan %s is stale: the component's objects were applied since it was made", ErrPlanMismatch, want)
	}
	r.settings.Recreate = s.Recreate
	for _, o := range s.Objects {
		if o == nil {
			return nil, fmt.Errorf("%w: saved plan %s holds a null object", ErrPlanMismatch, want)
		}
		obj := &unstructured.Unstructured{Object: reconciler.TypedNumbers(o).(map[string]any)}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("%w: saved plan %s holds an object without apiVersion, kind or name", ErrPlanMismatch, want)
		}
		d := &desired{obj: obj, id: object.UnstructuredToObjMetadata(obj), file: "plan " + want, stage: stageOf(obj)}
		if d.digest, err = digest(obj); err != nil {
			return nil, err
		}
		r.desired = append(r.desired, d)
	}
	rec, err := reconciler.SavedPlanRecord(r.dir, want)
	if err != nil {
		rec = nil
	}
	return rec, nil
}
