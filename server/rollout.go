package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/prometheus/client_golang/prometheus"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// DefaultRolloutInterval is how often the rollout controller looks at the
// running rollouts without a status push to wake it: what a bake time
// ends on. Five seconds: a bake is minutes to hours, and a look at a
// rollout whose statuses did not change reads nothing from the
// repository.
const DefaultRolloutInterval = 5 * time.Second

// rollouts is the rollout controller the writer runs: on every status
// push of an install in an open wave, and every interval, it decides
// (rollout.Decide) each channel's next step from the installs' signed
// status, writes each decision as a commit signed by the render key on the
// channel's rollout ref, and renders again so that the installs the
// decision moved get their new state.
//
// Its work per status push is reading that one status; per evaluation,
// classifying again the open wave's installs whose status changed
// (rollout.Tally). The whole wave is judged only when the tally cannot
// rule out a decision: when its last waiting install reports, a failure
// goes over the budget, or a status may have gone stale. Main is read
// again only when it moved, and then only the install files it changed.
type rollouts struct {
	s        *Server
	interval time.Duration

	// pending are the installs whose status changed since the last
	// evaluation; kick wakes the loop.
	pendMu  sync.Mutex
	pending map[string]bool
	kick    chan struct{}

	// mu is held by an evaluation; what follows is its own.
	mu       sync.Mutex
	main     plumbing.Hash
	channels map[string]*channelRollout
	// of is the channel of each install on a channel with a rollout.
	of map[string]string
	// statuses are the latest verified statuses of the installs of open
	// waves, read when their status ref moves.
	statuses map[string]statusSeen
	// pins are the versions each desired commit renders, by commit.
	pins map[plumbing.Hash]map[string]string
	// syncMain is the main the server last rendered (guarded by
	// Server.renderMu, not mu): see baselineFirstRollouts.
	syncMain plumbing.Hash
	// installs are main's install files as last read (rollout_installs.go).
	installs rolloutInstalls
	// refused is a main commit whose rollouts could not be read (a
	// policy Parse or Assign refuses): reported once, then left alone.
	refused plumbing.Hash

	stateGauge  *prometheus.GaugeVec
	waveGauge   *prometheus.GaugeVec
	halts       *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	evaluations prometheus.Histogram
}

// channelRollout is what the controller holds of one channel.
type channelRollout struct {
	policy   *rollout.Policy
	waves    *rollout.Waves
	pins     map[string]string
	released func(component, version string) bool
	state    *schemas.RolloutState
	tip      plumbing.Hash
	// err says why the channel's rollout ref could not be read: nothing
	// moves on the channel until it is fixed.
	err error
	// tally is how the open wave of state stood at the last evaluation
	// that judged it (rollout.Tally); nil until one did, and again after
	// each decision. A render that is not a decision's (a request put
	// into an install's desired state) may move an open-wave install's
	// desired commit unseen: its status then names an older commit, so
	// the tally counts too few installs waiting or too many failed, and
	// Settled errs only towards judging the wave whole.
	tally *rollout.Tally
}

// statusSeen is an install's status commit as the controller read it.
type statusSeen struct {
	commit plumbing.Hash
	at     time.Time
	status *schemas.Status
}

func newRollouts(s *Server) *rollouts {
	r := &rollouts{
		s: s, interval: DefaultRolloutInterval,
		pending: map[string]bool{}, kick: make(chan struct{}, 1),
		channels: map[string]*channelRollout{}, of: map[string]string{},
		statuses: map[string]statusSeen{}, pins: map[plumbing.Hash]map[string]string{},
		stateGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nuon_rollout_state",
			Help: "1 for each channel's rollout in its phase (running, halted, rolled-back, finished)."}, []string{"channel", "phase"}),
		waveGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nuon_rollout_wave",
			Help: "The number of the last opened wave of each channel's rollout, and of its waves."}, []string{"channel", "of"}),
		halts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nuon_rollout_halts_total",
			Help: "Rollouts halted or rolled back, by channel."}, []string{"channel"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nuon_rollout_decisions_total",
			Help: "Decisions of the rollout controller, by kind."}, []string{"kind"}),
		evaluations: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nuon_rollout_evaluation_seconds",
			Help: "Time of one evaluation of the rollout controller.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}),
	}
	s.metrics.reg.MustRegister(r.stateGauge, r.waveGauge, r.halts, r.decisions, r.evaluations)
	return r
}

