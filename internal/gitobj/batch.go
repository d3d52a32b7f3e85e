package gitobj

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Batch collects new objects. It is safe for concurrent use.
type Batch struct {
	mu   sync.Mutex
	objs map[plumbing.Hash]newObject
}

type newObject struct {
	typ     plumbing.ObjectType
	content []byte
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{objs: map[plumbing.Hash]newObject{}} }

// Hash returns the id git gives an object. It uses the plain SHA-1 of the
// standard library: the objects hashed here are built by this process, so
// the collision detection go-git's default hasher pays for buys nothing.
func Hash(t plumbing.ObjectType, content []byte) plumbing.Hash {
	var hdr [32]byte
	h := sha1.New()
	b := append(hdr[:0], t.Bytes()...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(content)), 10)
	b = append(b, 0)
	h.Write(b)
	h.Write(content)
	var id plumbing.Hash
	h.Sum(id[:0])
	return id
}

// Add stores an object and returns its id. Adding the same object twice
// keeps one copy.
func (b *Batch) Add(t plumbing.ObjectType, content []byte) plumbing.Hash {
	h := Hash(t, content)
	b.mu.Lock()
	if _, ok := b.objs[h]; !ok {
		b.objs[h] = newObject{typ: t, content: content}
	}
	b.mu.Unlock()
	return h
}

// AddEncoded stores an encoded object (a commit encoded by go-git).
func (b *Batch) AddEncoded(o plumbing.EncodedObject) (plumbing.Hash, error) {
	r, err := o.Reader()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer r.Close()
	content, err := io.ReadAll(r)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return b.Add(o.Type(), content), nil
}

// Merge adds every object of o.
func (b *Batch) Merge(o *Batch) {
	if o == b {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for h, obj := range o.objs {
		if _, ok := b.objs[h]; !ok {
			b.objs[h] = obj
		}
	}
}

// Get returns an object of the batch.
func (b *Batch) Get(h plumbing.Hash) (plumbing.ObjectType, []byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objs[h]
	return o.typ, o.content, ok
}

// Len is the number of objects.
func (b *Batch) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.objs)
}

// Entry is one entry of a tree being built.
type Entry struct {
	Name string
	Mode filemode.FileMode
	Hash plumbing.Hash
}

// Tree encodes entries as a git tree, sorted as git sorts them, adds it
// and returns its id.
func (b *Batch) Tree(entries []Entry) plumbing.Hash {
	return b.Add(plumbing.TreeObject, EncodeTree(entries))
}

// EncodeTree returns the canonical encoding of a tree with these entries.
func EncodeTree(entries []Entry) []byte {
	// git compares a folder's name as if it ended in "/".
	type keyed struct {
		key string
		e   *Entry
	}
	sorted := make([]keyed, len(entries))
	size := 0
	for i := range entries {
		e := &entries[i]
		k := e.Name
		if e.Mode == filemode.Dir {
			k += "/"
		}
		sorted[i] = keyed{k, e}
		size += len(e.Name) + 28
	}
	slices.SortFunc(sorted, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	var buf bytes.Buffer
	buf.Grow(size)
	for _, k := range sorted {
		e := k.e
		buf.WriteString(strconv.FormatUint(uint64(e.Mode), 8))
		buf.WriteByte(' ')
		buf.WriteString(e.Name)
		buf.WriteByte(0)
		buf.Write(e.Hash[:])
	}
	return buf.Bytes()
}

// WritePack writes every object of the batch as one packfile (version 2,
// no deltas) to w, in a stable order: commits, trees, blobs, each by id.
func (b *Batch) WritePack(w io.Writer) error {
	_, err := b.writePack(w)
	return err
}

// packIndex is what an index of a written pack needs.
type packIndex struct {
	hashes   []plumbing.Hash
	offsets  []uint64
	crcs     []uint32
	checksum plumbing.Hash
}

// storeTreesFrom is the size from which a tree is stored without
// compression. A tree of thousands of entries (the rendered installs/, the
// source's installs/) is mostly object ids, which do not compress, and the
// next render reads it back whole: stored, that is a copy rather than an
// inflate.
const storeTreesFrom = 64 << 10

// writePack writes the pack and returns its index. Objects are compressed
// in parallel, at zlib's fastest level: many small objects, written once
// and repacked by git's own maintenance later.
func (b *Batch) writePack(w io.Writer) (*packIndex, error) {
	b.mu.Lock()
	hashes := make([]plumbing.Hash, 0, len(b.objs))
	objs := make(map[plumbing.Hash]newObject, len(b.objs))
	for h, o := range b.objs {
		hashes = append(hashes, h)
		objs[h] = o
	}
	b.mu.Unlock()
	rank := map[plumbing.ObjectType]int{plumbing.CommitObject: 0, plumbing.TreeObject: 1, plumbing.BlobObject: 2, plumbing.TagObject: 3}
	sort.Slice(hashes, func(i, j int) bool {
		ri, rj := rank[objs[hashes[i]].typ], rank[objs[hashes[j]].typ]
		if ri != rj {
			return ri < rj
		}
		return bytes.Compare(hashes[i][:], hashes[j][:]) < 0
	})

	packed := make([][]byte, len(hashes))
	errs := make([]error, runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var wg sync.WaitGroup
	for worker := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			zw, _ := zlib.NewWriterLevel(nil, zlib.BestSpeed)
			stored, _ := zlib.NewWriterLevel(nil, zlib.NoCompression)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(hashes) {
					return
				}
				o := objs[hashes[i]]
				var body bytes.Buffer
				body.Grow(len(o.content)/2 + 16)
				writeObjectHeader(&body, o.typ, len(o.content))
				w := zw
				if o.typ == plumbing.TreeObject && len(o.content) >= storeTreesFrom {
					w = stored
				}
				w.Reset(&body)
				if _, err := w.Write(o.content); err != nil {
					errs[worker] = err
					return
				}
				if err := w.Close(); err != nil {
					errs[worker] = err
					return
				}
				packed[i] = body.Bytes()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("compress object: %w", err)
		}
	}

	idx := &packIndex{hashes: hashes, offsets: make([]uint64, len(hashes)), crcs: make([]uint32, len(hashes))}
	sum := sha1.New()
	out := io.MultiWriter(w, sum)
	hdr := []byte{'P', 'A', 'C', 'K', 0, 0, 0, 2, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(hashes)))
	if _, err := out.Write(hdr); err != nil {
		return nil, fmt.Errorf("write pack: %w", err)
	}
	offset := uint64(len(hdr))
	for i, p := range packed {
		idx.offsets[i] = offset
		idx.crcs[i] = crc32.ChecksumIEEE(p)
		if _, err := out.Write(p); err != nil {
			return nil, fmt.Errorf("write pack: %w", err)
		}
		offset += uint64(len(p))
	}
	sum.Sum(idx.checksum[:0])
	if _, err := w.Write(idx.checksum[:]); err != nil {
		return nil, fmt.Errorf("write pack: %w", err)
	}
	return idx, nil
}

