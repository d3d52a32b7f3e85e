package gitobj

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/klauspost/compress/zlib"
)

// Store is go-git's storage of a repository on disk whose object reads go
// straight to the pack files through their indexes.
//
// go-git reads an index whole into maps on first use, and maps every
// offset of a pack to its object the first time it decodes an object
// there: tens of milliseconds for a pack of 60,000 objects, paid again by
// every process that opens the repository. Store looks an object up by
// binary search in the index, read as it is on disk, and inflates the
// entry at its offset. Entries stored as deltas of others (packs written
// by git) and loose objects are read by go-git, as are objects of packs
// added since Store listed the pack folder, until a miss lists it again.
//
// Everything else, writing included, is the wrapped storage's.
type Store struct {
	*filesystem.Storage

	mu sync.RWMutex
	// packs are the packs Store knows, by name without extension; nil
	// until first listed.
	packs map[string]*packIndexView
	// bases keeps the delta bases read last.
	bases baseCache
}

var _ storer.EncodedObjectStorer = (*Store)(nil)

// NewStore wraps a filesystem storage.
func NewStore(s *filesystem.Storage) *Store { return &Store{Storage: s} }

// packFolder is where a repository keeps its packs.
const packFolder = "objects/pack"

// EncodedObject returns the object h of type t (or of any type with
// plumbing.AnyObject).
func (s *Store) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return s.encodedObject(t, h, true)
}

// encodedObject is EncodedObject; sum is false for a caller that checks
// the content's hash itself, which a loose object's zlib checksum then
// need not check too (unstore).
func (s *Store) encodedObject(t plumbing.ObjectType, h plumbing.Hash, sum bool) (plumbing.EncodedObject, error) {
	// The packs known, then a loose file, and only then the packs added
	// since they were listed: main's new objects arrive loose, and each
	// read of one listed the pack folder again (some 2 ms a one-install
	// change at a million installs, the folder read and each of its
	// files' stat).
	o, err := s.packed(h, false)
	if errors.Is(err, errNoPack) {
		o, err = readLoose(s.Filesystem(), h, sum)
		if errors.Is(err, errFallback) {
			o, err = s.packed(h, true)
		}
	}
	if errors.Is(err, errFallback) {
		return s.Storage.EncodedObject(t, h)
	}
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && o.Type() != t {
		return nil, plumbing.ErrObjectNotFound
	}
	return o, nil
}

// HasEncodedObject reports, as an error, whether the object h exists.
func (s *Store) HasEncodedObject(h plumbing.Hash) error {
	if _, _, _, ok := s.lookup(h, false); ok {
		return nil
	}
	// A loose object before the packs added since they were listed, and
	// before go-git, which reads every pack's whole index first.
	hex := h.String()
	if fi, err := s.Filesystem().Lstat(s.Filesystem().Join("objects", hex[:2], hex[2:])); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	if _, _, _, ok := s.lookup(h, true); ok {
		return nil
	}
	return s.Storage.HasEncodedObject(h)
}

// Reindex forgets the packs listed, as the wrapped storage does.
func (s *Store) Reindex() {
	s.mu.Lock()
	s.packs = nil
	s.mu.Unlock()
	s.Storage.Reindex()
}

// errFallback sends a read to go-git.
var errFallback = errors.New("not a whole object of a known pack")

// errNoPack is errFallback for an object no pack known has.
var errNoPack = fmt.Errorf("%w: in no pack", errFallback)

// packed reads h from a pack, listing the pack folder again when no pack
// known has it and relist is set; errNoPack when no pack has it,
// errFallback when go-git must read it.
func (s *Store) packed(h plumbing.Hash, relist bool) (plumbing.EncodedObject, error) {
	pack, idx, off, ok := s.lookup(h, relist)
	if !ok {
		return nil, errNoPack
	}
	o, err := readPacked(s.Filesystem(), &s.bases, pack, idx, h, off)
	if err != nil && !errors.Is(err, errFallback) {
		return nil, fmt.Errorf("read object %s from %s: %w", h, pack, err)
	}
	return o, err
}