// statusChanged notes that install's status ref moved; the controller
// reads it at its next evaluation, at once if the install is in an open
// wave.
func (r *rollouts) statusChanged(install string) {
	if r == nil {
		return
	}
	r.pendMu.Lock()
	r.pending[install] = true
	r.pendMu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run evaluates on every status push and every interval until ctx ends.
func (r *rollouts) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var tick bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tick = true
		case <-r.kick:
			tick = false
		}
		if _, err := r.evaluate(ctx, tick); err != nil && ctx.Err() == nil {
			r.s.log.Error("rollout controller", "error", err)
		}
	}
}

// EvaluateRollouts runs one evaluation of the rollout controller and
// returns the decisions it wrote: what the controller's loop does on a
// status push or a tick, for tests and tools.
func (s *Server) EvaluateRollouts(ctx context.Context) ([]*schemas.RolloutState, error) {
	return s.rollouts.evaluate(ctx, true)
}

// RolloutStates returns each channel's rollout state as the controller
// last read or wrote it, and how its open wave stands from the statuses
// it holds (its tally, rollout.Tally): counts, and the evidence of at
// most rolloutEvidence installs, problems first. What a page of the
// fleet view shows.
func (s *Server) RolloutStates() map[string]RolloutView {
	r := s.rollouts
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]RolloutView{}
	for ch, c := range r.channels {
		v := RolloutView{State: c.state, Commit: c.tip.String()}
		if c.err != nil {
			v.Error = c.err.Error()
		}
		if c.state != nil {
			if k := rollout.Opened(c.state); k > 0 && c.state.Phase == schemas.RolloutRunning {
				// The tally the controller keeps, made now if it has none
				// yet: a page view costs no judgement of the whole wave.
				if c.tally == nil || !c.tally.Of(c.state) {
					w := c.state.Waves[k-1]
					c.tally = rollout.NewTally(c.state, r.reports(w.Installs), r.s.cfg.Now())
				}
				j := c.tally.Judgement(rolloutEvidence)
				v.Open = &j
			}
		}
		out[ch] = v
	}
	return out
}

// RolloutView is a channel's rollout as the fleet view shows it.
type RolloutView struct {
	State  *schemas.RolloutState `json:"state"`
	Commit string                `json:"commit"`
	// Open is how the open wave of a running rollout stands.
	Open  *rollout.Judgement `json:"open,omitempty"`
	Error string             `json:"error,omitempty"`
}

