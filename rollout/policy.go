package rollout

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"nuon.dev/nuon/schemas"
)

// Defaults of a policy's fields left out.
const (
	// DefaultMinHealthy is the healthy reports a wave needs at least: one,
	// so that no wave passes on no evidence at all.
	DefaultMinHealthy = 1
	// DefaultDeferredWait is how long a wave waits for its deferred and
	// unreachable installs: a day, long enough for most maintenance
	// windows to open once.
	DefaultDeferredWait = 24 * time.Hour
	// DefaultDeferredThen is what a wave does once the wait is over:
	// proceed, so that one customer's hold does not stop the fleet; the
	// deferred installs get the change when they come back.
	DefaultDeferredThen = Proceed
	// DefaultOnFailure is halt: nothing more moves until a person looks.
	DefaultOnFailure = Halt
)

// What a wave does when its failures exceed its budget.
const (
	// Halt starts no further wave; the wave's installs keep what they
	// have.
	Halt = "halt"
	// Rollback halts, and the wave's installs go back to the last version
	// that was healthy on them.
	Rollback = "rollback"
)

// What a wave does when it has waited Deferred.Wait for its deferred
// installs.
const (
	// Proceed passes the wave without them (if the rest of it passed).
	Proceed = "proceed"
	// HaltDeferred halts the rollout until they report.
	HaltDeferred = "halt"
)

// Policy is a channel's checked rollout policy.
type Policy struct {
	// Channel is the channel's name, from its file's name.
	Channel string
	// File is the channel's file, channels/<name>.yaml.
	File string
	// Waves in the order they receive a change.
	Waves []WaveSpec
	// DeferredWait is how long a wave waits for deferred and unreachable
	// installs; DeferredThen what it does after.
	DeferredWait time.Duration
	DeferredThen string

	loc *schemas.Located
}

// WaveSpec is one declared wave, checked.
type WaveSpec struct {
	// Name is the wave's name, wave-N when the file gives none.
	Name string
	// Selector picks installs by label; nil when the wave has none.
	Selector labels.Selector
	// Count, Percent and Rest are its share; at most one is set.
	Count   int
	Percent int
	Rest    bool
	// AllowEmpty lets Selector match no install of the channel.
	AllowEmpty    bool
	Bake          time.Duration
	MinHealthy    int
	FailureBudget int
	OnFailure     string
}

// share reports whether the wave takes a share rather than everything its
// selector matches.
func (w *WaveSpec) share() bool { return w.Count > 0 || w.Percent > 0 || w.Rest }

// Parse reads channels/<name>.yaml: it checks the file against the
// channel's schema and its rollout against the rules the schema cannot
// express. A channel without rollout gives a nil Policy and no error:
// its installs take a change all at once. The error is schemas.Problems,
// each naming the file, line and field.
func Parse(file string, data []byte) (*Policy, error) {
	var ch schemas.Channel
	loc, err := schemas.DecodeLocated(schemas.SchemaChannel, file, data, &ch)
	if err != nil {
		return nil, err
	}
	if ch.Rollout == nil {
		return nil, nil
	}
	return build(file, ch.Rollout, loc)
}

// New checks a rollout policy that did not come from a file (a test, a
// tool); its problems name file but no line.
func New(file string, r *schemas.Rollout) (*Policy, error) {
	return build(file, r, nil)
}

