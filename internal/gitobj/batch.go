package gitobj

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Batch collects new objects. It is safe for concurrent use.
type Batch struct {
	mu   sync.Mutex
	objs map[plumbing.Hash]object
}

type object struct {
	typ     plumbing.ObjectType
	content []byte
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{objs: map[plumbing.Hash]object{}} }

// Add stores an object and returns its id. Adding the same object twice
// keeps one copy.
func (b *Batch) Add(t plumbing.ObjectType, content []byte) plumbing.Hash {
	h := plumbing.ComputeHash(t, content)
	b.mu.Lock()
	if _, ok := b.objs[h]; !ok {
		b.objs[h] = object{typ: t, content: content}
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
	sorted := make([]Entry, len(entries))
	copy(sorted, entries)
	key := func(e Entry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(sorted, func(i, j int) bool { return key(sorted[i]) < key(sorted[j]) })
	var buf bytes.Buffer
	buf.Grow(len(sorted) * 40)
	for _, e := range sorted {
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
	b.mu.Lock()
	hashes := make([]plumbing.Hash, 0, len(b.objs))
	for h := range b.objs {
		hashes = append(hashes, h)
	}
	objs := b.objs
	b.mu.Unlock()
	rank := map[plumbing.ObjectType]int{plumbing.CommitObject: 0, plumbing.TreeObject: 1, plumbing.BlobObject: 2, plumbing.TagObject: 3}
	sort.Slice(hashes, func(i, j int) bool {
		ri, rj := rank[objs[hashes[i]].typ], rank[objs[hashes[j]].typ]
		if ri != rj {
			return ri < rj
		}
		return bytes.Compare(hashes[i][:], hashes[j][:]) < 0
	})

	sum := sha1.New()
	out := io.MultiWriter(w, sum)
	hdr := []byte{'P', 'A', 'C', 'K', 0, 0, 0, 2, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(hashes)))
	if _, err := out.Write(hdr); err != nil {
		return err
	}
	zw := zlib.NewWriter(nil)
	var body bytes.Buffer
	for _, h := range hashes {
		o := objs[h]
		body.Reset()
		writeObjectHeader(&body, o.typ, len(o.content))
		zw.Reset(&body)
		if _, err := zw.Write(o.content); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if _, err := out.Write(body.Bytes()); err != nil {
			return fmt.Errorf("write pack: %w", err)
		}
	}
	_, err := w.Write(sum.Sum(nil))
	return err
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

// Flush writes the batch into st as one packfile when st accepts packs,
// else object by object. It leaves the batch as it was.
func (b *Batch) Flush(st storer.EncodedObjectStorer) error {
	if b.Len() == 0 {
		return nil
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