// evaluate is one evaluation: read main again if it moved, read the
// statuses that changed, decide every channel, write the decisions, and
// render again if any moved an install. Woken by status pushes (tick
// false), it does nothing more when none of the installs pushed is in an
// open wave: a push of an install outside every open wave costs a map
// lookup, and a pin change on main is seen at the next tick.
func (r *rollouts) evaluate(ctx context.Context, tick bool) ([]*schemas.RolloutState, error) {
	if r.s.cfg.RenderKey == nil || r.s.writer != nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pendMu.Lock()
	pending := r.pending
	r.pending = map[string]bool{}
	r.pendMu.Unlock()
	var changed []string
	for id := range pending {
		if ch, ok := r.of[id]; ok && r.open(r.channels[ch], id) {
			changed = append(changed, id)
		}
	}
	if !tick && len(changed) == 0 && !r.main.IsZero() {
		return nil, nil
	}
	start := time.Now()
	defer func() { r.evaluations.Observe(time.Since(start).Seconds()) }()
	repo, err := gitrepo.Open(r.s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	st := repo.Storer()
	main, err := revParse(ctx, r.s.cfg.Dir, schemas.MainRef)
	if err != nil {
		return nil, err
	}
	if main != r.main {
		if main == r.refused {
			// Reported once; nothing moves until main changes.
			return nil, nil
		}
		if err := r.load(ctx, repo, main); err != nil {
			r.refused = main
			r.s.log.Error("rollouts of main refused: no rollout moves until main changes", "commit", main.String(), "error", err)
			return nil, err
		}
	}
	for _, id := range changed {
		r.readStatus(st, id)
	}
	var written []*schemas.RolloutState
	var moved []string
	now := r.s.cfg.Now()
	for _, ch := range slices.Sorted(maps.Keys(r.channels)) {
		c := r.channels[ch]
		if c.err != nil {
			continue
		}
		// The open wave's installs whose status changed are classified
		// again; when the tally then shows that nothing can be decided,
		// the wave is not judged whole: an evaluation costs what changed.
		if c.tally != nil {
			for _, id := range changed {
				if r.of[id] == ch {
					rep, ok := r.reports([]string{id})[id]
					c.tally.Update(id, rep, ok, now)
				}
			}
			if c.tally.Settled(c.policy, c.state, c.pins, now) {
				continue
			}
		}
		if c.state != nil && c.state.Phase != schemas.RolloutRunning && maps.Equal(c.state.To, c.pins) {
			continue // paused, halted, aborted or finished, and no new pin
		}
		var installs []string
		if c.state != nil {
			if k := rollout.Opened(c.state); k > 0 {
				installs = c.state.Waves[k-1].Installs
			}
		}
		reports := r.reports(installs)
		next, err := rollout.Decide(rollout.Input{Policy: c.policy, Waves: c.waves, State: c.state, Pins: c.pins,
			Source: main.String(), Reports: reports, Released: c.released, Now: now})
		if err != nil {
			r.s.log.Error("rollout not decided", "channel", ch, "error", err)
			continue
		}
		if next == nil {
			c.tally = nil
			if c.state != nil && c.state.Phase == schemas.RolloutRunning {
				c.tally = rollout.NewTally(c.state, reports, now)
			}
			continue
		}
		c.tally = nil
		tip, err := r.write(ctx, repo, c, next)
		if err != nil {
			return written, err
		}
		r.s.log.Info("rollout decision", "channel", ch, "decision", next.Decision.Kind, "wave", next.Decision.Wave, "commit", tip.String(), "reason", next.Decision.Reason)
		c.state, c.tip = next, tip
		written = append(written, next)
		moved = append(moved, schemas.RolloutRef(ch))
		r.decisions.WithLabelValues(next.Decision.Kind).Inc()
		if next.Decision.Kind == schemas.DecisionHalted || next.Decision.Kind == schemas.DecisionRolledBack {
			r.halts.WithLabelValues(ch).Inc()
		}
		// The installs of a wave that opened: their statuses, read again
		// where their status ref moved since they were read.
		if k := rollout.Opened(next); k > 0 {
			for _, id := range next.Waves[k-1].Installs {
				r.readStatus(st, id)
			}
		}
	}
	r.gauges()
	if len(written) == 0 {
		return nil, nil
	}
	if r.s.mirror != nil {
		r.s.mirror.add(moved...)
	}
	// Render again: the decisions moved installs although main did not.
	r.s.renderMu.Lock()
	r.s.rendered = plumbing.ZeroHash
	r.s.renderMu.Unlock()
	return written, r.s.Sync(ctx)
}

// load reads main's channels, their policies and waves, and each
// channel's rollout ref.
func (r *rollouts) load(ctx context.Context, repo *gitrepo.Repo, main plumbing.Hash) error {
	st := repo.Storer()
	fsys, err := renderer.SourceFS(st, main)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if !rolloutDeclared(fsys) {
		// No channel declares a rollout: no waves to assign, and the
		// install files (a million at fleet size) are not read. A main
		// that declares one later reads them then.
		r.channels, r.of, r.main = map[string]*channelRollout{}, map[string]string{}, main
		r.pins = map[plumbing.Hash]map[string]string{}
		r.s.log.Info("rollout waves assigned", "main", main.String(), "declared", 0, "took", time.Since(t0))
		return nil
	}
	r.installs.store = filepath.Join(r.s.cfg.Dir, installFactsFile)
	src, files, read, err := r.installs.read(ctx, st, main, fsys)
	if err != nil {
		return err
	}
	if err := r.installs.saveErr; err != nil {
		r.s.log.Error("install facts not saved: a restart parses the install files again", "error", err)
		r.installs.saveErr = nil
	}
	policies, err := rollout.Policies(fsys, src)
	if err != nil {
		return fmt.Errorf("rollouts of main %s: %w", main, err)
	}
	all, err := rollout.Fleet(policies, r.installs.fleet())
	if err != nil {
		return fmt.Errorf("rollouts of main %s: %w", main, err)
	}
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"nuon-render"}, Key: r.s.cfg.RenderKey.PublicKey()}}}
	channels := map[string]*channelRollout{}
	of := map[string]string{}
	for _, w := range all {
		if !w.Declared {
			continue
		}
		file := schemas.ChannelsDir + "/" + w.Channel + ".yaml"
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return err
		}
		p, err := rollout.Parse(file, data)
		if err != nil {
			return fmt.Errorf("rollouts of main %s: %w", main, err)
		}
		c := &channelRollout{policy: p, waves: w, pins: src.Channels[w.Channel].Components,
			released: func(component, version string) bool { _, ok := src.ReleaseOf(component, version); return ok }}
		if old := r.channels[w.Channel]; old != nil && old.err == nil {
			c.state, c.tip = old.state, old.tip
		}
		tip, err := repo.Ref(plumbing.ReferenceName(schemas.RolloutRef(w.Channel)))
		if err != nil {
			return err
		}
		if tip != c.tip {
			c.tip, c.state = tip, nil
			if !tip.IsZero() {
				if c.state, c.err = rollout.Read(st, w.Channel, tip, trust); c.err != nil {
					r.s.log.Error("rollout ref refused: nothing moves on the channel", "channel", w.Channel, "error", c.err)
				}
			}
		}
		channels[w.Channel] = c
		for _, wave := range w.Waves {
			for _, id := range wave.Installs {
				of[id] = w.Channel
			}
		}
	}
	r.channels, r.of, r.main = channels, of, main
	r.installs.files = files
	r.s.log.Info("rollout waves assigned", "main", main.String(), "installs", len(files), "read", read, "took", time.Since(t0))
	// The pins of desired commits read before: kept only while main does
	// not move, so that the map stays as small as the commits of a few
	// waves.
	r.pins = map[plumbing.Hash]map[string]string{}
	for _, c := range channels {
		if c.state == nil {
			continue
		}
		if k := rollout.Opened(c.state); k > 0 {
			for _, id := range c.state.Waves[k-1].Installs {
				r.readStatus(st, id)
			}
		}
	}
	return nil
}

