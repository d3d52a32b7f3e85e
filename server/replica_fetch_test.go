package server

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

// FuzzReplicaPackStream: whatever answers a replica's fetch, reading it
// ends (with the pack or an error) without a panic; and a pack sent in a
// packfile section on side band 1, among progress messages and after the
// sections git may send first, is read back byte for byte.
func FuzzReplicaPackStream(f *testing.F) {
	section := func(pack []byte) []byte {
		b := pkt(nil, "acknowledgments\n")
		b = pkt(b, "ready\n")
		b = append(b, pktDelim...)
		b = pkt(b, "packfile\n")
		b = sideband(b, 2, []byte("Counting objects\n"))
		b = sideband(b, 1, pack)
		return append(b, pktFlush...)
	}
	f.Add(section([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")), []byte("PACK"))
	f.Add(pkt(nil, "ERR upload-pack: not our ref\n"), []byte{})
	f.Add(append(pkt(nil, "packfile\n"), sideband(nil, 3, []byte("fatal: bad object"))...), bytes.Repeat([]byte{1}, 70000))
	f.Add([]byte("0000"), []byte(nil))
	f.Fuzz(func(t *testing.T, stream, pack []byte) {
		if r, err := replicaPackStream(bufio.NewReader(bytes.NewReader(stream))); err == nil {
			io.Copy(io.Discard, io.LimitReader(r, 1<<20))
		}
		r, err := replicaPackStream(bufio.NewReader(bytes.NewReader(section(pack))))
		if err != nil {
			t.Fatalf("a well-formed answer: %v", err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, pack) {
			t.Fatalf("read back %d bytes (%v), sent %d", len(got), err, len(pack))
		}
	})
}

// TestReplicaPackStreamRefuses: an answer that ends before its pack, one
// that carries an error on band 3 or an ERR line, and a pack cut off
// before its flush packet are errors, never a shorter pack.
func TestReplicaPackStreamRefuses(t *testing.T) {
	pack := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	whole := append(sideband(pkt(nil, "packfile\n"), 1, pack), pktFlush...)
	for _, c := range []struct {
		name   string
		stream []byte
	}{
		{"no packfile section", append(pkt(nil, "acknowledgments\n"), pktFlush...)},
		{"an ERR line", pkt(nil, "ERR upload-pack: not our ref 1234\n")},
		{"an error on band 3", append(sideband(sideband(pkt(nil, "packfile\n"), 1, pack[:4]), 3, []byte("fatal: out of memory")), pktFlush...)},
		{"cut before the flush", whole[:len(whole)-4]},
		{"cut inside a packet", whole[:len(whole)-10]},
		{"a bad band", append(sideband(pkt(nil, "packfile\n"), 7, pack), pktFlush...)},
		{"empty", nil},
	} {
		r, err := replicaPackStream(bufio.NewReader(bytes.NewReader(c.stream)))
		if err == nil {
			_, err = io.ReadAll(r)
		}
		if err == nil {
			t.Errorf("%s: read without an error", c.name)
		}
	}
}
