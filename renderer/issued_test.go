package renderer

import (
	"errors"
	"math"
	"testing"
)

func TestNextGeneration(t *testing.T) {
	if g, err := nextGeneration(issued{gen: 41}); err != nil || g != 42 {
		t.Errorf("next of 41: %d, %v", g, err)
	}
	if g, err := nextGeneration(issued{}); err != nil || g != 1 {
		t.Errorf("next of none: %d, %v", g, err)
	}
	if _, err := nextGeneration(issued{gen: math.MaxInt64}); !errors.Is(err, errGenerationOverflow) {
		t.Errorf("next of the largest generation: %v, want an overflow error", err)
	}
}

func FuzzParseIssued(f *testing.F) {
	f.Add([]byte("7 0123456789abcdef0123456789abcdef01234567\n"))
	f.Add([]byte("9223372036854775807 0123456789abcdef0123456789abcdef01234567"))
	f.Add([]byte("0 0123456789abcdef0123456789abcdef01234567\n"))
	f.Add([]byte("-1 zz\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := parseIssued(data)
		if err != nil {
			return
		}
		if in.gen < 1 {
			t.Fatalf("accepted %q as %+v", data, in)
		}
		again, err := parseIssued(in.bytes())
		if err != nil || again != in {
			t.Fatalf("round trip of %+v: %+v, %v", in, again, err)
		}
	})
}
