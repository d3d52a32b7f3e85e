package rollout

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"nuon.dev/nuon/schemas"
)

// Install is what assigning waves needs of an install: its id and labels.
type Install struct {
	ID     string
	Labels map[string]string
}

// Waves is a channel's installs, each in exactly one wave.
type Waves struct {
	Channel string `json:"channel"`
	// Declared is false for a channel without a rollout: its one wave,
	// all, holds every install.
	Declared bool   `json:"declared"`
	Waves    []Wave `json:"waves"`

	index map[string]int
}

// Wave is one wave and its installs.
type Wave struct {
	// Number counts the waves from 1, in the order they take a change.
	Number int    `json:"wave"`
	Name   string `json:"name"`
	// Installs are the wave's install ids, sorted.
	Installs      []string      `json:"installs"`
	Bake          time.Duration `json:"bake"`
	MinHealthy    int           `json:"minHealthy"`
	FailureBudget int           `json:"failureBudget"`
	OnFailure     string        `json:"onFailure"`
}

// MarshalJSON writes the bake time as a Go duration (1h0m0s).
func (w Wave) MarshalJSON() ([]byte, error) {
	type plain Wave
	return json.Marshal(struct {
		plain
		Bake string `json:"bake"`
	}{plain(w), w.Bake.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (w *Wave) UnmarshalJSON(b []byte) error {
	type plain Wave
	var v struct {
		plain
		Bake string `json:"bake"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*w = Wave(v.plain)
	if v.Bake != "" {
		d, err := time.ParseDuration(v.Bake)
		if err != nil {
			return fmt.Errorf("wave %s: bake: %w", v.Name, err)
		}
		w.Bake = d
	}
	return nil
}

// AllWave is the name of the one wave of a channel without a rollout.
const AllWave = "all"

// Of returns the number of the wave install id is in.
func (w *Waves) Of(id string) (number int, ok bool) {
	if w.index == nil { // read from JSON
		w.index = map[string]int{}
		for _, wave := range w.Waves {
			for _, in := range wave.Installs {
				w.index[in] = wave.Number
			}
		}
	}
	n, ok := w.index[id]
	return n, ok
}

// Hash is an install's place in its channel's share waves: the first 8
// bytes of SHA-256 over the channel's name, a zero byte and the install's
// id. It depends on nothing else, so it never changes while the install
// stays on the channel, and it differs between channels, so that the same
// installs are not always first.
func Hash(channel, id string) uint64 {
	h := sha256.New()
	h.Write([]byte(channel))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// below reports whether hash h lies in the first percent % of the hash
// space: h < percent/100 · 2⁶⁴, computed exactly.
func below(h uint64, percent int) bool {
	hi, _ := bits.Mul64(h, 100)
	return hi < uint64(percent)
}

// member is an install being placed.
type member struct {
	id     string
	labels labels.Set
	hash   uint64
	wave   int // index into Policy.Waves, -1 while unplaced
	// from is the first share-only wave it may join: a selector wave
	// that matched it but did not take it sends it only to waves after
	// itself.
	from int
}

// Assign puts every install of p's channel in exactly one wave. A nil p
// (a channel without rollout) gives one wave, all, of every install.
//
// Selector waves choose first, in the order declared: an install two
// selectors match is in the first one's wave. Then the share waves
// (count, percent, rest) divide the installs no selector wave took, in
// the order of Hash. See the package doc for what stays put when installs
// are added.
//
// The error is schemas.Problems naming p's file and the wave: a selector
// that matches no install (unless allowEmpty), a selector wave whose
// installs all went to earlier waves, a wave that has fewer installs than
// its minHealthy, installs left in no wave, an install listed twice.
func Assign(p *Policy, installs []Install) (*Waves, error) {
	ms := make([]*member, len(installs))
	for i, in := range installs {
		ms[i] = &member{id: in.ID, labels: labels.Set(in.Labels), wave: -1}
	}
	slices.SortFunc(ms, func(a, b *member) int { return strings.Compare(a.id, b.id) })
	if p == nil {
		return all(ms), nil
	}
	var ps schemas.Problems
	for i := 1; i < len(ms); i++ {
		if ms[i].id == ms[i-1].id {
			ps = append(ps, p.at("", "install %s is listed twice", ms[i].id))
		}
	}
	for _, m := range ms {
		m.hash = Hash(p.Channel, m.id)
	}
	slices.SortFunc(ms, func(a, b *member) int { return cmp.Or(cmp.Compare(a.hash, b.hash), strings.Compare(a.id, b.id)) })

	ps = append(ps, p.selectorWaves(ms)...)
	p.shareWaves(ms)

	w := &Waves{Channel: p.Channel, Declared: true, index: map[string]int{}}
	for i, s := range p.Waves {
		w.Waves = append(w.Waves, Wave{Number: i + 1, Name: s.Name, Installs: []string{},
			Bake: s.Bake, MinHealthy: s.MinHealthy, FailureBudget: s.FailureBudget, OnFailure: s.OnFailure})
	}
	var left []string
	for _, m := range ms {
		if m.wave < 0 {
			left = append(left, m.id)
			continue
		}
		w.Waves[m.wave].Installs = append(w.Waves[m.wave].Installs, m.id)
		w.index[m.id] = m.wave + 1
	}
	if len(left) > 0 {
		slices.Sort(left)
		ps = append(ps, p.at("rollout.waves", "%s in no wave: %s; end the waves with rest: true", count(len(left), "install is", "installs are"), list(left)))
	}
	for i := range w.Waves {
		slices.Sort(w.Waves[i].Installs)
		s, n := p.Waves[i], len(w.Waves[i].Installs)
		if n > 0 && n < s.MinHealthy {
			ps = append(ps, p.at(fmt.Sprintf("rollout.waves[%d].minHealthy", i),
				"is %d, but wave %s has %s: it could never pass", s.MinHealthy, s.Name, count(n, "install", "installs")))
		}
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return w, nil
}

// all is the one wave of a channel without rollout.
func all(ms []*member) *Waves {
	w := &Waves{Waves: []Wave{{Number: 1, Name: AllWave, Installs: make([]string, 0, len(ms)), OnFailure: DefaultOnFailure}}, index: map[string]int{}}
	for _, m := range ms {
		w.Waves[0].Installs = append(w.Waves[0].Installs, m.id)
		w.index[m.id] = 1
	}
	return w
}

// selectorWaves places the installs of the selector waves, in order; ms
// is sorted by hash.
func (p *Policy) selectorWaves(ms []*member) schemas.Problems {
	var ps schemas.Problems
	for i, s := range p.Waves {
		if s.Selector == nil {
			continue
		}
		var matched, free []*member
		for _, m := range ms {
			if s.Selector.Matches(m.labels) {
				matched = append(matched, m)
				if m.wave < 0 {
					free = append(free, m)
				}
			}
		}
		field := fmt.Sprintf("rollout.waves[%d].selector", i)
		switch {
		case s.AllowEmpty:
		case len(matched) == 0:
			ps = append(ps, p.at(field, "%s selects no install of channel %s (allowEmpty: true lets it)", s.Selector, p.Channel))
		case len(free) == 0:
			ps = append(ps, p.at(field, "overlaps earlier waves: every install %s selects is in one already (%s)", s.Selector, waveNames(p, matched)))
		}
		taken := len(free)
		if s.share() {
			// Ordered by a hash of their own, so that the share waves'
			// order (by Hash) does not lose these installs' lowest
			// hashes: a wave of 10 % of EU installs followed by one of
			// 10 % of the channel leaves EU installs in the second.
			var hashes []uint64
			free, hashes = byHash(free, p.Channel+"\x00"+s.Selector.String())
			taken = take(hashes, s.Count, s.Percent)
		}
		for _, m := range free[:taken] {
			m.wave = i
		}
		for _, m := range free[taken:] {
			m.from = max(m.from, i+1)
		}
	}
	return ps
}

// byHash returns ms sorted by the hash of salt and id, and those hashes.
func byHash(ms []*member, salt string) ([]*member, []uint64) {
	type hashed struct {
		m *member
		h uint64
	}
	hs := make([]hashed, len(ms))
	for i, m := range ms {
		hs[i] = hashed{m, Hash(salt, m.id)}
	}
	slices.SortFunc(hs, func(a, b hashed) int { return cmp.Or(cmp.Compare(a.h, b.h), strings.Compare(a.m.id, b.m.id)) })
	out, hashes := make([]*member, len(hs)), make([]uint64, len(hs))
	for i, x := range hs {
		out[i], hashes[i] = x.m, x.h
	}
	return out, hashes
}

// shareWaves places the installs no selector wave took in the share-only
// waves; ms is sorted by hash. Percent waves share out the hash space in
// order: the first percent wave of 10 and the next of 20 take the hashes
// in [0, 10 %) and [10 %, 30 %).
func (p *Policy) shareWaves(ms []*member) {
	percent := 0
	for i, s := range p.Waves {
		if s.Selector != nil {
			continue
		}
		var free []*member
		for _, m := range ms {
			if m.wave < 0 && m.from <= i {
				free = append(free, m)
			}
		}
		n := len(free)
		switch {
		case s.Count > 0:
			n = min(s.Count, n)
		case s.Percent > 0:
			percent += s.Percent
			hashes := make([]uint64, len(free))
			for i, m := range free {
				hashes[i] = m.hash
			}
			n = take(hashes, 0, percent)
		}
		for _, m := range free[:n] {
			m.wave = i
		}
	}
}

// take returns how many of the free installs, whose hashes are given in
// order, a wave takes: count of
// them, or those whose hash lies in the first percent % of the hash space
// (at least one, so that a percent wave of a small fleet is not empty),
// or all when the wave has no share.
func take(hashes []uint64, count, percent int) int {
	switch {
	case count > 0:
		return min(count, len(hashes))
	case percent > 0:
		n := 0
		for n < len(hashes) && below(hashes[n], percent) {
			n++
		}
		if n == 0 && len(hashes) > 0 {
			n = 1
		}
		return n
	}
	return len(hashes)
}

func waveNames(p *Policy, ms []*member) string {
	seen := map[int]bool{}
	var names []string
	for _, m := range ms {
		if m.wave >= 0 && !seen[m.wave] {
			seen[m.wave] = true
			names = append(names, p.Waves[m.wave].Name)
		}
	}
	return strings.Join(names, ", ")
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// list writes at most 10 ids.
func list(ids []string) string {
	if len(ids) > 10 {
		return strings.Join(ids[:10], ", ") + fmt.Sprintf(" and %d more", len(ids)-10)
	}
	return strings.Join(ids, ", ")
}