func build(file string, r *schemas.Rollout, loc *schemas.Located) (*Policy, error) {
	p := &Policy{
		Channel:      strings.TrimSuffix(path.Base(file), ".yaml"),
		File:         file,
		DeferredWait: DefaultDeferredWait,
		DeferredThen: DefaultDeferredThen,
		loc:          loc,
	}
	var ps schemas.Problems
	if d := r.Deferred; d != nil {
		if d.Wait != "" {
			v, err := time.ParseDuration(d.Wait)
			if err != nil || v < 0 {
				ps = append(ps, p.at("rollout.deferred.wait", "%q is not a duration", d.Wait))
			}
			p.DeferredWait = v
		}
		if d.Then != "" {
			p.DeferredThen = d.Then
		}
	}
	if len(r.Waves) == 0 {
		ps = append(ps, p.at("rollout.waves", "a rollout needs at least one wave"))
	}
	names := map[string]int{}
	percent := 0 // of the share-only percent waves so far
	for i, w := range r.Waves {
		field := fmt.Sprintf("rollout.waves[%d]", i)
		s, wps := p.wave(i, field, w)
		ps = append(ps, wps...)
		if first, dup := names[s.Name]; dup {
			ps = append(ps, p.at(field+".name", "wave name %q is taken by waves[%d]", s.Name, first))
		} else {
			names[s.Name] = i
		}
		if s.Rest && i != len(r.Waves)-1 {
			ps = append(ps, p.at(field+".rest", "rest: true takes every install left, so it is for the last wave only"))
		}
		if s.Selector == nil && s.Percent > 0 {
			percent += s.Percent
			if percent > 100 {
				ps = append(ps, p.at(field+".percent", "the percent waves up to here add up to %d %%, more than 100 %%", percent))
			}
		}
		if s.Rest && percent == 100 {
			ps = append(ps, p.at(field+".rest", "the percent waves before it add up to 100 %%, so rest would always be empty"))
		}
		p.Waves = append(p.Waves, s)
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// wave checks one declared wave.
func (p *Policy) wave(i int, field string, w schemas.RolloutWave) (WaveSpec, schemas.Problems) {
	var ps schemas.Problems
	s := WaveSpec{
		Name:          w.Name,
		Count:         w.Count,
		Percent:       w.Percent,
		Rest:          w.Rest,
		AllowEmpty:    w.AllowEmpty,
		MinHealthy:    DefaultMinHealthy,
		FailureBudget: w.FailureBudget,
		OnFailure:     cmpOr(w.OnFailure, DefaultOnFailure),
	}
	if s.Name == "" {
		s.Name = fmt.Sprintf("wave-%d", i+1)
	}
	if w.MinHealthy != nil {
		s.MinHealthy = *w.MinHealthy
	}
	if w.Bake != "" {
		v, err := time.ParseDuration(w.Bake)
		if err != nil || v < 0 {
			ps = append(ps, p.at(field+".bake", "%q is not a duration", w.Bake))
		}
		s.Bake = v
	}
	shares := 0
	for _, set := range []bool{w.Count > 0, w.Percent > 0, w.Rest} {
		if set {
			shares++
		}
	}
	switch {
	case shares > 1:
		ps = append(ps, p.at(field, "count, percent and rest each give the wave's share; set one"))
	case shares == 0 && w.Selector == nil:
		ps = append(ps, p.at(field, "a wave needs a selector, a share (count, percent or rest: true), or both"))
	case w.Rest && w.Selector != nil:
		ps = append(ps, p.at(field+".selector", "rest: true takes every install left; it takes no selector"))
	}
	if w.Count > 0 && s.MinHealthy > w.Count {
		ps = append(ps, p.at(field+".minHealthy", "is %d, more than the wave's %d installs: it could never pass", s.MinHealthy, w.Count))
	}
	if w.Selector != nil {
		sel, sps := p.selector(field+".selector", w.Selector)
		ps = append(ps, sps...)
		s.Selector = sel
	}
	return s, ps
}

// operators maps a matchExpressions operator to the labels package's.
var operators = map[string]selection.Operator{
	"In":           selection.In,
	"NotIn":        selection.NotIn,
	"Exists":       selection.Exists,
	"DoesNotExist": selection.DoesNotExist,
}

// selector turns a file's selector into a labels.Selector, checked as
// Kubernetes checks one (values for In and NotIn, none for Exists).
func (p *Policy) selector(field string, ls *schemas.LabelSelector) (labels.Selector, schemas.Problems) {
	var ps schemas.Problems
	if len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0 {
		return nil, schemas.Problems{p.at(field, "selects every install; give matchLabels or matchExpressions, or use rest: true")}
	}
	sel := labels.NewSelector()
	for _, k := range slices.Sorted(maps.Keys(ls.MatchLabels)) {
		r, err := labels.NewRequirement(k, selection.Equals, []string{ls.MatchLabels[k]})
		if err != nil {
			ps = append(ps, p.at(field+".matchLabels."+k, "%s", trimField(err)))
			continue
		}
		sel = sel.Add(*r)
	}
	for i, e := range ls.MatchExpressions {
		f := fmt.Sprintf("%s.matchExpressions[%d]", field, i)
		op, ok := operators[e.Operator]
		if !ok {
			ps = append(ps, p.at(f+".operator", "%q is not In, NotIn, Exists or DoesNotExist", e.Operator))
			continue
		}
		r, err := labels.NewRequirement(e.Key, op, e.Values)
		if err != nil {
			ps = append(ps, p.at(f, "%s", trimField(err)))
			continue
		}
		sel = sel.Add(*r)
	}
	return sel, ps
}

// labelsPrefix is the field path and value the labels package puts in
// front of its messages: the problem carries the file's own.
var labelsPrefix = regexp.MustCompile(`^(key|values(\[[0-9]+\])?): (Invalid value: .*?: )?`)

func trimField(err error) string {
	return labelsPrefix.ReplaceAllString(err.Error(), "")
}

// at returns a problem at field of the policy's file.
func (p *Policy) at(field, format string, args ...any) schemas.Problem {
	if p.loc != nil {
		return p.loc.At(field, format, args...)
	}
	return schemas.Problem{File: p.File, Field: field, Message: fmt.Sprintf(format, args...)}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
