package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The zones of the schedule test: one without daylight saving time, one
// a half-hour off UTC, and four that change their clocks — by a whole hour
// at 02:00 (New York), at 02:00/03:00 (Berlin), at midnight (Santiago,
// where midnight is skipped) and by half an hour (Lord Howe).
var testZones = []string{"UTC", "Asia/Kolkata", "America/New_York", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"}

// dstDays are dates of clock changes in those zones, around which the
// test asks most of its questions.
var dstDays = []struct {
	zone string
	day  time.Time
}{
	{"America/New_York", time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)},     // forward at 02:00
	{"America/New_York", time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)},    // back at 02:00
	{"Europe/Berlin", time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC)},       // forward at 02:00
	{"Europe/Berlin", time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC)},      // back at 03:00
	{"America/Santiago", time.Date(2026, 4, 5, 12, 0, 0, 0, time.UTC)},     // back at midnight
	{"America/Santiago", time.Date(2026, 9, 6, 12, 0, 0, 0, time.UTC)},     // forward at midnight
	{"Australia/Lord_Howe", time.Date(2026, 4, 4, 12, 0, 0, 0, time.UTC)},  // back half an hour at 02:00
	{"Australia/Lord_Howe", time.Date(2026, 10, 3, 12, 0, 0, 0, time.UTC)}, // forward half an hour at 02:00
}

// genWindow is a window as the test made it: its fields as sets, from
// which it writes both the policy file's text and its own brute-force
// matcher, independent of the parser.
type genWindow struct {
	zone     string
	duration time.Duration
	weekly   bool
	minutes  []int
	hours    []int
	domStar  bool
	doms     []int
	dowStar  bool
	dows     []int
}

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func pick(r *rand.Rand, from []int, n int) []int {
	out := []int{}
	for len(out) < n {
		v := from[r.IntN(len(from))]
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// randomWindow makes a window, most of the time in zone (the zone whose
// clock change the scenario is about).
func randomWindow(r *rand.Rand, zone string) genWindow {
	w := genWindow{zone: zone, domStar: true, dowStar: true}
	if r.IntN(4) == 0 {
		w.zone = testZones[r.IntN(len(testZones))]
	}
	durations := []time.Duration{time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 90 * time.Minute, 2 * time.Hour, 5 * time.Hour, 26 * time.Hour}
	w.duration = durations[r.IntN(len(durations))]
	// Hours near the clock changes (0-3) most of the time.
	hours := []int{0, 0, 1, 1, 2, 2, 2, 3, 3, 12, 22, 23}
	if r.IntN(2) == 0 {
		w.weekly = true
		w.minutes = []int{[]int{0, 15, 30, 45}[r.IntN(4)]}
		w.hours = []int{hours[r.IntN(len(hours))]}
		w.dowStar = false
		w.dows = pick(r, []int{0, 1, 2, 3, 4, 5, 6}, 1+r.IntN(4))
		return w
	}
	w.minutes = pick(r, []int{0, 10, 15, 30, 45, 59}, 1+r.IntN(3))
	w.hours = pick(r, hours, 1+r.IntN(3))
	switch r.IntN(4) {
	case 0:
		w.dowStar = false
		w.dows = pick(r, []int{0, 1, 2, 3, 4, 5, 6}, 1+r.IntN(3))
	case 1:
		w.domStar = false
		w.doms = pick(r, []int{1, 4, 5, 6, 8, 25, 29, 31}, 1+r.IntN(3))
	case 2:
		w.domStar, w.dowStar = false, false
		w.doms = pick(r, []int{1, 4, 5, 6, 8, 25, 29, 31}, 1+r.IntN(2))
		w.dows = pick(r, []int{0, 1, 2, 3, 4, 5, 6}, 1+r.IntN(2))
	}
	return w
}

func join(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}

// yaml writes the window as an entry of allow: or deny:.
func (w genWindow) yaml(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    timezone: %s\n    duration: %s\n", name, w.zone, w.duration)
	if w.weekly {
		days := make([]string, len(w.dows))
		for i, d := range w.dows {
			days[i] = dayNames[d]
		}
		fmt.Fprintf(&b, "    days: [%s]\n    start: \"%02d:%02d\"\n", strings.Join(days, ", "), w.hours[0], w.minutes[0])
		return b.String()
	}
	dom, dow := "*", "*"
	if !w.domStar {
		dom = join(w.doms)
	}
	if !w.dowStar {
		dow = join(w.dows)
	}
	fmt.Fprintf(&b, "    cron: \"%s %s %s * %s\"\n", join(w.minutes), join(w.hours), dom, dow)
	return b.String()
}

// wallMatches is cron's rule, written out again: the time of day, and the
// day of the month and of the week (either, when neither is *).
func (w genWindow) wallMatches(t time.Time) bool {
	if !slices.Contains(w.minutes, t.Minute()) || !slices.Contains(w.hours, t.Hour()) {
		return false
	}
	dom := w.domStar || slices.Contains(w.doms, t.Day())
	dow := w.dowStar || slices.Contains(w.dows, int(t.Weekday()))
	if !w.domStar && !w.dowStar {
		return dom || dow
	}
	return dom && dow
}

func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), 0, 0, time.UTC)
}

