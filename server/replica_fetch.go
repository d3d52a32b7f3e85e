package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// replicaUnpackLimit is git's fetch.unpackLimit: a pack of fewer objects
// is stored as loose objects (git unpack-objects), a larger one kept as a
// pack (git index-pack), so that refreshes of a few objects each do not
// leave a pack apiece.
const replicaUnpackLimit = 100

// replicaFetchPack asks the writer, in one protocol v2 fetch ("done" with
// the haves), for the objects reachable from wants and not from haves,
// and stores the pack it sends in the mirror: completed with the mirror's
// objects where it is thin, as git fetch stores one, but without git
// fetch's look at every ref of the mirror (git fetch marks each of the
// mirror's million refs' commits complete before it negotiates, and
// checks connectivity against all of them after: 20 and 30 s at
// 1,000,000 installs for a one-install change). The caller checks what
// arrived (replicaConnected) before it moves a ref.
//
// Nothing it stores is reachable before a ref moves: a pack that breaks
// off leaves objects nothing names, which the next refresh fetches again.
func (s *Server) replicaFetchPack(ctx context.Context, wants, haves []plumbing.Hash) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.writer.JoinPath(replicaPath, "git-upload-pack").String(),
		bytes.NewReader(replicaFetchRequest(wants, haves)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.ReplicaToken)
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Accept", "application/x-git-upload-pack-result")
	req.Header.Set("Git-Protocol", "version=2")
	// No overall timeout: a pack is as large as the change; ctx ends it.
	resp, err := (&http.Client{Transport: s.client.Transport}).Do(req)
	if err != nil {
		return fmt.Errorf("fetch from the writer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("fetch from the writer: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	pack, err := replicaPackStream(bufio.NewReader(resp.Body))
	if err != nil {
		return fmt.Errorf("fetch from the writer: %w", err)
	}
	return s.storePack(ctx, pack)
}

// replicaFetchRequest encodes command=fetch: a thin pack with offset
// deltas and no progress, the wants, the haves and "done" (one round).
func replicaFetchRequest(wants, haves []plumbing.Hash) []byte {
	b := pkt(nil, "command=fetch\n")
	b = append(b, pktDelim...)
	b = pkt(b, "thin-pack\n")
	b = pkt(b, "no-progress\n")
	b = pkt(b, "ofs-delta\n")
	for _, h := range wants {
		b = pkt(b, "want "+h.String()+"\n")
	}
	for _, h := range haves {
		b = pkt(b, "have "+h.String()+"\n")
	}
	b = pkt(b, "done\n")
	return append(b, pktFlush...)
}

// replicaPackStream reads a protocol v2 fetch response up to its packfile
// section and returns that section's pack data (side band 1), which ends
// at the flush packet; an error on band 3 or a stream that ends early is
// an error of the reader.
func replicaPackStream(r *bufio.Reader) (io.Reader, error) {
	for {
		line, _, err := readPkt(r)
		switch {
		case errors.Is(err, errFlush):
			return nil, errors.New("the response ended without a pack")
		case errors.Is(err, errDelim):
			continue
		case err != nil:
			return nil, fmt.Errorf("read the response: %w", err)
		}
		text := strings.TrimSuffix(string(line), "\n")
		if text == "packfile" {
			return &sidebandPack{r: r}, nil
		}
		if msg, ok := strings.CutPrefix(text, "ERR "); ok {
			return nil, fmt.Errorf("the writer: %s", truncate(msg))
		}
	}
}

// sidebandPack is the data of side band 1 of a packfile section.
type sidebandPack struct {
	r    *bufio.Reader
	buf  []byte
	done bool
}

func (p *sidebandPack) Read(b []byte) (int, error) {
	for len(p.buf) == 0 {
		if p.done {
			return 0, io.EOF
		}
		line, _, err := readPkt(p.r)
		switch {
		case errors.Is(err, errFlush):
			p.done = true
			continue
		case errors.Is(err, io.EOF):
			return 0, io.ErrUnexpectedEOF
		case err != nil:
			return 0, err
		case len(line) == 0:
			continue
		}
		switch line[0] {
		case 1:
			p.buf = line[1:]
		case 2:
			// progress
		case 3:
			return 0, fmt.Errorf("the writer: %s", truncate(strings.TrimSpace(string(line[1:]))))
		default:
			return 0, fmt.Errorf("bad side band %d", line[0])
		}
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	return n, nil
}

// storePack stores a pack in the mirror: its header says how many objects
// it holds, and so whether git unpack-objects or index-pack takes it.
func (s *Server) storePack(ctx context.Context, pack io.Reader) error {
	var hdr [12]byte
	if _, err := io.ReadFull(pack, hdr[:]); err != nil {
		return fmt.Errorf("read the pack header: %w", err)
	}
	if string(hdr[:4]) != "PACK" {
		return fmt.Errorf("not a pack: %q", hdr[:4])
	}
	version, count := binary.BigEndian.Uint32(hdr[4:8]), binary.BigEndian.Uint32(hdr[8:12])
	if version != 2 && version != 3 {
		return fmt.Errorf("pack version %d", version)
	}
	header := "--pack_header=" + strconv.FormatUint(uint64(version), 10) + "," + strconv.FormatUint(uint64(count), 10)
	args := []string{"index-pack", "--stdin", "--fix-thin", header}
	if count < replicaUnpackLimit {
		args = []string{"unpack-objects", "-q", header}
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = s.cfg.Dir
	cmd.Stdin = pack
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("store the pack (%d objects): git %s: %w: %s", count, args[0], err, strings.TrimSpace(stderr.String()))
	}
	// What git left unread: a pack must end at the section's end.
	if n, _ := io.Copy(io.Discard, pack); n > 0 {
		return fmt.Errorf("store the pack: %d bytes after the pack", n)
	}
	return nil
}
