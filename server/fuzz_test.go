package server

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// FuzzParseV2Request parses fuzzed protocol v2 requests: never a panic, and
// a parsed request always has a command.
func FuzzParseV2Request(f *testing.F) {
	ls := string(pkt(pkt(nil, "command=ls-refs\n"), "object-format=sha1\n")) + pktDelim + string(pkt(nil, "ref-prefix refs/heads/nuon/installs/acme\n")) + pktFlush
	fetch := string(pkt(nil, "command=fetch\n")) + pktDelim + string(pkt(pkt(nil, "want 0123456789012345678901234567890123456789\n"), "done\n")) + pktFlush
	for _, seed := range []string{"", ls, fetch, "0000", "0001", "zzzz", "0004", "fff0", ls[:10]} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseV2Request(data)
		if err == nil && req.command == "" {
			t.Fatal("request without a command")
		}
	})
}

// FuzzReadCommands parses fuzzed push command lists: never a panic; what is
// accepted has well-formed hashes, and raw is exactly the bytes consumed.
func FuzzReadCommands(f *testing.F) {
	h := strings.Repeat("0", 40)
	one := string(pkt(nil, h+" "+strings.Repeat("a", 40)+" refs/heads/nuon/status/acme\x00report-status side-band-64k\n")) + pktFlush + "PACK"
	for _, seed := range []string{"", one, "0000", pktFlush + "PACK", string(pkt(nil, "shallow "+h+"\n")) + pktFlush, one[:20]} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReader(bytes.NewReader(data))
		cmds, _, raw, err := readCommands(br)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(data, raw) || !bytes.HasSuffix(raw, []byte(pktFlush)) {
			t.Fatalf("raw %q is not the consumed prefix of %q", raw, data)
		}
		for _, c := range cmds {
			if c.ref == "" || c.old.String() == "" {
				t.Fatal("command without a ref")
			}
			if !bytes.Contains(raw, []byte(c.new.String())) {
				t.Fatalf("new %s is not what was sent", c.new)
			}
		}
	})
}
