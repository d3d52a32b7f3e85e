package gitobj

import (
	"bytes"
	"compress/zlib"
	"errors"
	"io"
	"testing"
)

// zlibOf is data as zlib writes it at level.
func zlibOf(data []byte, level int) []byte {
	var b bytes.Buffer
	w, _ := zlib.NewWriterLevel(&b, level)
	w.Write(data)
	w.Close()
	return b.Bytes()
}

// FuzzUnstore: whatever the bytes, unstore never panics; what it returns
// is what zlib reads of them, the whole stream, checksum checked; a
// stream it leaves to the inflater (errNotStored) is unchanged; the
// stored streams zlib writes are all taken.
func FuzzUnstore(f *testing.F) {
	long := bytes.Repeat([]byte("an entry of a tree\x00"), 8000) // over two blocks
	for _, data := range [][]byte{nil, []byte("x"), []byte("tree 5\x00hello"), long} {
		f.Add(zlibOf(data, zlib.NoCompression))
		f.Add(zlibOf(data, zlib.BestSpeed))
	}
	stored := zlibOf(long, zlib.NoCompression)
	f.Add(stored[:len(stored)-1])
	f.Add(append(bytes.Clone(stored), 0))
	bad := bytes.Clone(stored)
	bad[len(bad)-1] ^= 1
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		zr, zerr := zlib.NewReader(bytes.NewReader(data))
		var want []byte
		if zerr == nil {
			want, zerr = io.ReadAll(zr)
		}
		for _, sum := range []bool{true, false} {
			in := bytes.Clone(data)
			got, err := unstore(in, sum)
			switch {
			case errors.Is(err, errNotStored):
				if !bytes.Equal(in, data) {
					t.Fatal("a stream left to the inflater was changed")
				}
			case err != nil:
			case sum && zerr != nil:
				t.Fatalf("unstore took a stream zlib refuses (%v)", zerr)
			case zerr == nil && !bytes.Equal(got, want):
				t.Fatalf("unstore read %d bytes, zlib %d", len(got), len(want))
			}
		}
		// What zlib writes stored is taken whole.
		if zerr == nil {
			s := zlibOf(want, zlib.NoCompression)
			got, err := unstore(bytes.Clone(s), true)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("a stored stream of %d bytes: %v", len(want), err)
			}
		}
	})
}