// lookup finds the pack and offset of h, listing the pack folder again
// when no known pack has it and relist is set (or it was never listed).
func (s *Store) lookup(h plumbing.Hash, relist bool) (pack string, idx *packIndexView, off int64, ok bool) {
	s.mu.RLock()
	listed := s.packs != nil
	pack, idx, off, ok = s.find(h)
	s.mu.RUnlock()
	if ok || listed && !relist {
		return pack, idx, off, ok
	}
	if changed, err := s.list(); err != nil || (listed && !changed) {
		return "", nil, 0, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.find(h)
}

func (s *Store) find(h plumbing.Hash) (string, *packIndexView, int64, bool) {
	for name, idx := range s.packs {
		if off, ok := idx.find(h); ok {
			return name, idx, off, true
		}
	}
	return "", nil, 0, false
}

// list reads the indexes of the packs in the pack folder that Store does
// not know yet, and reports whether there were any. A pack whose index
// this package cannot read is left to go-git.
func (s *Store) list() (bool, error) {
	fsys := s.Filesystem()
	infos, err := fsys.ReadDir(packFolder)
	if err != nil {
		return false, err
	}
	var names []string
	has := map[string]bool{}
	for _, fi := range infos {
		has[fi.Name()] = true
	}
	for name := range has {
		if base, ok := strings.CutSuffix(name, ".idx"); ok && strings.HasPrefix(base, "pack-") && has[base+".pack"] {
			names = append(names, base)
		}
	}
	slices.Sort(names)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.packs == nil {
		s.packs = map[string]*packIndexView{}
	}
	changed := false
	for _, base := range names {
		if _, ok := s.packs[base]; ok {
			continue
		}
		changed = true
		data, unmap, err := mapFile(fsys, fsys.Join(packFolder, base+".idx"))
		if err != nil {
			continue
		}
		idx, err := parseIndex(data)
		if err != nil {
			unmap(data)
			continue
		}
		// The mapping goes with the last reference to its view.
		runtime.AddCleanup(idx, unmap, data)
		s.packs[base] = idx
	}
	return changed, nil
}

// mapFile maps a file into memory, read-only, and returns the function
// that unmaps it. The index of the pack of a render of 100,000 installs is
// 25 MB, of which a one-install render reads a few pages: read whole, as
// before, it cost that render some 20 ms. Pack indexes are never written
// in place (git writes a new one and renames it), so a mapping stays
// valid; a file that cannot be mapped is read.
func mapFile(fsys billy.Filesystem, name string) ([]byte, func([]byte), error) {
	fi, err := fsys.Stat(name)
	if err != nil {
		return nil, nil, err
	}
	// billy's files hide their descriptor: the file is opened again by
	// its path on disk, when it is the same file.
	if f, err := os.Open(filepath.Join(fsys.Root(), name)); err == nil {
		defer f.Close()
		if osfi, err := f.Stat(); err == nil && sameFile(osfi, fi) && fi.Size() > 0 && fi.Size() < 1<<40 {
			data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
			if err == nil {
				return data, func(d []byte) { _ = syscall.Munmap(d) }, nil
			}
		}
	}
	data, err := readFile(fsys, name)
	return data, func([]byte) {}, err
}

// sameFile reports whether two files' descriptions are of the same file
// on disk: os.SameFile takes only the os package's own, and billy wraps
// them.
func sameFile(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// readFile reads a file whole, into a buffer of its size: an index of a
// large pack is megabytes, which io.ReadAll would copy as it grows.
func readFile(fsys billy.Filesystem, name string) ([]byte, error) {
	fi, err := fsys.Stat(name)
	if err != nil {
		return nil, err
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
}

// maxObjectSize bounds the objects read here, whole in memory; larger ones
// are go-git's.
const maxObjectSize = 64 << 20

// readLoose reads the loose object h; errFallback when there is none, or
// it is too large to read whole. The file is read with one read: a file of
// stored blocks (core.looseCompression 0) is taken from it in place
// (unstore), its checksum summed only when sum is set (the caller does not
// check the content's hash); any other is inflated.
func readLoose(fsys billy.Filesystem, h plumbing.Hash, sum bool) (plumbing.EncodedObject, error) {
	hex := h.String()
	name := fsys.Join("objects", hex[:2], hex[2:])
	fi, err := fsys.Stat(name)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxObjectSize+maxObjectSize/1000+1024 {
		// Stored, the file is its content and 5 bytes every 64 KB.
		return nil, errFallback
	}
	data, err := readFile(fsys, name)
	if err != nil {
		return nil, errFallback
	}
	raw, err := unstore(data, sum)
	switch {
	case errors.Is(err, errNotStored):
		return inflateLoose(bytes.NewReader(data), h)
	case err != nil:
		return nil, fmt.Errorf("read loose object %s: %w", h, err)
	}
	typ, size, ok := parseLooseHeader(raw[:min(len(raw), 32)])
	if !ok {
		return nil, fmt.Errorf("read loose object %s: malformed header", h)
	}
	if size > maxObjectSize {
		return nil, errFallback
	}
	start := bytes.IndexByte(raw, 0) + 1
	if int64(len(raw)-start) != size {
		return nil, fmt.Errorf("read loose object %s: %d bytes, its header says %d", h, len(raw)-start, size)
	}
	return &packedObject{hash: h, typ: typ, content: raw[start:]}, nil
}

// inflateLoose reads the loose object h from r, its file's zlib stream.
func inflateLoose(r io.Reader, h plumbing.Hash) (plumbing.EncodedObject, error) {
	zr, err := openInflater(r)
	if err != nil {
		return nil, fmt.Errorf("read loose object %s: %w", h, err)
	}
	defer closeInflater(zr)
	var hdr [32]byte
	n, err := io.ReadFull(zr, hdr[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("read loose object %s: %w", h, err)
	}
	typ, size, ok := parseLooseHeader(hdr[:n])
	if !ok {
		return nil, fmt.Errorf("read loose object %s: malformed header", h)
	}
	if size > maxObjectSize {
		return nil, errFallback
	}
	start := bytes.IndexByte(hdr[:n], 0) + 1
	content := make([]byte, size)
	have := copy(content, hdr[start:n])
	if start+have < n {
		return nil, fmt.Errorf("read loose object %s: longer than %d bytes", h, size)
	}
	if _, err := io.ReadFull(zr, content[have:]); err != nil {
		return nil, fmt.Errorf("read loose object %s: %w", h, err)
	}
	if n, err := zr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return nil, fmt.Errorf("read loose object %s: longer than %d bytes", h, size)
	}
	return &packedObject{hash: h, typ: typ, content: content}, nil
}

// parseLooseHeader reads the "<type> <size>\x00" that opens a loose object.
func parseLooseHeader(b []byte) (plumbing.ObjectType, int64, bool) {
	nul := bytes.IndexByte(b, 0)
	if nul < 0 {
		return 0, 0, false
	}
	name, num, ok := strings.Cut(string(b[:nul]), " ")
	if !ok {
		return 0, 0, false
	}
	t, err := plumbing.ParseObjectType(name)
	if err != nil || t < plumbing.CommitObject || t > plumbing.TagObject {
		return 0, 0, false
	}
	size, err := strconv.ParseInt(num, 10, 64)
	if err != nil || size < 0 {
		return 0, 0, false
	}
	return t, size, true
}

// maxDeltaChain bounds how many deltas deep an entry is read here; git
// writes chains of at most 50 by default.
const maxDeltaChain = 1000

// readPacked reads the object h at off of pack base, resolving deltas
// whose base is in the same pack.
func readPacked(fsys billy.Filesystem, bases *baseCache, base string, idx *packIndexView, h plumbing.Hash, off int64) (plumbing.EncodedObject, error) {
	f, err := idx.packFile(fsys, base)
	if err != nil {
		return nil, err
	}
	p := &packReader{name: base, f: f, idx: idx, bases: bases}
	t, content, err := p.entry(off, 0)
	if err != nil {
		return nil, err
	}
	return &packedObject{hash: h, typ: t, content: content}, nil
}

// packFile returns the pack of the index v, whose name is base, opened
// once and kept open while v is: opening it for each object read (billy
// resolving the path's links, component by component) was half of reading
// the 100,000 install files of a render. A pack is never written in place,
// and one git gc removes stays readable through the open file.
func (v *packIndexView) packFile(fsys billy.Filesystem, base string) (io.ReaderAt, error) {
	v.pack.once.Do(func() {
		f, err := fsys.Open(fsys.Join(packFolder, base+".pack"))
		if err != nil {
			v.pack.err = err
			return
		}
		v.pack.f = f
		runtime.AddCleanup(v, func(f billy.File) { f.Close() }, f)
	})
	return v.pack.f, v.pack.err
}

// packReader reads the entries of one pack.
type packReader struct {
	name  string
	f     io.ReaderAt
	idx   *packIndexView
	bases *baseCache
}

// entry reads the entry at off, applying the deltas of its chain; depth
// is how many deltas down the chain it is.
func (p *packReader) entry(off int64, depth int) (plumbing.ObjectType, []byte, error) {
	if depth > 0 {
		if t, content, ok := p.bases.get(p.name, off); ok {
			return t, content, nil
		}
	}
	t, content, err := p.read(off, depth)
	if err == nil && depth > 0 {
		p.bases.put(p.name, off, t, content)
	}
	return t, content, err
}

func (p *packReader) read(off int64, depth int) (plumbing.ObjectType, []byte, error) {
	f, idx := p.f, p.idx
	var hdr [32]byte
	n, err := f.ReadAt(hdr[:], off)
	if n == 0 {
		return 0, nil, fmt.Errorf("entry at %d: %w", off, err)
	}
	t, size, hlen, err := parseEntryHeader(hdr[:n])
	if err != nil {
		return 0, nil, fmt.Errorf("entry at %d: %w", off, err)
	}
	var baseOff int64
	switch t {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
	case plumbing.OFSDeltaObject:
		dist, l, ok := parseOffset(hdr[hlen:n])
		if !ok || dist <= 0 || dist > off {
			return 0, nil, fmt.Errorf("entry at %d: malformed delta base offset", off)
		}
		baseOff, hlen = off-dist, hlen+l
	case plumbing.REFDeltaObject:
		if n < hlen+hashLen {
			return 0, nil, fmt.Errorf("entry at %d: truncated", off)
		}
		var bh plumbing.Hash
		copy(bh[:], hdr[hlen:])
		var ok bool
		if baseOff, ok = idx.find(bh); !ok {
			return 0, nil, errFallback
		}
		hlen += hashLen
	default:
		return 0, nil, fmt.Errorf("entry at %d: type %d", off, t)
	}
	if size > maxObjectSize {
		return 0, nil, errFallback
	}
	data, err := inflate(f, off+int64(hlen), size)
	if err != nil {
		return 0, nil, fmt.Errorf("entry at %d: %w", off, err)
	}
	if !t.IsDelta() {
		return t, data, nil
	}
	if depth >= maxDeltaChain {
		return 0, nil, errFallback
	}
	bt, base, err := p.entry(baseOff, depth+1)
	if err != nil {
		return 0, nil, err
	}
	out, err := applyDelta(base, data)
	if err != nil {
		return 0, nil, fmt.Errorf("entry at %d: %w", off, err)
	}
	return bt, out, nil
}

// baseCache keeps objects recently read as delta bases, as git's delta
// base cache does: reading a chain of deltas reads each of its objects in
// turn, and objects share bases. It is a direct-mapped table by offset,
// holding objects of up to maxCachedBase bytes.
type baseCache struct {
	mu    sync.Mutex
	slots [baseCacheSlots]cachedBase
}

type cachedBase struct {
	pack    string
	off     int64
	typ     plumbing.ObjectType
	content []byte
}

const (
	baseCacheSlots = 256
	maxCachedBase  = 256 << 10
)

func baseSlot(off int64) int { return int(uint64(off) * 0x9e3779b97f4a7c15 >> 56) }

func (c *baseCache) get(pack string, off int64) (plumbing.ObjectType, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &c.slots[baseSlot(off)]
	if e.content == nil || e.off != off || e.pack != pack {
		return 0, nil, false
	}
	return e.typ, e.content, true
}

func (c *baseCache) put(pack string, off int64, t plumbing.ObjectType, content []byte) {
	if len(content) > maxCachedBase {
		return
	}
	if content == nil {
		content = []byte{}
	}
	c.mu.Lock()
	c.slots[baseSlot(off)] = cachedBase{pack, off, t, content}
	c.mu.Unlock()
}

// inflaters keeps zlib readers for reuse: a new one allocates a 32 KB
// window, and a render reads tens of thousands of small objects (measured
// with BenchmarkRenderFleet at 10,000 installs: 745 MB allocated for
// windows, a third of all the render allocated).
var inflaters sync.Pool

// openInflater returns a zlib reader of r, reused when one is free.
func openInflater(r io.Reader) (io.ReadCloser, error) {
	if zr, ok := inflaters.Get().(io.ReadCloser); ok {
		if err := zr.(zlib.Resetter).Reset(r, nil); err != nil {
			return nil, err
		}
		return zr, nil
	}
	return zlib.NewReader(r)
}

// closeInflater closes zr and keeps it for the next openInflater.
func closeInflater(zr io.ReadCloser) {
	zr.Close()
	inflaters.Put(zr)
}

// inflate reads the size bytes deflated at off of f.
func inflate(f io.ReaderAt, off, size int64) ([]byte, error) {
	// One read for most entries: the deflated data is at most a little
	// longer than the object.
	buf := min(max(int(size)+int(size)/1000+64, 512), 1<<20)
	zr, err := openInflater(bufio.NewReaderSize(io.NewSectionReader(f, off, 1<<62), buf))
	if err != nil {
		return nil, err
	}
	defer closeInflater(zr)
	content := make([]byte, size)
	if _, err := io.ReadFull(zr, content); err != nil {
		return nil, err
	}
	// Reading to the end checks the stream's checksum and that it holds
	// no more than the size the header gives.
	if n, err := zr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return nil, fmt.Errorf("longer than %d bytes", size)
	}
	return content, nil
}

// parseOffset reads the distance back to the base of an offset delta, in
// git's encoding (big-endian groups of 7 bits, each continuation adding
// one), and returns how many bytes it takes.
func parseOffset(b []byte) (int64, int, bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	v := int64(b[0] & 0x7f)
	i := 0
	for b[i]&0x80 != 0 {
		i++
		if i == len(b) || v > 1<<55 {
			return 0, 0, false
		}
		v = (v+1)<<7 | int64(b[i]&0x7f)
	}
	return v, i + 1, true
}

// applyDelta builds an object from its base and a delta: the sizes of
// both, then instructions that copy a range of the base or insert bytes.
func applyDelta(base, delta []byte) ([]byte, error) {
	srcSize, delta, ok := deltaSize(delta)
	if !ok || srcSize != uint64(len(base)) {
		return nil, errors.New("delta: base size mismatch")
	}
	dstSize, delta, ok := deltaSize(delta)
	if !ok || dstSize > maxObjectSize {
		return nil, errors.New("delta: bad target size")
	}
	out := make([]byte, 0, dstSize)
	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0:
			var off, n uint64
			for i := range 7 {
				if op&(1<<i) == 0 {
					continue
				}
				if len(delta) == 0 {
					return nil, errors.New("delta: truncated copy")
				}
				if i < 4 {
					off |= uint64(delta[0]) << (8 * i)
				} else {
					n |= uint64(delta[0]) << (8 * (i - 4))
				}
				delta = delta[1:]
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > uint64(len(base)) || uint64(len(out))+n > dstSize {
				return nil, errors.New("delta: copy out of range")
			}
			out = append(out, base[off:off+n]...)
		case op != 0:
			if int(op) > len(delta) || uint64(len(out))+uint64(op) > dstSize {
				return nil, errors.New("delta: insert out of range")
			}
			out = append(out, delta[:op]...)
			delta = delta[op:]
		default:
			return nil, errors.New("delta: reserved instruction")
		}
	}
	if uint64(len(out)) != dstSize {
		return nil, errors.New("delta: target size mismatch")
	}
	return out, nil
}

// deltaSize reads a size that opens a delta: little-endian groups of 7
// bits.
func deltaSize(b []byte) (uint64, []byte, bool) {
	var v uint64
	for i, shift := 0, 0; i < len(b) && shift < 64; i, shift = i+1, shift+7 {
		v |= uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, b[i+1:], true
		}
	}
	return 0, nil, false
}

