package policy

import (
	"sort"
	"time"

	"github.com/robfig/cron/v3"
)

// Window is one maintenance window: it opens at each of its start times,
// wall-clock times in Location, and stays open for Duration of elapsed
// time.
//
// A start time the clock skips (the hour a change to daylight saving time
// jumps over) opens the window at the instant of the jump, once however
// many start times the gap holds; a start time the clock repeats (the hour
// a change back repeats) opens it at its first occurrence only. So a
// weekly window never goes missing on the night the clocks change, and
// never opens twice.
type Window struct {
	// Name names the window in statuses: the file's name for it, or its
	// place in the file (allow[0]).
	Name string
	// Deny is set for a deny window.
	Deny     bool
	Duration time.Duration
	Location *time.Location

	spec  *cron.SpecSchedule
	times []int // start times, in minutes after midnight, ascending
}

// starBit marks a cron field written as * (see robfig/cron's SpecSchedule).
const starBit = 1 << 63

// timesOfDay lists the start times of s, in minutes after midnight.
func timesOfDay(s *cron.SpecSchedule) []int {
	var out []int
	for h := 0; h < 24; h++ {
		if s.Hour&(1<<uint(h)) == 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if s.Minute&(1<<uint(m)) != 0 {
				out = append(out, h*60+m)
			}
		}
	}
	return out
}

// day is a calendar date, as the window's clock shows it.
type day struct{ t time.Time } // midnight UTC of that date: for arithmetic only

func dayOf(t time.Time, loc *time.Location) day {
	y, m, d := t.In(loc).Date()
	return day{time.Date(y, m, d, 0, 0, 0, 0, time.UTC)}
}

func (d day) add(n int) day { return day{d.t.AddDate(0, 0, n)} }

// matches is cron's day rule: the month, and the day of the month and
// the day of the week, or either of them when neither is *.
func (w *Window) matches(d day) bool {
	s := w.spec
	if s.Month&(1<<uint(d.t.Month())) == 0 {
		return false
	}
	dom := s.Dom&(1<<uint(d.t.Day())) != 0
	dow := s.Dow&(1<<uint(d.t.Weekday())) != 0
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// ever reports whether the window opens at all: some day in eight years
// (two leap days) matches its day rule.
func (w *Window) ever() bool {
	d := day{time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := 0; i < 8*366; i++ {
		if w.matches(d.add(i)) {
			return true
		}
	}
	return false
}

// start is the instant at which start time minute (after midnight) of
// date d opens the window.
func (w *Window) start(d day, minute int) time.Time {
	return resolve(d.t.Add(time.Duration(minute)*time.Minute), w.Location)
}

// resolve returns the instant at which the clock of loc first shows the
// wall-clock time naive (given as a UTC time), or, when the clock skips
// it, the instant the clock jumps over it.
func resolve(naive time.Time, loc *time.Location) time.Time {
	var offsets []int
	for _, probe := range []time.Duration{-18 * time.Hour, 0, 18 * time.Hour} {
		_, off := naive.Add(probe).In(loc).Zone()
		offsets = append(offsets, off)
	}
	var best time.Time
	found := false
	least := offsets[0]
	for _, off := range offsets {
		least = min(least, off)
		t := naive.Add(-time.Duration(off) * time.Second)
		if _, o := t.In(loc).Zone(); o != off {
			continue
		}
		if !found || t.Before(best) {
			best, found = t, true
		}
	}
	if found {
		return best
	}
	// Skipped: with the offset before the jump, naive lands after it.
	start, _ := naive.Add(-time.Duration(least) * time.Second).In(loc).ZoneBounds()
	return start
}

// latestStart is the window's latest start at or before t, looking back
// no further than its duration: ok is false when none is that recent.
func (w *Window) latestStart(t time.Time) (time.Time, bool) {
	first := dayOf(t, w.Location).add(1)
	days := int(w.Duration/(24*time.Hour)) + 3
	for i := 0; i <= days; i++ {
		d := first.add(-i)
		if !w.matches(d) {
			continue
		}
		// Starts are ascending within a day: the first one after t.
		j := sort.Search(len(w.times), func(j int) bool { return w.start(d, w.times[j]).After(t) })
		if j == 0 {
			continue
		}
		s := w.start(d, w.times[j-1])
		if s.Add(w.Duration).After(t) {
			return s, true
		}
		return time.Time{}, false // the latest start is too old
	}
	return time.Time{}, false
}

// open reports whether the window is open at t, and when the occurrence
// that holds t ends.
func (w *Window) open(t time.Time) (bool, time.Time) {
	s, ok := w.latestStart(t)
	if !ok {
		return false, time.Time{}
	}
	return true, s.Add(w.Duration)
}

// nextStart is the window's first start after t, within limit.
func (w *Window) nextStart(t, limit time.Time) (time.Time, bool) {
	for d := dayOf(t, w.Location).add(-1); !d.t.After(limit.Add(48 * time.Hour)); d = d.add(1) {
		if !w.matches(d) {
			continue
		}
		j := sort.Search(len(w.times), func(j int) bool { return w.start(d, w.times[j]).After(t) })
		if j < len(w.times) {
			s := w.start(d, w.times[j])
			return s, !s.After(limit)
		}
	}
	return time.Time{}, false
}