func writeObjectHeader(w *bytes.Buffer, t plumbing.ObjectType, size int) {
	c := byte(t)<<4 | byte(size&0x0f)
	size >>= 4
	for size > 0 {
		w.WriteByte(c | 0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	w.WriteByte(c)
}

// packDir is a repository on a file system whose object index can be
// refreshed: go-git's filesystem storage.
type packDir interface {
	Filesystem() billy.Filesystem
	Reindex()
}

// Flush writes the batch into st as one packfile when st accepts packs,
// else object by object. It leaves the batch as it was.
//
// On a repository on disk it writes the pack and its index itself: it
// knows every object's id, offset and checksum, so the index needs no
// second pass over the pack, which go-git's pack writer makes.
func (b *Batch) Flush(st storer.EncodedObjectStorer) error {
	if b.Len() == 0 {
		return nil
	}
	if d, ok := st.(packDir); ok {
		return b.flushPack(d)
	}
	if pw, ok := st.(storer.PackfileWriter); ok {
		w, err := pw.PackfileWriter()
		if err != nil {
			return fmt.Errorf("open pack: %w", err)
		}
		if err := b.WritePack(w); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("index pack: %w", err)
		}
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.objs {
		eo := st.NewEncodedObject()
		eo.SetType(o.typ)
		eo.SetSize(int64(len(o.content)))
		wr, err := eo.Writer()
		if err != nil {
			return err
		}
		if _, err := wr.Write(o.content); err != nil {
			return err
		}
		wr.Close()
		if _, err := st.SetEncodedObject(eo); err != nil {
			return err
		}
	}
	return nil
}

// flushPack writes objects/pack/pack-<checksum>.{pack,idx} the way git
// does: both to temporary files first, then the pack renamed into place
// before its index, so that no reader finds an index without its pack.
func (b *Batch) flushPack(d packDir) (err error) {
	fsys := d.Filesystem()
	dir := fsys.Join("objects", "pack")
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	var tmps []string
	defer func() {
		if err != nil {
			for _, name := range tmps {
				_ = fsys.Remove(name)
			}
		}
	}()
	create := func(prefix string, write func(io.Writer) error) (string, error) {
		f, err := fsys.TempFile(dir, prefix)
		if err != nil {
			return "", err
		}
		tmps = append(tmps, f.Name())
		if err := write(f); err != nil {
			f.Close()
			return "", err
		}
		return f.Name(), f.Close()
	}
	var idx *packIndex
	pack, err := create("tmp_pack_", func(w io.Writer) error {
		var err error
		idx, err = b.writePack(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	index, err := create("tmp_idx_", func(w io.Writer) error { return writeIndex(w, idx) })
	if err != nil {
		return fmt.Errorf("write pack index: %w", err)
	}
	base := fsys.Join(dir, "pack-"+idx.checksum.String())
	for _, mv := range [][2]string{{pack, base + ".pack"}, {index, base + ".idx"}} {
		if ch, ok := fsys.(billy.Change); ok {
			_ = ch.Chmod(mv[0], fs.FileMode(0o444))
		}
		if err := fsys.Rename(mv[0], mv[1]); err != nil {
			return fmt.Errorf("write pack: %w", err)
		}
	}
	d.Reindex()
	return nil
}

// writeIndex writes a version 2 pack index.
func writeIndex(w io.Writer, p *packIndex) error {
	iw := new(idxfile.Writer)
	if err := iw.OnHeader(uint32(len(p.hashes))); err != nil {
		return err
	}
	for i, h := range p.hashes {
		iw.Add(h, p.offsets[i], p.crcs[i])
	}
	if err := iw.OnFooter(p.checksum); err != nil {
		return err
	}
	idx, err := iw.Index()
	if err != nil {
		return err
	}
	_, err = idxfile.NewEncoder(w).Encode(idx)
	return err
}
