package gitproto

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Fetch downloads the objects reachable from wants but not from haves and
// stores them in st, in one request, and returns the number of pack bytes
// received.
//
// Wants that st already holds are not asked for; if that leaves none, Fetch
// sends nothing and returns 0. Haves that st does not hold are not sent
// either, so a wrong have cannot leave st without objects it needs. The
// negotiation is a single round: the haves and "done" go in the one
// request, which is cheap when the haves are the commits the caller last
// fetched. The pack is written through go-git: as a pack file with its
// index when st is a storer.PackfileWriter (filesystem storage), object by
// object otherwise (memory storage). A pack that breaks off or fails its
// checksum leaves a storer.PackfileWriter untouched.
func (c *Client) Fetch(ctx context.Context, st storer.Storer, wants, haves []plumbing.Hash) (int64, error) {
	wants = missing(st, wants)
	if len(wants) == 0 {
		return 0, nil
	}
	haves = present(st, haves)
	if _, err := c.fetchRequest(wants, haves); err != nil {
		return 0, fmt.Errorf("fetch %s: %w", c.redacted(), err)
	}
	var n int64
	err := c.command(ctx, &uploadCall{
		request: func() ([]byte, error) { return c.fetchRequest(wants, haves) },
		read: func(p *pktReader) error {
			return readFetch(p, shallowStorer(st), func(sb *sidebandReader) error {
				err := storePack(st, sb)
				n = sb.data
				return err
			})
		},
		v0: func(ctx context.Context, adv *v0Advertisement, rt roundTripper) error {
			return fetchV0(ctx, adv, rt, st, wants, haves, &n)
		},
	})
	if err != nil {
		return n, fmt.Errorf("fetch %s: %w", c.redacted(), err)
	}
	return n, nil
}

// missing is the sorted, de-duplicated wants that st does not have.
func missing(st storer.EncodedObjectStorer, wants []plumbing.Hash) []plumbing.Hash {
	var out []plumbing.Hash
	for _, h := range dedupe(wants) {
		if st.HasEncodedObject(h) != nil {
			out = append(out, h)
		}
	}
	return out
}

// present is the sorted, de-duplicated haves that st has.
func present(st storer.EncodedObjectStorer, haves []plumbing.Hash) []plumbing.Hash {
	var out []plumbing.Hash
	for _, h := range dedupe(haves) {
		if st.HasEncodedObject(h) == nil {
			out = append(out, h)
		}
	}
	return out
}

func dedupe(hs []plumbing.Hash) []plumbing.Hash {
	hs = slices.Clone(hs)
	plumbing.HashesSort(hs)
	hs = slices.Compact(hs)
	return slices.DeleteFunc(hs, plumbing.Hash.IsZero)
}

// fetchRequest encodes command=fetch: a pack with offset deltas and no
// progress messages, the wants, the haves and "done", which tells the
// server to send the pack now instead of negotiating.
func (c *Client) fetchRequest(wants, haves []plumbing.Hash) ([]byte, error) {
	var buf bytes.Buffer
	w := c.commandHeader(&buf, "fetch")
	w.line("no-progress")
	w.line("ofs-delta")
	for _, h := range wants {
		w.line("want " + h.String())
	}
	for _, h := range haves {
		w.line("have " + h.String())
	}
	w.line("done")
	if err := w.flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func shallowStorer(st storer.Storer) storer.ShallowStorer {
	s, _ := st.(storer.ShallowStorer)
	return s
}

// readFetch parses a fetch response (gitprotocol-v2 "fetch"): optional
// acknowledgments, shallow-info, wanted-refs and packfile-uris sections
// separated by delim packets, then the packfile section, which pack reads
// through a sidebandReader. Once the pack is stored, shallow-info updates
// are applied to shallow.
func readFetch(p *pktReader, shallow storer.ShallowStorer, pack func(*sidebandReader) error) error {
	var shallows, unshallows []plumbing.Hash
	for {
		kind, header, err := p.line()
		switch {
		case err != nil:
			return err
		case kind != pktData:
			return protocolErrorf("%s where a fetch response section starts", kind)
		}
		switch header {
		case "packfile":
			if err := pack(newSidebandReader(p)); err != nil {
				return err
			}
			return applyShallow(shallow, shallows, unshallows)
		case "acknowledgments", "shallow-info", "wanted-refs", "packfile-uris":
		default:
			return protocolErrorf("unknown fetch response section %q", truncate(header))
		}
		end, err := readSection(p, header, func(line string) error {
			if header != "shallow-info" {
				return nil
			}
			verb, oid, _ := strings.Cut(line, " ")
			h, ok := parseOID(oid)
			switch {
			case !ok:
				return protocolErrorf("bad shallow-info line %q", truncate(line))
			case verb == "shallow":
				shallows = append(shallows, h)
			case verb == "unshallow":
				unshallows = append(unshallows, h)
			default:
				return protocolErrorf("bad shallow-info line %q", truncate(line))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if end == pktFlush {
			// Only a negotiation round ends without a pack, and the
			// request said "done".
			return protocolErrorf("fetch response ends after %s without a packfile", header)
		}
	}
}

// readSection reads a section's lines up to the delim or flush packet that
// ends it and returns which one did.
func readSection(p *pktReader, header string, each func(string) error) (pktKind, error) {
	for {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return 0, err
		case kind == pktDelim, kind == pktFlush:
			return kind, nil
		case kind != pktData:
			return 0, protocolErrorf("%s in the %s section", kind, header)
		}
		if err := each(line); err != nil {
			return 0, err
		}
	}
}

// applyShallow records the commits the server sent without their parents,
// as git does in .git/shallow. A full fetch never gets any.
func applyShallow(st storer.ShallowStorer, shallows, unshallows []plumbing.Hash) error {
	if len(shallows)+len(unshallows) == 0 {
		return nil
	}
	if st == nil {
		return protocolErrorf("server sent a shallow pack the storer cannot record")
	}
	cur, err := st.Shallow()
	if err != nil {
		return fmt.Errorf("read shallow commits: %w", err)
	}
	next := slices.DeleteFunc(dedupe(append(cur, shallows...)), func(h plumbing.Hash) bool {
		return slices.Contains(unshallows, h)
	})
	if err := st.SetShallow(next); err != nil {
		return fmt.Errorf("record shallow commits: %w", err)
	}
	return nil
}
