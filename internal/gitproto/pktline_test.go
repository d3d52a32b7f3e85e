package gitproto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// packet is one decoded packet, for comparisons.
type packet struct {
	Kind pktKind
	Data string
}

// readAll decodes packets until an error.
func readAll(in string) ([]packet, error) {
	p := newPktReader(strings.NewReader(in))
	var out []packet
	for {
		kind, data, err := p.next()
		if err != nil {
			return out, err
		}
		out = append(out, packet{kind, string(data)})
	}
}

func TestPktReader(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     []packet
		protocol bool // ends with ErrProtocol rather than running out
	}{
		{name: "empty", in: ""},
		{name: "special packets", in: "000000010002", want: []packet{{pktFlush, ""}, {pktDelim, ""}, {pktEnd, ""}}},
		{name: "data", in: "000ahello\n0004" + "0000", want: []packet{{pktData, "hello\n"}, {pktData, ""}, {pktFlush, ""}}},
		{name: "upper-case hex", in: "000Ahello\n", want: []packet{{pktData, "hello\n"}}},
		{name: "largest packet", in: "fff0" + strings.Repeat("x", pktMaxData), want: []packet{{pktData, strings.Repeat("x", pktMaxData)}}},
		{name: "too large", in: "fff1" + strings.Repeat("x", pktMaxData+1), protocol: true},
		{name: "length 3", in: "0003", protocol: true},
		{name: "not hex", in: "00g1", protocol: true},
		{name: "sign", in: "-001", protocol: true},
		{name: "short header", in: "00"},
		{name: "short payload", in: "000ahel"},
		{name: "after good packets", in: "0000zzzz", want: []packet{{pktFlush, ""}}, protocol: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("packets (-want +got):\n%s", diff)
			}
			if tt.protocol && !errors.Is(err, ErrProtocol) {
				t.Errorf("error = %v, want ErrProtocol", err)
			}
			if !tt.protocol && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error = %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}

func TestPktReaderLine(t *testing.T) {
	p := newPktReader(strings.NewReader(pkt("a\n") + pkt("b") + pkt("ERR no access\n") + "0000"))
	for _, want := range []string{"a", "b"} {
		if _, got, err := p.line(); err != nil || got != want {
			t.Fatalf("line() = %q, %v; want %q", got, err, want)
		}
	}
	_, _, err := p.line()
	if re, ok := errors.AsType[*RemoteError](err); !ok || re.Message != "no access" {
		t.Fatalf("line() error = %v, want RemoteError no access", err)
	}
	if kind, _, err := p.line(); kind != pktFlush || err != nil {
		t.Fatalf("line() = %v, %v; want a flush", kind, err)
	}
}

func TestPktWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &pktWriter{w: &buf}
	w.line("command=ls-refs")
	w.delim()
	w.data([]byte{})
	w.data([]byte(strings.Repeat("y", pktMaxData)))
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(buf.String())
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading back: %v", err)
	}
	want := []packet{{pktData, "command=ls-refs\n"}, {pktDelim, ""}, {pktData, ""}, {pktData, strings.Repeat("y", pktMaxData)}, {pktFlush, ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(buf.String(), "0014command=ls-refs\n00010004fff0") {
		t.Errorf("encoding = %.40q", buf.String())
	}

	w = &pktWriter{w: &buf}
	if err := w.data(make([]byte, pktMaxData+1)); err == nil {
		t.Fatal("data accepted a payload over the limit")
	}
	if err := w.flush(); err == nil {
		t.Fatal("the writer's error did not stick")
	}
}

func FuzzPktLine(f *testing.F) {
	for _, seed := range []string{
		"", "0000", "0001", "0002", "0003", "0004", "000ahello\n0000",
		advertisement, "fff0", "ffff", "00zz", "0005\x01",
		pkt("ERR boom\n") + "0000",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readAll(string(in))
		if err == nil {
			t.Fatal("readAll ended without an error")
		}
		if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error %v is neither ErrProtocol nor io.ErrUnexpectedEOF", err)
		}
		// What was read encodes back to packets that read the same.
		var buf bytes.Buffer
		w := &pktWriter{w: &buf}
		for _, p := range got {
			switch p.Kind {
			case pktData:
				w.data([]byte(p.Data))
			case pktFlush:
				w.flush()
			case pktDelim:
				w.delim()
			case pktEnd:
				w.special("0002")
			}
		}
		if w.err != nil {
			t.Fatal(w.err)
		}
		again, _ := readAll(buf.String())
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		if buf.Len() > len(in) {
			t.Fatalf("%d packets re-encode to %d bytes, more than the %d read", len(got), buf.Len(), len(in))
		}
	})
}
