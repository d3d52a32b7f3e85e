package gitproto

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// advertisement is a protocol version 0 ref advertisement: every ref of
// the repository, and the capabilities listed after the first one.
type v0Advertisement struct {
	refs map[plumbing.ReferenceName]plumbing.Hash
	caps Capabilities
}

// readRefAdvertisement parses a version 0 ref advertisement whose first
// line, "<oid> <name>\x00<capabilities>", has been read: then one
// "<oid> <name>" line per ref, peeled tags as "<name>^{}", "shallow <oid>"
// lines, and a flush packet. A repository without refs sends the zero id
// and "capabilities^{}".
func readRefAdvertisement(p *pktReader, first string) (*v0Advertisement, error) {
	adv := &v0Advertisement{refs: map[plumbing.ReferenceName]plumbing.Hash{}, caps: Capabilities{}}
	line, caps, _ := strings.Cut(first, "\x00")
	for _, c := range strings.Fields(caps) {
		name, value, _ := strings.Cut(c, "=")
		adv.caps[name] = value
	}
	for {
		oid, name, ok := strings.Cut(line, " ")
		if oid == "shallow" {
			if _, ok := parseOID(name); !ok {
				return nil, protocolErrorf("bad shallow line %q", truncate(line))
			}
		} else {
			h, okh := parseOID(oid)
			if !ok || !okh || name == "" || strings.ContainsAny(name, " \x00\t\r") {
				return nil, protocolErrorf("bad ref advertisement line %q", truncate(line))
			}
			if !strings.HasSuffix(name, "^{}") && !h.IsZero() {
				adv.refs[plumbing.ReferenceName(name)] = h
			}
		}
		kind, next, err := p.line()
		switch {
		case err != nil:
			return nil, err
		case kind == pktFlush:
			return adv, nil
		case kind != pktData:
			return nil, protocolErrorf("%s in the ref advertisement", kind)
		}
		line = next
	}
}

// matching is the advertised refs whose names start with one of prefixes.
func (a *v0Advertisement) matching(prefixes []string) map[plumbing.ReferenceName]plumbing.Hash {
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	for name, h := range a.refs {
		if hasPrefix(name.String(), prefixes) {
			out[name] = h
		}
	}
	return out
}

// fetchV0 is Fetch in protocol version 0: the wants with the capabilities
// this client uses (side-band-64k is required), a flush, the haves and
// "done"; the answer is one ACK or NAK line, then the pack on the
// sideband. Without multi_ack the server sends exactly one such line.
func fetchV0(ctx context.Context, adv *v0Advertisement, rt roundTripper, st storer.Storer, wants, haves []plumbing.Hash, n *int64) error {
	if !adv.caps.Supports("side-band-64k") {
		return fmt.Errorf("%w: version 0 server without side-band-64k", ErrUnsupported)
	}
	var buf bytes.Buffer
	w := &pktWriter{w: &buf}
	caps := []string{"side-band-64k", "no-progress"}
	if adv.caps.Supports("ofs-delta") {
		caps = append(caps, "ofs-delta")
	}
	if adv.caps.Supports("agent") {
		caps = append(caps, "agent="+userAgent)
	}
	for i, h := range wants {
		if i == 0 {
			w.line("want " + h.String() + " " + strings.Join(caps, " "))
			continue
		}
		w.line("want " + h.String())
	}
	w.flush()
	for _, h := range haves {
		w.line("have " + h.String())
	}
	if err := w.line("done"); err != nil {
		return err
	}
	return rt.roundTrip(ctx, buf.Bytes(), func(p *pktReader) error {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return err
		case kind != pktData || !(line == "NAK" || strings.HasPrefix(line, "ACK ")):
			return protocolErrorf("version 0 fetch answer starts with %q", truncate(line))
		}
		sb := newSidebandReader(p)
		err = storePack(st, sb)
		*n = sb.data
		return err
	})
}
