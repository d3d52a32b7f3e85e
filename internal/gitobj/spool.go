package gitobj

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// spool is the pack file a spooled batch writes the objects merged into it
// to as they come, so that a render of 100,000 installs keeps in memory an
// offset per object rather than the objects.
type spool struct {
	fsys billy.Filesystem
	f    billy.File
	w    *bufio.Writer
	// off is the length of the pack so far.
	off int64
	// done is set once the pack is finished (its header and checksum
	// written); removed once it is renamed or removed.
	done, removed bool
	sum           plumbing.Hash
	// index says where each object written is: a million of them for a
	// render of 100,000 installs, so a record is small and finding one
	// costs the same at any size (spoolIndex).
	index *spoolIndex
}

// packHeaderSize is the length of a pack's header: "PACK", the version and
// the number of objects.
const packHeaderSize = 12

// NewSpooledBatch returns a batch that writes each object merged into it
// (compressed, as a pack entry) to a temporary pack file in st's
// objects/pack folder at once, keeping only where it is: Flush finishes
// that pack and renames it into place, and Close removes it when the batch
// is not flushed. Objects added, not merged, wait in memory as in any
// batch. Where st keeps no pack files on disk it is NewBatch. A spooled
// batch is flushed once, into st.
//
// The render of 100,000 installs kept some 270 MB of compressed objects
// and their map entries until the one pack was written at the end; spooled,
// its peak memory is that of the source and an index entry per object
// (BenchmarkRenderFleet in renderer).
func NewSpooledBatch(st storer.EncodedObjectStorer) (*Batch, error) {
	d, ok := st.(packDir)
	if !ok {
		return NewBatch(), nil
	}
	fsys := d.Filesystem()
	dir := fsys.Join("objects", "pack")
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open pack: %w", err)
	}
	f, err := fsys.TempFile(dir, "tmp_pack_")
	if err != nil {
		return nil, fmt.Errorf("open pack: %w", err)
	}
	s := &spool{fsys: fsys, f: f, w: bufio.NewWriterSize(f, 256<<10), index: newSpoolIndex()}
	hdr := []byte{'P', 'A', 'C', 'K', 0, 0, 0, 2, 0, 0, 0, 0}
	if _, err := s.w.Write(hdr); err != nil {
		s.remove()
		return nil, fmt.Errorf("open pack: %w", err)
	}
	s.off = packHeaderSize
	b := NewBatch()
	b.spool = s
	return b, nil
}

// write appends one compressed object to the pack and indexes it, unless
// the pack holds it already.
func (s *spool) write(h plumbing.Hash, o newObject) error {
	if s.done {
		return errors.New("the pack is finished")
	}
	tag := s.index.tag(h)
	slot, _, ok := s.index.find(h, tag)
	if ok {
		return nil
	}
	if o.size > maxObjectSize {
		return errors.New("too large to spool")
	}
	if s.index.len() >= maxSpooled {
		return errSpoolFull
	}
	var head bytes.Buffer
	writeObjectHeader(&head, o.typ, o.size)
	crc := crc32.Update(crc32.ChecksumIEEE(head.Bytes()), crc32.IEEETable, o.data)
	if _, err := s.w.Write(head.Bytes()); err != nil {
		return err
	}
	if _, err := s.w.Write(o.data); err != nil {
		return err
	}
	s.index.insert(slot, tag, idxEntry{hash: h, crc: crc, off: uint64(s.off)})
	s.off += int64(head.Len() + len(o.data))
	return nil
}

// read returns the type and content of the spooled object at off.
func (s *spool) read(off int64) (plumbing.ObjectType, []byte, error) {
	if !s.done {
		if err := s.w.Flush(); err != nil {
			return 0, nil, err
		}
	}
	// The entry's header is at most 10 bytes for the sizes written here.
	hdr := make([]byte, 16)
	n, err := s.f.ReadAt(hdr, off)
	if n == 0 {
		return 0, nil, err
	}
	t, size, hlen, err := parseEntryHeader(hdr[:n])
	if err != nil {
		return 0, nil, err
	}
	content, err := inflate(s.f, off+int64(hlen), size)
	return t, content, err
}