// parseEntryHeader reads the type and size that open a pack entry, and
// returns how many bytes they take.
func parseEntryHeader(b []byte) (plumbing.ObjectType, int64, int, error) {
	t := plumbing.ObjectType(b[0] >> 4 & 7)
	size := int64(b[0] & 0x0f)
	i, shift := 0, 4
	for b[i]&0x80 != 0 {
		i++
		if i == len(b) || shift > 56 {
			return 0, 0, 0, errors.New("malformed entry header")
		}
		size |= int64(b[i]&0x7f) << shift
		shift += 7
	}
	return t, size, i + 1, nil
}

// packedObject is an object read from a pack or a loose file. Its id is the one it was
// looked up by: the index names it.
type packedObject struct {
	hash    plumbing.Hash
	typ     plumbing.ObjectType
	content []byte
}

var _ plumbing.EncodedObject = (*packedObject)(nil)

func (o *packedObject) Hash() plumbing.Hash           { return o.hash }
func (o *packedObject) Type() plumbing.ObjectType     { return o.typ }
func (o *packedObject) SetType(t plumbing.ObjectType) { o.typ = t }
func (o *packedObject) Size() int64                   { return int64(len(o.content)) }
func (o *packedObject) SetSize(int64)                 {}
func (o *packedObject) Reader() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(o.content)), nil
}

// Writer fails: an object read from a repository is not changed in place.
func (o *packedObject) Writer() (io.WriteCloser, error) {
	return nil, errors.New("object read from a pack is read-only")
}
