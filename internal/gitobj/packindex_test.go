package gitobj

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
)

// sampleIndex writes a version 2 index of n objects, the last ones past
// 4 GiB so that the table of 64-bit offsets is used.
func sampleIndex(tb testing.TB, n int) ([]byte, map[plumbing.Hash]uint64) {
	tb.Helper()
	p := &packIndex{checksum: plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")}
	want := map[plumbing.Hash]uint64{}
	for i := range n {
		h := Hash(plumbing.BlobObject, []byte{byte(i), byte(i >> 8)})
		off := uint64(12 + 100*i)
		if i >= n-3 {
			off += 5 << 30
		}
		p.entries = append(p.entries, []idxEntry{{hash: h, off: off, crc: uint32(i)}})
		want[h] = off
	}
	var buf bytes.Buffer
	if err := writeIndex(&buf, p); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes(), want
}

func TestParseIndex(t *testing.T) {
	for _, n := range []int{0, 1, 10, 1000} {
		data, want := sampleIndex(t, max(n, 3))
		idx, err := parseIndex(data)
		if err != nil {
			t.Fatalf("%d objects: %v", n, err)
		}
		for h, off := range want {
			got, ok := idx.find(h)
			if !ok || uint64(got) != off {
				t.Errorf("find %s: %d %v, want %d", h, got, ok, off)
			}
		}
		for _, h := range []plumbing.Hash{plumbing.ZeroHash, plumbing.NewHash("ffffffffffffffffffffffffffffffffffffffff")} {
			if _, ok := idx.find(h); ok {
				t.Errorf("find %s: found, want missing", h)
			}
		}
	}
	data, _ := sampleIndex(t, 10)
	for name, bad := range map[string][]byte{
		"empty":     nil,
		"version 1": append([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 1}, data[8:]...),
		"truncated": data[:len(data)-50],
	} {
		if _, err := parseIndex(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func FuzzParseIndex(f *testing.F) {
	for _, n := range []int{3, 40} {
		data, _ := sampleIndex(f, n)
		f.Add(data)
		f.Add(data[:len(data)-8])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := parseIndex(data)
		if err != nil {
			return
		}
		for i := range idx.count {
			if _, ok := idx.find(idx.name(i)); !ok {
				// Names out of order are not found; that is all.
				continue
			}
			idx.offset(i)
		}
	})
}

func TestApplyDelta(t *testing.T) {
	base := []byte("0123456789abcdefghij")
	tests := []struct {
		name  string
		delta []byte
		want  string
		ok    bool
	}{
		{"copy and insert", []byte{20, 8, 0x91, 2, 4, 4, 'w', 'x', 'y', 'z'}, "2345wxyz", true},
		{"copy past the base", []byte{20, 4, 0x91, 18, 4}, "", false},
		{"wrong base size", []byte{19, 1, 1, 'a'}, "", false},
		{"short target", []byte{20, 2, 1, 'a'}, "", false},
		{"reserved", []byte{20, 1, 0}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := applyDelta(base, tt.delta)
			if (err == nil) != tt.ok || string(got) != tt.want {
				t.Errorf("applyDelta: %q, %v; want %q, ok %v", got, err, tt.want, tt.ok)
			}
		})
	}
}

func FuzzApplyDelta(f *testing.F) {
	f.Add([]byte("0123456789abcdefghij"), []byte{20, 8, 0x91, 2, 4, 4, 'w', 'x', 'y', 'z'})
	f.Add([]byte{}, []byte{0, 0})
	f.Fuzz(func(t *testing.T, base, delta []byte) {
		out, err := applyDelta(base, delta)
		if err != nil {
			return
		}
		_, rest, _ := deltaSize(delta)
		if size, _, _ := deltaSize(rest); uint64(len(out)) != size {
			t.Fatalf("built %d bytes, the delta says %d", len(out), size)
		}
	})
}

// goGitIndex writes p with go-git's index writer.
func goGitIndex(tb testing.TB, p *packIndex) []byte {
	tb.Helper()
	iw := new(idxfile.Writer)
	n := 0
	for _, c := range p.entries {
		n += len(c)
	}
	if err := iw.OnHeader(uint32(n)); err != nil {
		tb.Fatal(err)
	}
	for _, c := range p.entries {
		for _, e := range c {
			iw.Add(e.hash, e.off, e.crc)
		}
	}
	if err := iw.OnFooter(p.checksum); err != nil {
		tb.Fatal(err)
	}
	idx, err := iw.Index()
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := idxfile.NewEncoder(&buf).Encode(idx); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestWriteIndexAsGoGit: writeIndex writes the bytes go-git's writer
// writes, for no object, one, many in any order, offsets past 2 and
// 4 GiB, objects listed twice (the first place wins), and ids that share
// their first bytes (the buckets sortEntries sorts by comparison), the
// entries given in chunks of any length.
func TestWriteIndexAsGoGit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		n      int
		prefix int // bytes of the id fixed to 0xab
		chunk  int
	}{
		{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {300, 0, 7}, {5000, 0, 4096}, {5000, 1, 333}, {3000, 2, 5000}, {500, 19, 64},
	} {
		var all []idxEntry
		for i := range tc.n {
			var h plumbing.Hash
			for k := range h {
				h[k] = byte(rng.Uint32())
				if k < tc.prefix {
					h[k] = 0xab
				}
			}
			off := uint64(12 + 97*i)
			if i%7 == 3 {
				off += uint64(rng.IntN(3)+2) << 30
			}
			all = append(all, idxEntry{hash: h, off: off, crc: rng.Uint32()})
		}
		if tc.n > 2 {
			// The same objects again, elsewhere: the first place wins.
			for _, i := range []int{tc.n / 2, 0, tc.n / 2, tc.n - 1} {
				all = append(all, idxEntry{hash: all[i].hash, off: 1<<20 + uint64(i), crc: 7})
			}
		}
		p := &packIndex{checksum: plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")}
		for c := range slices.Chunk(all, tc.chunk) {
			p.entries = append(p.entries, c)
		}
		var buf bytes.Buffer
		if err := writeIndex(&buf, p); err != nil {
			t.Fatal(err)
		}
		if want := goGitIndex(t, p); !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%d objects, %d bytes shared, in chunks of %d: %d bytes differ from go-git's %d", tc.n, tc.prefix, tc.chunk, buf.Len(), len(want))
		}
	}
}

// BenchmarkWriteIndex writes the index of 100,000 and 1,000,000 objects
// of random ids, given in write order, and reports the time per object:
// sorting them is most of it.
func BenchmarkWriteIndex(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			p := &packIndex{}
			var chunk []idxEntry
			for i := range n {
				var h plumbing.Hash
				for k := range h {
					h[k] = byte(rng.Uint32())
				}
				if len(chunk) == recChunk {
					p.entries = append(p.entries, chunk)
					chunk = nil
				}
				chunk = append(chunk, idxEntry{hash: h, off: uint64(12 + 60*i), crc: rng.Uint32()})
			}
			p.entries = append(p.entries, chunk)
			for b.Loop() {
				if err := writeIndex(io.Discard, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
		})
	}
}

// TestSortEntries checks sortEntries against a stable comparison sort and
// a removal of repeated ids, at sizes on either side of where its second
// counting pass starts and takes more bits, for random ids, ids that
// share their first one to three bytes (the buckets it sorts by
// comparison), and a few ids repeated many times.
func TestSortEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	id := func(shared int, distinct int) plumbing.Hash {
		var h plumbing.Hash
		for k := range h {
			h[k] = byte(rng.Uint32())
			if k < shared {
				h[k] = 0x5a
			}
		}
		if distinct > 0 {
			h = plumbing.Hash{byte(rng.IntN(distinct))}
		}
		return h
	}
	for _, n := range []int{0, 1, 2, 100, 2048, 2049, 4097, 70_000} {
		for _, tc := range []struct {
			name             string
			shared, distinct int
		}{
			{"random", 0, 0}, {"one byte shared", 1, 0}, {"two bytes shared", 2, 0}, {"three bytes shared", 3, 0}, {"five ids", 0, 5},
		} {
			var all []idxEntry
			for i := range n {
				all = append(all, idxEntry{hash: id(tc.shared, tc.distinct), off: uint64(i), crc: rng.Uint32()})
			}
			want := slices.Clone(all)
			slices.SortStableFunc(want, func(a, b idxEntry) int { return bytes.Compare(a.hash[:], b.hash[:]) })
			want = slices.CompactFunc(want, func(a, b idxEntry) bool { return a.hash == b.hash })
			got := sortEntries(slices.Collect(slices.Chunk(all, 1000)))
			if !slices.Equal(got, want) {
				t.Errorf("%d entries, %s: sortEntries differs from a stable sort", n, tc.name)
			}
		}
	}
}
