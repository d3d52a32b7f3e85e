package trust

import (
	"errors"
	"testing"
)

// chainOf is versions 1..n, each signed by root keys A and B (threshold 2).
func chainOf(t testing.TB, n int) []*Root {
	t.Helper()
	var rs []*Root
	for v := 1; v <= n; v++ {
		rs = append(rs, signedRoot(t, content(t, int64(v), 2, "A", "B", "C"), "A", "B"))
	}
	return rs
}

func files(t testing.TB, rs ...*Root) map[string][]byte {
	t.Helper()
	m := map[string][]byte{"install.json": []byte("{}"), "components/a.json": []byte("{}")}
	for _, r := range rs {
		b, err := r.Encoded()
		if err != nil {
			t.Fatal(err)
		}
		m[FileName(r.Version)] = b
	}
	return m
}

// TestInForce: the version in force is the newest the chain reaches from
// the one held through the versions carried; older ones carried change
// nothing, and one that does not chain refuses.
func TestInForce(t *testing.T) {
	rs := chainOf(t, 3)
	below := signedRoot(t, content(t, 4, 2, "A", "B", "C"), "A")
	for _, tc := range []struct {
		name    string
		held    *Root
		carried map[string][]byte
		want    int64
		err     error
	}{
		{"nothing carried", rs[1], files(t), 2, nil},
		{"newer carried", rs[0], files(t, rs...), 3, nil},
		{"only older carried (a rollback)", rs[2], files(t, rs[0]), 3, nil},
		{"below threshold", rs[2], files(t, append(rs, below)...), 0, ErrThreshold},
		{"skips a version", rs[0], files(t, rs[0], rs[2]), 0, ErrSkip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			carried, err := LoadFiles(tc.carried)
			if err != nil {
				t.Fatal(err)
			}
			got, err := InForce(tc.held, carried, t0)
			if !errors.Is(err, tc.err) {
				t.Fatalf("InForce: %v, want %v", err, tc.err)
			}
			if err == nil && got.Version != tc.want {
				t.Errorf("version %d in force, want %d", got.Version, tc.want)
			}
		})
	}
	if _, err := LoadFiles(map[string][]byte{Dir + "/2.json": []byte("{}"), Dir + "/x": nil}); err == nil {
		t.Error("LoadFiles took a stray file and a bad version")
	}
}

// FuzzInForce: whatever a commit carries as version 2, InForce never
// panics, and what it puts in force beyond the held version is signed by
// a threshold of the held version's root keys.
func FuzzInForce(f *testing.F) {
	rs := chainOf(f, 2)
	good, err := rs[1].Encoded()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"signed":{},"signatures":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		carried, err := LoadFiles(map[string][]byte{FileName(2): data})
		if err != nil {
			return
		}
		got, err := InForce(rs[0], carried, t0)
		if err != nil || got.Version == 1 {
			return
		}
		if err := Verify(rs[0], got, t0); err != nil {
			t.Fatalf("version %d in force does not follow version 1: %v", got.Version, err)
		}
	})
}

// BenchmarkInForce is what the agent spends on the root for each new
// desired commit: the chain from the version it holds through the three
// versions a commit carries (two of them older, skipped).
func BenchmarkInForce(b *testing.B) {
	rs := chainOf(b, 3)
	carried, err := LoadFiles(files(b, rs...))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := InForce(rs[1], carried, t0); err != nil {
			b.Fatal(err)
		}
	}
}
