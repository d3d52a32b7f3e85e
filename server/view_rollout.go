package server

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// Bounds on what a rollout page lists: a wave or a decision may name
// every install of the fleet, and a page stays small whatever its size.
const (
	rolloutEvidence = 50 // installs listed per decision or open wave, problems first
	rolloutHistory  = 20 // decisions of the rollout ref listed, newest first
)

// rolloutSummary is one channel's line of /fleet/rollouts.
type rolloutSummary struct {
	Channel string
	RolloutView
	Opened, Waves int
	Pins          []rolloutPin
}

// rolloutPin is one component's from and to pins.
type rolloutPin struct {
	Component, From, To string
}

// rolloutWave is one wave of a rollout page.
type rolloutWave struct {
	N    int
	Name string
	// Stand is "passed", "open", "stopped" (opened, the rollout no longer
	// running) or "not opened".
	Stand          string
	Size, Installs int
	Opened, Passed *time.Time
	// Counted says the counts below are known: the open wave of a
	// running rollout (judged now), or a passed wave (its evidence).
	Counted                            bool
	Healthy, Failed, Deferred, Waiting int
}

// evidenceList is at most rolloutEvidence entries of a longer list.
type evidenceList struct {
	Items []schemas.RolloutEvidence
	More  int
}

// rolloutDecisionLine is one commit of a rollout ref, from its message.
type rolloutDecisionLine struct {
	Commit  string
	At      time.Time
	Subject string
	Body    string
}

// rolloutPageData is /fleet/rollouts/<channel>.
type rolloutPageData struct {
	Channel string
	RolloutView
	Pins     []rolloutPin
	Waves    []rolloutWave
	Evidence evidenceList // the last decision's
	// OpenWave lists the open wave's installs, problems first.
	OpenWave   evidenceList
	History    []rolloutDecisionLine
	HistoryErr string
}

func (v *view) rolloutsPage(w http.ResponseWriter, r *http.Request) {
	states := v.s.RolloutStates()
	var rows []rolloutSummary
	for _, ch := range slices.Sorted(maps.Keys(states)) {
		rv := states[ch]
		row := rolloutSummary{Channel: ch, RolloutView: rv}
		if st := rv.State; st != nil {
			row.Pins, row.Waves = rolloutPins(st), len(st.Waves)
			for _, w := range st.Waves {
				if w.Opened != nil {
					row.Opened++
				}
			}
		}
		rows = append(rows, row)
	}
	v.render(w, "rollouts.tmpl", map[string]any{"Rollouts": rows})
}

func (v *view) rolloutPage(w http.ResponseWriter, r *http.Request) {
	ch := r.PathValue("channel")
	rv, ok := v.s.RolloutStates()[ch]
	if !ok {
		http.NotFound(w, r)
		return
	}
	data := rolloutDetail(ch, rv)
	if h := plumbing.NewHash(rv.Commit); !h.IsZero() {
		repo, err := gitrepo.Open(v.s.cfg.Dir)
		if err != nil {
			http.Error(w, "nuon: open the repository: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hist, err := rolloutLog(repo.Storer(), h, rolloutHistory)
		data.History, data.HistoryErr = hist, errText(err)
	}
	v.render(w, "rollout.tmpl", data)
}

// rolloutDetail is a channel's rollout page but for its history: waves
// with their counts, the last decision with at most rolloutEvidence of
// its evidence, and the open wave's installs, problems first.
func rolloutDetail(ch string, rv RolloutView) *rolloutPageData {
	d := &rolloutPageData{Channel: ch, RolloutView: rv}
	st := rv.State
	if st == nil {
		return d
	}
	d.Pins = rolloutPins(st)
	d.Evidence = clipEvidence(st.Decision.Evidence)
	for i, w := range st.Waves {
		row := rolloutWave{N: i + 1, Name: w.Name, Size: w.Size, Installs: len(w.Installs), Opened: w.Opened, Passed: w.Passed, Stand: "not opened"}
		switch {
		case w.Passed != nil:
			row.Stand = "passed"
			if st.Decision.Wave == i+1 && (st.Decision.Kind == schemas.DecisionPassed || st.Decision.Kind == schemas.DecisionFinished) {
				row.Counted = true
				countEvidence(&row, st.Decision.Evidence)
			}
		case w.Opened != nil && st.Phase == schemas.RolloutRunning && rv.Open != nil && rolloutOpenWave(st) == i+1:
			row.Stand, row.Counted = "open", true
			row.Healthy, row.Failed, row.Deferred, row.Waiting = rv.Open.Healthy, rv.Open.Failed, rv.Open.Deferred, rv.Open.Waiting
		case w.Opened != nil:
			row.Stand = "stopped"
			if st.Decision.Wave == i+1 {
				countEvidence(&row, st.Decision.Evidence)
				row.Counted = row.Failed+row.Deferred > 0
			}
		}
		d.Waves = append(d.Waves, row)
	}
	if rv.Open != nil {
		es := slices.Clone(rv.Open.Evidence)
		slices.SortStableFunc(es, func(a, b schemas.RolloutEvidence) int {
			return cmp.Compare(outcomeRank(a.Outcome), outcomeRank(b.Outcome))
		})
		d.OpenWave = clipEvidence(es)
		d.OpenWave.More += rv.Open.Omitted
	}
	return d
}

// rolloutOpenWave is the number of the last opened wave (0: none).
func rolloutOpenWave(st *schemas.RolloutState) int {
	n := 0
	for i, w := range st.Waves {
		if w.Opened != nil {
			n = i + 1
		}
	}
	return n
}

func countEvidence(row *rolloutWave, es []schemas.RolloutEvidence) {
	for _, e := range es {
		switch e.Outcome {
		case schemas.OutcomeHealthy:
			row.Healthy++
		case schemas.OutcomeFailed:
			row.Failed++
		case schemas.OutcomeDeferred:
			row.Deferred++
		default:
			row.Waiting++
		}
	}
}

// outcomeRank orders a wave's installs as a person reads them: failed,
// deferred, waiting, then healthy.
func outcomeRank(o string) int {
	switch o {
	case schemas.OutcomeFailed:
		return 0
	case schemas.OutcomeDeferred:
		return 1
	case schemas.OutcomeHealthy:
		return 3
	}
	return 2
}

func clipEvidence(es []schemas.RolloutEvidence) evidenceList {
	if len(es) <= rolloutEvidence {
		return evidenceList{Items: es}
	}
	return evidenceList{Items: es[:rolloutEvidence], More: len(es) - rolloutEvidence}
}

// rolloutPins are the components the rollout's from or to pins name.
func rolloutPins(st *schemas.RolloutState) []rolloutPin {
	names := map[string]bool{}
	for c := range st.From {
		names[c] = true
	}
	for c := range st.To {
		names[c] = true
	}
	var out []rolloutPin
	for _, c := range slices.Sorted(maps.Keys(names)) {
		out = append(out, rolloutPin{Component: c, From: st.From[c], To: st.To[c]})
	}
	return out
}

// rolloutLog reads at most n commits of a rollout ref from tip, newest
// first, from their messages alone: a decision's state may name every
// install of the fleet, its message a few lines.
func rolloutLog(st storer.EncodedObjectStorer, tip plumbing.Hash, n int) ([]rolloutDecisionLine, error) {
	var out []rolloutDecisionLine
	for h := tip; !h.IsZero() && len(out) < n; {
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			return out, err
		}
		subject, body, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
		out = append(out, rolloutDecisionLine{Commit: h.String(), At: c.Author.When, Subject: subject, Body: strings.TrimSpace(body)})
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return out, nil
}
