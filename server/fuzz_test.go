package server

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
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
// accepted has well-formed hashes and stays within the bounds, and no more
// than maxCommandList bytes are ever read.
func FuzzReadCommands(f *testing.F) {
	h := strings.Repeat("0", 40)
	one := string(pkt(nil, h+" "+strings.Repeat("a", 40)+" refs/heads/nuon/status/acme\x00report-status side-band-64k\n")) + pktFlush + "PACK"
	long := string(pkt(nil, h+" "+h+" refs/heads/"+strings.Repeat("x", maxRefName)+"\n")) + pktFlush
	many := strings.Repeat(string(pkt(nil, h+" "+h+" refs/heads/x\n")), maxPushCommands+1) + pktFlush
	for _, seed := range []string{"", one, "0000", pktFlush + "PACK", string(pkt(nil, "shallow "+h+"\n")) + pktFlush, one[:20], long, many, "fff0"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		br := bufio.NewReaderSize(r, 16)
		cmds, _, err := readCommands(br)
		if read := len(data) - r.Len() - br.Buffered(); read > maxCommandList {
			t.Fatalf("read %d bytes, over the bound %d", read, maxCommandList)
		}
		if err != nil {
			return
		}
		if len(cmds) > maxPushCommands {
			t.Fatalf("%d commands accepted", len(cmds))
		}
		for _, c := range cmds {
			if c.ref == "" || len(c.ref) > maxRefName {
				t.Fatalf("command with ref %q accepted", c.ref)
			}
			if !bytes.Contains(data, []byte(c.new.String())) {
				t.Fatalf("new %s is not what was sent", c.new)
			}
		}
	})
}

// FuzzReadPack reads fuzzed push packs into a quarantine: never a panic,
// nothing held past the bounds, every object held under its own id, and
// the connectivity check of any commit read never panics either.
func FuzzReadPack(f *testing.F) {
	key := testKey(f, "acme")
	pack, _, _ := statusPack(f, "acme", plumbing.ZeroHash, key)
	empty := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	for _, seed := range [][]byte{nil, pack, pack[:len(pack)/2], empty, []byte("PACK"), append([]byte{}, pack[:12]...)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q := newQuarantine(nil)
		if err := q.readPack(data); err != nil {
			return
		}
		if q.held > maxPushInflated {
			t.Fatalf("%d bytes held", q.held)
		}
		for _, h := range q.order {
			typ, content, err := q.content(h)
			if err != nil {
				t.Fatal(err)
			}
			if got := gitobj.Hash(typ, content); got != h {
				t.Fatalf("object %s holds %s", h, got)
			}
			if c, err := q.commit(h); err == nil {
				_ = q.connected([]*object.Commit{c})
			}
		}
	})
}

// FuzzParseArchives parses fuzzed for-each-ref output of the archive:
// never a panic, and every archived ref found is one the input names, at
// the hash it gives, for one of the install's two refs, in the newest
// generation the input names for the install.
func FuzzParseArchives(f *testing.F) {
	h := strings.Repeat("a", 40)
	b := strings.Repeat("b", 40)
	for _, seed := range []string{"", h + " refs/nuon/archive/acme/installs\n" + h + " refs/nuon/archive/acme/status\n",
		h + " refs/nuon/archive/acme/other\n", h + " refs/nuon/archive/status\n", "x refs/nuon/archive/a/status", h + " refs/nuon/archive/a/b/status\n",
		h + " refs/nuon/archive/acme/installs\n" + h + " refs/nuon/archive/acme/status\n" + b + " refs/nuon/archive/acme/2/installs\n" + b + " refs/nuon/archive/acme/2/status\n",
		b + " refs/nuon/archive/acme/10/status\n" + h + " refs/nuon/archive/acme/9/installs\n" + h + " refs/nuon/archive/acme/2/status\n",
		h + " refs/nuon/archive/acme/1/status\n" + h + " refs/nuon/archive/acme/02/status\n" + h + " refs/nuon/archive/acme/2/3/status\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		newest := map[string]int{}
		sc := bufio.NewScanner(bytes.NewReader(data)) // lines as git for-each-ref's output is read
		for sc.Scan() {
			hash, name, _ := strings.Cut(sc.Text(), " ")
			if id, gen, _, ok := schemas.ParseArchiveRef(name); ok && isHash(hash) && gen > newest[id] {
				newest[id] = gen
			}
		}
		archives := parseArchives(data)
		for id, arch := range archives {
			if arch.gen != newest[id] {
				t.Fatalf("install %q: generation %d, want the newest, %d", id, arch.gen, newest[id])
			}
			for live, tip := range arch.tips {
				if live != schemas.InstallRef(id) && live != schemas.StatusRef(id) {
					t.Fatalf("install %q: archived %q is not one of its refs", id, live)
				}
				if !bytes.Contains(data, []byte(tip.String()+" "+schemas.ArchiveGenRef(id, arch.gen, live))) {
					t.Fatalf("install %q: %s at %s is not in the input", id, live, tip)
				}
			}
		}
		if len(archives) != len(newest) {
			t.Fatalf("%d installs archived, want %d", len(archives), len(newest))
		}
	})
}
