package server

import (
	"slices"
	"time"
)

// statusTimes is the time of every install's newest status in the fleet
// index (Unix milliseconds), a sorted multiset kept as the index is
// patched, so that /metrics takes its status ages from it rather than
// walking a million entries per scrape: how many statuses are newer than
// a time is a search in each of a few runs, and their sum of ages is the
// count times now less the times' sum.
//
// The times are kept in sorted runs of at most 2·timesRun: a time added
// or removed moves one run's tail, not the fleet's.
type statusTimes struct {
	runs [][]int64 // each sorted and not empty; each run's last ≤ the next's first
	n    int
	sum  int64 // of the times: 1,000,000 times of this century fit in an int64
}

// timesRun is the length a run is split at twice of.
const timesRun = 512

// run is the first run whose last time is at least t (len(s.runs): none).
func (s *statusTimes) run(t int64) int {
	i, _ := slices.BinarySearchFunc(s.runs, t, func(r []int64, t int64) int {
		if r[len(r)-1] < t {
			return -1
		}
		return 1
	})
	return i
}

// add adds t.
func (s *statusTimes) add(t int64) {
	s.n++
	s.sum += t
	if len(s.runs) == 0 {
		s.runs = append(s.runs, []int64{t})
		return
	}
	i := min(s.run(t), len(s.runs)-1)
	r := s.runs[i]
	j, _ := slices.BinarySearch(r, t)
	r = slices.Insert(r, j, t)
	if len(r) <= 2*timesRun {
		s.runs[i] = r
		return
	}
	head, tail := r[:len(r)/2:len(r)/2], slices.Clone(r[len(r)/2:])
	s.runs[i] = head
	s.runs = slices.Insert(s.runs, i+1, tail)
}

// remove removes one t; false when s holds none.
func (s *statusTimes) remove(t int64) bool {
	i := s.run(t)
	if i == len(s.runs) {
		return false
	}
	r := s.runs[i]
	j, ok := slices.BinarySearch(r, t)
	if !ok {
		return false
	}
	s.n--
	s.sum -= t
	if r = slices.Delete(r, j, j+1); len(r) == 0 {
		s.runs = slices.Delete(s.runs, i, i+1)
	} else {
		s.runs[i] = r
	}
	return true
}

// since is how many times are at or after t.
func (s *statusTimes) since(t int64) int {
	i := s.run(t)
	if i == len(s.runs) {
		return 0
	}
	j, _ := slices.BinarySearch(s.runs[i], t)
	n := len(s.runs[i]) - j
	for _, r := range s.runs[i+1:] {
		n += len(r)
	}
	return n
}

// reset makes s hold times (which it sorts and keeps).
func (s *statusTimes) reset(times []int64) {
	slices.Sort(times)
	*s = statusTimes{n: len(times)}
	for len(times) > 0 {
		k := min(timesRun, len(times))
		s.runs = append(s.runs, times[:k:k])
		times = times[k:]
	}
	for _, r := range s.runs {
		for _, t := range r {
			s.sum += t
		}
	}
}

// statusMillis is a status time as statusTimes keeps it.
func statusMillis(t time.Time) int64 { return t.UnixMilli() }

// statusAges is the histogram of the ages of the statuses in s at now:
// their count, the sum of their ages in seconds, and how many are at
// most each of bounds seconds old (statusAgeBuckets), as
// prometheus.MustNewConstHistogram takes them; and how many are older
// than quiet.
func (s *statusTimes) ages(now time.Time, bounds []float64, quiet time.Duration) (count uint64, sum float64, buckets map[float64]uint64, older int) {
	ms := statusMillis(now)
	buckets = make(map[float64]uint64, len(bounds))
	for _, b := range bounds {
		// age ≤ b: the time is at or after now − b.
		buckets[b] = uint64(s.since(ms - int64(b*1000)))
	}
	older = s.n - s.since(ms-quiet.Milliseconds())
	// A time exactly quiet old is not older than quiet.
	return uint64(s.n), float64(int64(s.n)*ms-s.sum) / 1000, buckets, older
}
