package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseV2Request(t *testing.T) {
	h := strings.Repeat("a", 40)
	tests := []struct {
		name string
		in   string
		want v2Request
		err  string
	}{
		{name: "ls-refs", in: string(pkt(pkt(pkt(nil, "command=ls-refs\n"), "agent=git/2.39\n"), "object-format=sha1\n")) + pktDelim +
			string(pkt(pkt(nil, "ref-prefix refs/heads/nuon/installs/acme\n"), "ref-prefix refs/heads/nuon/status/acme")) + pktFlush,
			want: v2Request{command: "ls-refs", args: []string{"ref-prefix refs/heads/nuon/installs/acme", "ref-prefix refs/heads/nuon/status/acme"}}},
		{name: "fetch", in: string(pkt(nil, "command=fetch\n")) + pktDelim + string(pkt(pkt(nil, "want "+h+"\n"), "done\n")) + pktFlush,
			want: v2Request{command: "fetch", args: []string{"want " + h, "done"}}},
		{name: "upper-case length", in: "0014command=ls-refs\n" + pktFlush, want: v2Request{command: "ls-refs"}},
		{name: "no arguments", in: string(pkt(nil, "command=ls-refs\n")) + pktFlush, want: v2Request{command: "ls-refs"}},
		{name: "no command", in: string(pkt(nil, "agent=x\n")) + pktFlush, err: "no command"},
		{name: "empty", in: "", err: "EOF"},
		{name: "no flush", in: string(pkt(nil, "command=ls-refs\n")), err: "EOF"},
		{name: "truncated line", in: "0030command=ls-refs\n", err: "unexpected EOF"},
		{name: "short length", in: "0003", err: "bad pkt-line length 3"},
		{name: "not hex", in: "00g4command", err: "bad pkt-line length"},
		{name: "too long", in: "fff1", err: "bad pkt-line length"},
		{name: "partial header", in: "00", err: "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseV2Request([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parse: %v, want an error saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(v2Request{})); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
		})
	}
}

func TestPktLen(t *testing.T) {
	for _, n := range []int{0, 4, 10, 255, 4096, maxPkt} {
		if got, want := string(appendPktLen(nil, n)), fmt.Sprintf("%04x", n); got != want {
			t.Errorf("appendPktLen(%d) = %q, want %q", n, got, want)
		}
	}
}