// rolloutDeclared reports whether a channel file of main declares a
// rollout, or may: a file that cannot be read or parsed counts, so that
// the full load reports it where it would have before.
func rolloutDeclared(fsys fs.FS) bool {
	entries, err := fs.ReadDir(fsys, schemas.ChannelsDir)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		file := path.Join(schemas.ChannelsDir, e.Name())
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return true
		}
		if p, err := rollout.Parse(file, data); err != nil || p != nil {
			return true
		}
	}
	return false
}

// open reports whether id is in the open wave of c's running rollout.
func (r *rollouts) open(c *channelRollout, id string) bool {
	if c == nil || c.state == nil || c.state.Phase != schemas.RolloutRunning {
		return false
	}
	k := rollout.Opened(c.state)
	if k == 0 {
		return false
	}
	_, ok := slices.BinarySearch(c.state.Waves[k-1].Installs, id)
	return ok
}

// readStatus reads install id's status commit, if its key signed it.
func (r *rollouts) readStatus(st storer.EncodedObjectStorer, id string) {
	tip, ok := r.s.refs.get(schemas.StatusRef(id))
	if !ok || tip.IsZero() {
		delete(r.statuses, id)
		return
	}
	if seen, ok := r.statuses[id]; ok && seen.commit == tip {
		return
	}
	s, err := verifiedStatus(st, tip, id, r.s.keys)
	if err != nil {
		r.s.log.Warn("status not taken as rollout evidence", "install", id, "commit", tip.String(), "error", err)
		delete(r.statuses, id)
		return
	}
	r.statuses[id] = s
}