// finish writes the pack's object count and checksum.
func (s *spool) finish() error {
	if s.done {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	var count [4]byte
	binary.BigEndian.PutUint32(count[:], uint32(s.index.len()))
	if _, err := s.f.Seek(8, io.SeekStart); err != nil {
		return err
	}
	if _, err := s.f.Write(count[:]); err != nil {
		return err
	}
	// The checksum covers the header just written: the pack is read once
	// more, from the page cache.
	sum := sha1.New()
	if _, err := io.Copy(sum, io.NewSectionReader(s.f, 0, s.off)); err != nil {
		return err
	}
	sum.Sum(s.sum[:0])
	if _, err := s.f.Seek(s.off, io.SeekStart); err != nil {
		return err
	}
	if _, err := s.f.Write(s.sum[:]); err != nil {
		return err
	}
	s.done = true
	return nil
}

// remove closes and removes the pack file.
func (s *spool) remove() {
	if s.removed {
		return
	}
	s.removed = true
	s.f.Close()
	_ = s.fsys.Remove(s.f.Name())
}

// Close removes the pack file of a spooled batch that was not flushed. It
// does nothing to other batches.
func (b *Batch) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.spool != nil {
		b.spool.remove()
	}
	return nil
}

// finishSpool writes every object still in memory to the spool, finishes
// the pack and returns its index. b.mu is held. drop lets the lookup
// table go before the index is sorted: nothing is looked up any more.
func (b *Batch) finishSpool(drop bool) (*packIndex, error) {
	s := b.spool
	if s.removed {
		return nil, errors.New("write pack: the batch was closed or flushed")
	}
	for h, o := range b.objs {
		if err := s.write(h, o.deflate()); err != nil {
			return nil, fmt.Errorf("write pack: %w", err)
		}
		delete(b.objs, h)
	}
	if drop {
		s.index.dropTable()
	}
	// The records are sorted while the pack is read again for its
	// checksum: at a million installs, 9 million records took some 0.8 s
	// to sort after the 2.5 s of the checksum, one core idle.
	sorted := make(chan []idxEntry, 1)
	go func() { sorted <- sortEntries(s.index.entries()) }()
	err := s.finish()
	idx := &packIndex{entries: [][]idxEntry{<-sorted}, sorted: true, checksum: s.sum}
	if err != nil {
		return nil, fmt.Errorf("write pack: %w", err)
	}
	return idx, nil
}

// flushSpool finishes the spooled pack, writes its index and renames both
// into place, the pack first, as flushPack does.
func (b *Batch) flushSpool(d packDir) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t0 := time.Now()
	idx, err := b.finishSpool(true)
	if err != nil {
		return err
	}
	phase("flush pack and sort", t0)
	t0 = time.Now()
	defer func() { phase("flush index", t0) }()
	s := b.spool
	defer s.remove()
	fsys := d.Filesystem()
	if fsys != s.fsys {
		return errors.New("write pack: a spooled batch is flushed into the repository it was made for")
	}
	dir := fsys.Join("objects", "pack")
	f, err := fsys.TempFile(dir, "tmp_idx_")
	if err != nil {
		return fmt.Errorf("write pack index: %w", err)
	}
	index := f.Name()
	if err := writeIndex(f, idx); err != nil {
		f.Close()
		_ = fsys.Remove(index)
		return fmt.Errorf("write pack index: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = fsys.Remove(index)
		return fmt.Errorf("write pack index: %w", err)
	}
	if err := s.f.Close(); err != nil {
		_ = fsys.Remove(index)
		return fmt.Errorf("write pack: %w", err)
	}
	base := fsys.Join(dir, "pack-"+idx.checksum.String())
	for _, mv := range [][2]string{{s.f.Name(), base + ".pack"}, {index, base + ".idx"}} {
		if ch, ok := fsys.(billy.Change); ok {
			_ = ch.Chmod(mv[0], fs.FileMode(0o444))
		}
		if err := fsys.Rename(mv[0], mv[1]); err != nil {
			_ = fsys.Remove(index)
			return fmt.Errorf("write pack: %w", err)
		}
	}
	s.removed = true
	d.Reindex()
	return nil
}

// phase logs, at debug level, how long a phase of a flush took since t0.
func phase(name string, t0 time.Time) {
	slog.Debug("phase", "name", name, "took", time.Since(t0).Round(time.Millisecond))
}
