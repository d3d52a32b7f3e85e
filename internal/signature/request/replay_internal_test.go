package request

import (
	"fmt"
	"runtime"
	"testing"
)

// TestReplayCacheBounds feeds 100,000 distinct signatures to caches with
// different bounds and traffic shapes: the bounds hold at every step, a
// signature still remembered is refused again, and the one install that
// floods evicts only its own.
func TestReplayCacheBounds(t *testing.T) {
	const n = 100_000
	for _, tc := range []struct {
		name            string
		max, perInstall int
		installs        int // signatures go round-robin over this many
		expires         int64
		wantEntries     int
	}{
		{"one install", 1000, 100, 1, 1 << 40, 100},
		{"many installs, total bound", 1000, 100, 500, 1 << 40, 1000},
		{"a few installs, per-install bound", 1000, 100, 5, 1 << 40, 500},
		{"all expire", 1000, 100, 50, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newReplayCache(tc.max, tc.perInstall)
			for i := range n {
				install := fmt.Sprintf("i%d", i%tc.installs)
				nonce := fmt.Sprintf("nonce-%012d", i)
				exp := tc.expires
				if exp == 0 {
					exp = int64(i) + 1 // expired by the next one
				}
				if c.seen(install, nonce, exp, int64(i)) {
					t.Fatalf("signature %d taken for a replay", i)
				}
				if len(c.entries) > tc.max {
					t.Fatalf("signature %d: %d remembered, bound %d", i, len(c.entries), tc.max)
				}
				if in := c.installs[install]; in.n > tc.perInstall {
					t.Fatalf("signature %d: %s has %d remembered, bound %d", i, install, in.n, tc.perInstall)
				}
			}
			entries, _ := c.len()
			if entries != tc.wantEntries {
				t.Fatalf("%d remembered, want %d", entries, tc.wantEntries)
			}
			last := fmt.Sprintf("i%d", (n-1)%tc.installs)
			if tc.expires != 0 && !c.seen(last, fmt.Sprintf("nonce-%012d", n-1), tc.expires, n) {
				t.Fatal("the latest signature was not refused again")
			}
			checkLinks(t, c)
		})
	}
}

// TestReplayCacheFlood: an install at its bound forgets its own oldest
// signature, not another install's.
func TestReplayCacheFlood(t *testing.T) {
	c := newReplayCache(1000, 10)
	c.seen("globex", "g1", 100, 0)
	for i := range 1000 {
		c.seen("acme", fmt.Sprint("a", i), 100, 0)
	}
	if !c.seen("globex", "g1", 100, 1) {
		t.Fatal("acme's flood evicted globex's signature")
	}
	if c.seen("acme", "a0", 100, 1) != false {
		t.Fatal("acme's oldest signature is still remembered past its bound")
	}
	if !c.seen("acme", "a999", 100, 1) {
		t.Fatal("acme's latest signature is forgotten")
	}
	checkLinks(t, c)
}

// TestReplayCacheExpiry: a signature is remembered until it expires.
func TestReplayCacheExpiry(t *testing.T) {
	c := newReplayCache(0, 0)
	if c.seen("acme", "n", 10, 0) || !c.seen("acme", "n", 10, 9) {
		t.Fatal("not remembered inside its window")
	}
	if c.seen("acme", "n", 20, 10) {
		t.Fatal("remembered past its window")
	}
	if c.seen("globex", "n", 20, 10) {
		t.Fatal("one install's nonce refused for another")
	}
}

// TestReplayCacheMemory measures the heap one remembered signature costs,
// the figure the package doc gives.
func TestReplayCacheMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 262,144 entries")
	}
	const n = 1 << 18
	installs := make([]string, 1000)
	nonces := make([]string, n)
	for i := range installs {
		installs[i] = fmt.Sprintf("i%06d", i)
	}
	for i := range nonces {
		nonces[i] = fmt.Sprintf("%022d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := newReplayCache(n, n)
	for i, nonce := range nonces {
		c.seen(installs[i%len(installs)], nonce, 1<<40, 0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per remembered signature (%d signatures, %d installs)", per, n, len(installs))
	if per > 160 {
		t.Fatalf("%.0f bytes per remembered signature; the package doc says about 80", per)
	}
	runtime.KeepAlive(c)
}

// checkLinks walks both lists: each entry once in the cache's list and
// once in its install's, the counts those of the map.
func checkLinks(t *testing.T, c *replayCache) {
	t.Helper()
	n := 0
	for e := c.head; e != nil; e = e.next {
		if c.entries[e.key] != e {
			t.Fatal("an entry in the list is not in the map")
		}
		n++
	}
	if n != len(c.entries) {
		t.Fatalf("%d entries in the list, %d in the map", n, len(c.entries))
	}
	m := 0
	for id, in := range c.installs {
		k := 0
		for e := in.head; e != nil; e = e.inext {
			if e.install != in {
				t.Fatalf("an entry of %s is in another install's list", id)
			}
			k++
		}
		if k != in.n || k == 0 {
			t.Fatalf("%s: %d entries listed, %d counted", id, k, in.n)
		}
		m += k
	}
	if m != n {
		t.Fatalf("%d entries in installs' lists, %d in all", m, n)
	}
}