// verifiedStatus reads a status commit of install id and its status.json,
// after checking that the install's key signed it.
func verifiedStatus(st storer.EncodedObjectStorer, h plumbing.Hash, id string, keys *keyTable) (statusSeen, error) {
	key, ok := keys.lookup(id)
	if !ok {
		return statusSeen{}, errors.New("no agent key on main")
	}
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return statusSeen{}, err
	}
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{id}, Key: key}}}
	if _, err := trust.VerifyCommit(c); err != nil {
		return statusSeen{}, err
	}
	tree, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return statusSeen{}, err
	}
	e, err := tree.FindEntry(schemas.StatusFile)
	if err != nil {
		return statusSeen{}, fmt.Errorf("no %s", schemas.StatusFile)
	}
	data, err := gitobj.ReadBlob(st, e.Hash, schemas.DefaultMaxFileSize)
	if err != nil {
		return statusSeen{}, err
	}
	var status schemas.Status
	if err := json.Unmarshal(data, &status); err != nil {
		return statusSeen{}, fmt.Errorf("%s: %w", schemas.StatusFile, err)
	}
	if status.Install != id {
		return statusSeen{}, fmt.Errorf("%s names install %q", schemas.StatusFile, status.Install)
	}
	return statusSeen{commit: h, at: c.Committer.When, status: &status}, nil
}

// reports are the rollout reports of installs ids: their statuses with
// their current desired commit and its pins.
func (r *rollouts) reports(ids []string) map[string]rollout.Report {
	out := make(map[string]rollout.Report, len(ids))
	var st storer.EncodedObjectStorer
	for _, id := range ids {
		seen, ok := r.statuses[id]
		if !ok {
			continue
		}
		cur, _ := r.s.refs.get(schemas.InstallRef(id))
		pins, ok := r.pins[cur]
		if !ok && !cur.IsZero() {
			if st == nil {
				repo, err := gitrepo.Open(r.s.cfg.Dir)
				if err != nil {
					continue
				}
				st = repo.Storer()
			}
			pins = desiredPins(st, cur)
			r.pins[cur] = pins
		}
		out[id] = rollout.Report{Commit: seen.commit.String(), At: seen.at, Current: cur.String(), CurrentPins: pins, Status: seen.status}
	}
	return out
}

// desiredPins reads the versions a desired commit renders, by component.
func desiredPins(st storer.EncodedObjectStorer, h plumbing.Hash) map[string]string {
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return nil
	}
	tree, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	dir, err := tree.Tree(schemas.ComponentsDir)
	if err != nil {
		return out
	}
	for _, e := range dir.Entries {
		data, err := gitobj.ReadBlob(st, e.Hash, schemas.DefaultMaxFileSize)
		if err != nil {
			continue
		}
		var cs struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(data, &cs) == nil {
			out[strings.TrimSuffix(e.Name, ".json")] = cs.Version
		}
	}
	return out
}

// write records next as a signed commit on c's rollout ref.
func (r *rollouts) write(ctx context.Context, repo *gitrepo.Repo, c *channelRollout, next *schemas.RolloutState) (plumbing.Hash, error) {
	b := gitobj.NewBatch()
	who := object.Signature{Name: "nuon rollout controller", Email: "rollouts@nuon.invalid", When: next.Decision.At.UTC().Truncate(time.Second)}
	h, err := rollout.Commit(b, c.tip, next, r.s.cfg.RenderKey, who)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := b.Flush(repo.Storer()); err != nil {
		return plumbing.ZeroHash, err
	}
	ref := plumbing.ReferenceName(schemas.RolloutRef(next.Channel))
	if err := repo.Apply(ctx, []gitrepo.Update{{Name: ref, Old: c.tip, New: h}}); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s: %w", ref, err)
	}
	r.s.sideRefMoved()
	return h, nil
}

// gauges sets the rollout metrics from the states held.
func (r *rollouts) gauges() {
	r.stateGauge.Reset()
	r.waveGauge.Reset()
	for ch, c := range r.channels {
		if c.state == nil {
			continue
		}
		r.stateGauge.WithLabelValues(ch, c.state.Phase).Set(1)
		r.waveGauge.WithLabelValues(ch, "opened").Set(float64(rollout.Opened(c.state)))
		r.waveGauge.WithLabelValues(ch, "total").Set(float64(len(c.state.Waves)))
	}
}
