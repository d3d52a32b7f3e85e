package redact

// table finds patterns of one length with a rolling hash (Rabin-Karp): one
// multiply-add per byte of text, a bit test against a filter, and a map
// lookup and a compare only where the filter says a pattern may end. The
// cost is linear in the text and does not grow with the number of
// patterns.
type table struct {
	n      int
	pow    uint64 // hashBase^n
	filter []uint64
	pats   map[uint64][]string
}

const (
	hashBase   = 1099511628211 // the 64-bit FNV prime
	filterBits = 20
)

func addPattern(byLen map[int]*table, p string) {
	t := byLen[len(p)]
	if t == nil {
		t = &table{n: len(p), pow: 1, filter: make([]uint64, 1<<filterBits/64), pats: map[uint64][]string{}}
		for range t.n {
			t.pow *= hashBase
		}
		byLen[len(p)] = t
	}
	var h uint64
	for i := 0; i < len(p); i++ {
		h = h*hashBase + uint64(p[i])
	}
	for _, q := range t.pats[h] {
		if q == p {
			return
		}
	}
	t.pats[h] = append(t.pats[h], p)
	f := h >> (64 - filterBits)
	t.filter[f/64] |= 1 << (f % 64)
}

// scan appends to spans every run of text that equals one of t's
// patterns, in order.
func (t *table) scan(text []byte, spans []span) []span {
	n := t.n
	if len(text) < n {
		return spans
	}
	first := len(spans)
	var h uint64
	for i := 0; i < n-1; i++ {
		h = h*hashBase + uint64(text[i])
	}
	for i := n - 1; i < len(text); i++ {
		h = h*hashBase + uint64(text[i])
		if i >= n {
			h -= uint64(text[i-n]) * t.pow
		}
		f := h >> (64 - filterBits)
		if t.filter[f/64]&(1<<(f%64)) == 0 {
			continue
		}
		w := text[i+1-n : i+1]
		for _, p := range t.pats[h] {
			if string(w) == p {
				if k := len(spans); k > first && spans[k-1].end >= i+1-n {
					spans[k-1].end = i + 1
				} else {
					spans = append(spans, span{i + 1 - n, i + 1})
				}
				break
			}
		}
	}
	return spans
}