// bruteOpen says, minute by minute from from, whether the window is open,
// from the rule as documented: a wall-clock start opens it at its first
// occurrence; start times in a skipped stretch of clock open it at the
// jump, once; it stays open for its duration.
func (w genWindow) bruteOpen(from time.Time, minutes int) []bool {
	loc, err := time.LoadLocation(w.zone)
	if err != nil {
		panic(err)
	}
	open := make([]bool, minutes)
	var until time.Time
	for i := range minutes {
		m := from.Add(time.Duration(i) * time.Minute)
		wall := m.In(loc)
		start := false
		if w.wallMatches(wall) {
			start = true
			for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
				if naive(m.Add(-back).In(loc)).Equal(naive(wall)) {
					start = false // a repeated wall-clock time
				}
			}
		}
		prev := naive(m.Add(-time.Minute).In(loc))
		for skipped := prev.Add(time.Minute); skipped.Before(naive(wall)); skipped = skipped.Add(time.Minute) {
			if w.wallMatches(skipped) {
				start = true // the clock jumped over a start time
			}
		}
		if start && m.Add(w.duration).After(until) {
			until = m.Add(w.duration)
		}
		open[i] = m.Before(until)
	}
	return open
}

// TestScheduleAgainstBruteForce: with a seeded random set of policies
// (allow and deny windows, weekly and cron, in six time zones, around
// clock changes, sometimes a hold), Decide is asked at thousands of
// instants and compared with a minute-by-minute evaluation of the rule.
// No decision may allow a change inside a deny window, outside every
// allow window or under a hold; every decision must match, and so must
// every next opening the brute force can see.
func TestScheduleAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 4))
	const (
		lookBack = 3 * 24 * 60  // minutes of history before the questions
		span     = 6 * 24 * 60  // minutes asked about
		ahead    = 16 * 24 * 60 // minutes after, to see next openings
	)
	asked, allowedSeen, wrongAllowed, wrongDenied, opensChecked, wrongOpens := 0, 0, 0, 0, 0, 0
	scenarios := 96
	if raceEnabled || testing.Short() {
		scenarios = 16
	}
	for scenario := range scenarios {
		dst := dstDays[scenario%len(dstDays)]
		base := dst.day.Add(-3 * 24 * time.Hour)
		from := base.Add(-lookBack * time.Minute)
		total := lookBack + span + ahead
		var allow, deny []genWindow
		for range r.IntN(4) {
			allow = append(allow, randomWindow(r, dst.zone))
		}
		for range r.IntN(3) {
			deny = append(deny, randomWindow(r, dst.zone))
		}
		held := r.IntN(10) == 0
		var b strings.Builder
		b.WriteString("apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n")
		if held {
			b.WriteString("hold: {reason: audit}\n")
		}
		if len(allow) > 0 {
			b.WriteString("allow:\n")
			for i, w := range allow {
				b.WriteString(w.yaml(fmt.Sprintf("a%d", i)))
			}
		}
		if len(deny) > 0 {
			b.WriteString("deny:\n")
			for i, w := range deny {
				b.WriteString(w.yaml(fmt.Sprintf("d%d", i)))
			}
		}
		c, err := Parse("policy.yaml", []byte(b.String()))
		if err != nil {
			if strings.Contains(err.Error(), "never open") {
				continue
			}
			t.Fatalf("scenario %d: %v\n%s", scenario, err, b.String())
		}
		// The brute force, minute by minute.
		allowed := make([]bool, total)
		anyAllow := make([]bool, total)
		for _, w := range allow {
			for i, o := range w.bruteOpen(from, total) {
				anyAllow[i] = anyAllow[i] || o
			}
		}
		denied := make([]bool, total)
		for _, w := range deny {
			for i, o := range w.bruteOpen(from, total) {
				denied[i] = denied[i] || o
			}
		}
		for i := range total {
			allowed[i] = !held && !denied[i] && (len(allow) == 0 || anyAllow[i])
		}
		for q := lookBack; q < lookBack+span; q += 1 + r.IntN(31) {
			now := from.Add(time.Duration(q)*time.Minute + time.Duration(r.IntN(60))*time.Second)
			d := Decide(c, now)
			asked++
			if d.Allowed {
				allowedSeen++
			}
			switch {
			case d.Allowed && !allowed[q]:
				wrongAllowed++
				if wrongAllowed <= 5 {
					t.Errorf("scenario %d: allowed at %s (%s), the rule says no (held %v, denied %v, allow windows %d open %v)\n%s",
						scenario, now.Format(time.RFC3339), d.Window, held, denied[q], len(allow), anyAllow[q], b.String())
				}
				continue
			case !d.Allowed && allowed[q]:
				wrongDenied++
				if wrongDenied <= 5 {
					t.Errorf("scenario %d: deferred at %s (%s), the rule allows\n%s", scenario, now.Format(time.RFC3339), d.Message, b.String())
				}
				continue
			case d.Allowed || held:
				continue
			}
			next := -1
			for i := q + 1; i < total; i++ {
				if allowed[i] {
					next = i
					break
				}
			}
			end := from.Add(time.Duration(total) * time.Minute)
			if next < 0 && (d.Opens.IsZero() || !d.Opens.Before(end)) {
				continue // neither sees an opening within the brute force's range
			}
			opensChecked++
			want := time.Time{}
			if next >= 0 {
				want = from.Add(time.Duration(next) * time.Minute)
			}
			if !d.Opens.Equal(want) {
				wrongOpens++
				if wrongOpens <= 5 {
					t.Errorf("scenario %d: at %s opens %s, the rule says %s\n%s", scenario, now.Format(time.RFC3339), d.Opens.Format(time.RFC3339), want.Format(time.RFC3339), b.String())
				}
			}
		}
	}
	t.Logf("%d decisions (%d allowed), %d next openings checked: %d allowed wrongly, %d deferred wrongly, %d openings wrong",
		asked, allowedSeen, opensChecked, wrongAllowed, wrongDenied, wrongOpens)
	if asked < 50*scenarios || allowedSeen == 0 || allowedSeen == asked || opensChecked == 0 {
		t.Errorf("the test asked too little: %d decisions, %d allowed, %d openings", asked, allowedSeen, opensChecked)
	}
}
