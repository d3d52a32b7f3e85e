package gitproto

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/hash"
)

// LsRefs returns the refs whose names start with one of prefixes, each
// name with the object it points to, in one request. A prefix is matched as
// a plain string: "refs/heads/nuon/installs/a" also matches
// ".../installs/ab", so look the exact name up in the result. With no
// prefixes, or an empty one, every ref is returned. A ref that does not
// exist is simply absent from the map.
//
// The server filters by ref-prefix, so the response holds only the matching
// refs however many the repository has; the result is filtered again here
// because gitprotocol-v2 allows a server to send more.
func (c *Client) LsRefs(ctx context.Context, prefixes ...string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	if _, err := c.lsRefsRequest(prefixes); err != nil {
		return nil, fmt.Errorf("ls-refs %s: %w", c.redacted(), err)
	}
	var refs map[plumbing.ReferenceName]plumbing.Hash
	err := c.command(ctx, &uploadCall{
		request: func() ([]byte, error) { return c.lsRefsRequest(prefixes) },
		read: func(p *pktReader) error {
			var err error
			refs, err = readLsRefs(p, prefixes)
			return err
		},
		v0: func(_ context.Context, adv *v0Advertisement, _ roundTripper) error {
			refs = adv.matching(prefixes)
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ls-refs %s: %w", c.redacted(), err)
	}
	return refs, nil
}

// lsRefsRequest encodes command=ls-refs with one ref-prefix argument per
// prefix.
func (c *Client) lsRefsRequest(prefixes []string) ([]byte, error) {
	var buf bytes.Buffer
	w := c.commandHeader(&buf, "ls-refs")
	for _, p := range prefixes {
		if p == "" {
			// An empty prefix matches everything: ask for every ref.
			return c.lsRefsRequest(nil)
		}
		if strings.ContainsAny(p, "\n\x00") {
			return nil, fmt.Errorf("ref prefix %q has a newline or NUL", p)
		}
		w.line("ref-prefix " + p)
	}
	if err := w.flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// commandHeader starts a command request: the command, the capabilities
// the client uses, and the delim packet before the arguments. Capabilities
// are sent only when the advertisement is known to list them: git refuses
// a request with a capability it did not advertise.
func (c *Client) commandHeader(buf *bytes.Buffer, command string) *pktWriter {
	w := &pktWriter{w: buf}
	w.line("command=" + command)
	if caps := c.caps.Load(); caps != nil {
		if caps.Supports("agent") {
			w.line("agent=" + userAgent)
		}
		if caps.Supports("object-format") {
			w.line("object-format=sha1")
		}
	}
	w.delim()
	return w
}

// readLsRefs parses an ls-refs response: one "<oid> <name>[ <attribute>]*"
// line per ref and a flush packet. Only refs matching prefixes are kept.
func readLsRefs(p *pktReader, prefixes []string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	refs := map[plumbing.ReferenceName]plumbing.Hash{}
	for {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return nil, err
		case kind == pktFlush:
			return refs, nil
		case kind != pktData:
			return nil, protocolErrorf("%s in the ls-refs response", kind)
		}
		name, oid, ok := parseRefLine(line)
		if !ok {
			return nil, protocolErrorf("bad ls-refs line %q", truncate(line))
		}
		if oid.IsZero() || !hasPrefix(name, prefixes) {
			// "unborn" refs (sent only on request) and refs the server
			// sent although they match no prefix.
			continue
		}
		refs[plumbing.ReferenceName(name)] = oid
	}
}

// parseRefLine splits "<oid> <name>[ <attribute>]*". An "unborn" ref has
// no object and comes back with the zero hash.
func parseRefLine(line string) (string, plumbing.Hash, bool) {
	fields := strings.Split(line, " ")
	if len(fields) < 2 || fields[1] == "" || strings.ContainsAny(fields[1], "\x00\t\r") {
		return "", plumbing.ZeroHash, false
	}
	if fields[0] == "unborn" {
		return fields[1], plumbing.ZeroHash, true
	}
	h, ok := parseOID(fields[0])
	return fields[1], h, ok && !h.IsZero()
}

// parseOID decodes a hex object name as git sends it: lower case, full
// length.
func parseOID(s string) (plumbing.Hash, bool) {
	if len(s) != hash.HexSize || !isHex(s) {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(s), true
}

func hasPrefix(name string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
