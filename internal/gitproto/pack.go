package gitproto

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// storePack writes the pack read from sb into st and reads sb to its end.
//
// go-git's filesystem PackfileWriter parses the pack while it is written;
// if the stream fails midway, Close returns the error but leaves the
// temporary pack file and two open file descriptors behind, which a
// long-running poller cannot afford. So for a PackfileWriter the pack is
// first spooled to a temporary file and its trailing checksum verified;
// only a complete pack reaches the storer. Other storers (memory) parse the
// stream as it comes: they keep objects, not files.
func storePack(st storer.Storer, sb *sidebandReader) error {
	err := spoolPack(st, sb)
	if ferr := sb.failed(); ferr != nil {
		// The parser's own error would hide why the stream ended.
		return ferr
	}
	if _, ok := errors.AsType[*fs.PathError](err); ok {
		return fmt.Errorf("store pack: %w", err)
	}
	if err != nil {
		// The stream was well framed, so the pack itself is bad.
		return fmt.Errorf("%w: bad pack: %w", ErrProtocol, err)
	}
	// The parser stops at the checksum: read up to the flush packet, and
	// fail on a band 3 message after it.
	_, err = io.Copy(io.Discard, sb)
	return err
}

func spoolPack(st storer.Storer, r io.Reader) error {
	pw, ok := st.(storer.PackfileWriter)
	if !ok {
		return packfile.UpdateObjectStorage(st, r)
	}
	f, err := os.CreateTemp("", "gitproto-*.pack")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum := &packChecksum{h: sha1.New()}
	if _, err := io.Copy(io.MultiWriter(f, sum), r); err != nil {
		return err
	}
	if err := sum.verify(); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return packfile.WritePackfileToObjectStorage(pw, f)
}

// packChecksum checks a pack's trailer, the SHA-1 of all the bytes before
// it, as the pack is written through it.
type packChecksum struct {
	h    hash.Hash
	tail []byte // the last bytes seen, the trailer once all are
}

func (c *packChecksum) Write(p []byte) (int, error) {
	size := c.h.Size()
	if len(p) >= size {
		c.h.Write(c.tail)
		c.h.Write(p[:len(p)-size])
		c.tail = append(c.tail[:0], p[len(p)-size:]...)
		return len(p), nil
	}
	c.tail = append(c.tail, p...)
	if extra := len(c.tail) - size; extra > 0 {
		c.h.Write(c.tail[:extra])
		c.tail = append(c.tail[:0], c.tail[extra:]...)
	}
	return len(p), nil
}

func (c *packChecksum) verify() error {
	if len(c.tail) < c.h.Size() {
		return errors.New("pack is shorter than its checksum")
	}
	if !bytes.Equal(c.h.Sum(nil), c.tail) {
		return fmt.Errorf("pack checksum mismatch")
	}
	return nil
}
