package server

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"nuon.dev/nuon/fleet"
)

// TestStatusTimes: the runs hold what a sorted list holds through adds
// and removes of repeated and scattered times, across run splits and
// emptied runs, and count from any time as a walk of the list does.
func TestStatusTimes(t *testing.T) {
	for _, c := range []struct {
		name   string
		spread int64 // times drawn from [0, spread)
		ops    int
	}{
		{"repeated", 3, 5000},
		{"few", 100, 5000},
		{"scattered", 1 << 40, 20000},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(c.spread)))
			var s statusTimes
			var want []int64
			check := func(step int) {
				t.Helper()
				var got []int64
				for _, run := range s.runs {
					if len(run) == 0 || len(run) > 2*timesRun {
						t.Fatalf("step %d: a run of %d", step, len(run))
					}
					got = append(got, run...)
				}
				if !slices.Equal(got, want) || s.n != len(want) {
					t.Fatalf("step %d: runs hold %d times (n %d), want %d", step, len(got), s.n, len(want))
				}
				var sum int64
				for _, v := range want {
					sum += v
				}
				if s.sum != sum {
					t.Fatalf("step %d: sum %d, want %d", step, s.sum, sum)
				}
				for range 4 {
					from := r.Int64N(c.spread+2) - 1
					i, _ := slices.BinarySearch(want, from)
					if got := s.since(from); got != len(want)-i {
						t.Fatalf("step %d: since(%d) = %d, want %d", step, from, got, len(want)-i)
					}
				}
			}
			for step := range c.ops {
				v := r.Int64N(c.spread)
				// Grow to a few runs, then shrink to none now and then.
				if len(want) > 0 && (r.IntN(3) == 0 || step%1500 > 1100) {
					v = want[r.IntN(len(want))]
					if !s.remove(v) {
						t.Fatalf("step %d: %d not removed", step, v)
					}
					i, _ := slices.BinarySearch(want, v)
					want = slices.Delete(want, i, i+1)
				} else {
					s.add(v)
					i, _ := slices.BinarySearch(want, v)
					want = slices.Insert(want, i, v)
				}
				if step%97 == 0 {
					check(step)
				}
			}
			check(c.ops)
			if s.remove(c.spread) {
				t.Error("removed a time it does not hold")
			}
			all := slices.Clone(want)
			s.reset(all)
			check(-1)
		})
	}
}

// TestIndexStatusAges: the status ages and quiet count the index keeps as
// it is patched are what a walk of its entries gives, after a first
// build and after installs move one at a time, are removed or lose
// their status.
func TestIndexStatusAges(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	quiet := 10 * time.Minute
	r := rand.New(rand.NewPCG(7, 7))
	entry := func(id string) *viewEntry {
		in := &viewInstall{ID: id}
		if r.IntN(5) > 0 {
			// Ages on and around the buckets' bounds and the quiet age.
			age := time.Duration(statusAgeBuckets[r.IntN(len(statusAgeBuckets))]*float64(time.Second)) + time.Duration(r.IntN(3)-1)*time.Millisecond
			if r.IntN(4) == 0 {
				age = quiet + time.Duration(r.IntN(3)-1)*time.Millisecond
			}
			in.Status = &fleet.Install{Install: id, Phase: "Ready", Time: now.Add(-age)}
		}
		return newEntry(in, nil, now, nil)
	}
	x := newFleetIndex()
	x.now = now
	ids := make([]string, 2000)
	first := map[string]*viewEntry{}
	for i := range ids {
		ids[i] = indexTestID(i)
		first[ids[i]] = entry(ids[i])
	}
	x.apply(first)
	walk := func() (count uint64, sum float64, buckets map[float64]uint64, q int) {
		buckets = map[float64]uint64{}
		for _, e := range x.byID {
			if e.row == nil {
				q++
				continue
			}
			age := now.Sub(e.row.Time)
			if age > quiet {
				q++
			}
			count++
			sum += age.Seconds()
			for _, b := range statusAgeBuckets {
				if age.Seconds() <= b {
					buckets[b]++
				}
			}
		}
		return count, sum, buckets, q
	}
	check := func(when string) {
		t.Helper()
		wc, ws, wb, wq := walk()
		gc, gs, gb, older := x.times.ages(now, statusAgeBuckets, quiet)
		gq := older + x.summary.Installs - x.times.n
		if gc != wc || gq != wq || !maps.Equal(gb, wb) || gs-ws > 1e-3 || ws-gs > 1e-3 {
			t.Fatalf("%s: kept count %d, sum %.3f, quiet %d, buckets %v; walked %d, %.3f, %d, %v", when, gc, gs, gq, gb, wc, ws, wq, wb)
		}
	}
	check("first build")
	for step := range 300 {
		id := ids[r.IntN(len(ids))]
		var e *viewEntry
		if r.IntN(6) > 0 {
			e = entry(id)
		}
		x.apply(map[string]*viewEntry{id: e})
		if step%10 == 0 {
			check("a move")
		}
	}
	check("moves")
}

// indexTestID is the id of the i-th install of a test index.
func indexTestID(i int) string { return fmt.Sprintf("i%06d", i) }
