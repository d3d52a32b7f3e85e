package gitrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// Ref is a ref's name and the object it points to.
type Ref struct {
	Name string
	Hash plumbing.Hash
}

// RefList returns every ref whose name starts with prefix, sorted by name:
// what Refs returns, without a map. A tenant has 100,000 install refs, and
// a render that moves two of them reads them all: packed-refs is read as
// it is written, sorted, every name a part of one string, and the few ref
// files under prefix are merged in.
func (r *Repo) RefList(prefix string) ([]Ref, error) {
	fsys, ok := r.refsOnDisk()
	if !ok || !strings.HasPrefix(prefix, "refs/") {
		m, err := r.Refs(prefix)
		if err != nil {
			return nil, err
		}
		out := make([]Ref, 0, len(m))
		for name, h := range m {
			out = append(out, Ref{name.String(), h})
		}
		slices.SortFunc(out, compareRef)
		return out, nil
	}
	packed, err := lastPacked.listFile(fsys, prefix)
	if err != nil {
		return nil, fmt.Errorf("list refs: %w", err)
	}
	loose, err := looseRefs(fsys, prefix)
	if err != nil {
		return nil, fmt.Errorf("list refs: %w", err)
	}
	if len(loose) == 0 {
		return slices.Clone(packed), nil
	}
	// A ref file wins over packed-refs, as in git.
	out := make([]Ref, 0, len(packed)+len(loose))
	for len(packed) > 0 || len(loose) > 0 {
		switch {
		case len(loose) == 0 || len(packed) > 0 && packed[0].Name < loose[0].Name:
			out = append(out, packed[0])
			packed = packed[1:]
		case len(packed) > 0 && packed[0].Name == loose[0].Name:
			out = append(out, loose[0])
			packed, loose = packed[1:], loose[1:]
		default:
			out = append(out, loose[0])
			loose = loose[1:]
		}
	}
	return out, nil
}

func compareRef(a, b Ref) int { return strings.Compare(a.Name, b.Name) }

// lastPacked keeps the refs of the packed-refs last listed, by its
// content: a render moves a few refs as ref files of their own and leaves
// packed-refs as it was, and parsing its 100,000 lines again took half of
// listing them (7 of 14 ms). The file is still read whole and compared,
// byte for byte, with the one kept, so what it lists is always what the
// file holds; it is compared a chunk at a time, not read into 7 MB of
// its own first.
var lastPacked packedMemo

// packedMemo is the refs under prefix of the packed-refs content data.
type packedMemo struct {
	mu     sync.Mutex
	data   []byte
	prefix string
	refs   []Ref
}

// listFile returns the refs under prefix of the packed-refs file of fsys,
// sorted by name; the caller does not change them.
func (m *packedMemo) listFile(fsys billy.Filesystem, prefix string) ([]Ref, error) {
	m.mu.Lock()
	kept, keptPrefix, refs := m.data, m.prefix, m.refs
	m.mu.Unlock()
	if kept != nil && keptPrefix == prefix {
		if same, err := holds(fsys, kept); err != nil {
			return nil, err
		} else if same {
			return refs, nil
		}
	}
	data, err := readPackedRefsFile(fsys)
	if err != nil {
		return nil, err
	}
	return m.list(data, prefix), nil
}

// chunks are buffers for comparing a file with what it held.
var chunks = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// holds reports whether the packed-refs file of fsys (none: empty) is data,
// comparing it a chunk at a time.
func holds(fsys billy.Filesystem, data []byte) (bool, error) {
	f, err := fsys.Open(packedRefsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return len(data) == 0, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := chunks.Get().(*[64 << 10]byte)
	defer chunks.Put(buf)
	for {
		n, err := io.ReadFull(f, buf[:])
		if n > len(data) || !bytes.Equal(buf[:n], data[:n]) {
			return false, nil
		}
		data = data[n:]
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return len(data) == 0, nil
		case err != nil:
			return false, err
		}
	}
}

// list returns the refs of packed-refs content data under prefix, sorted
// by name; the caller does not change them.
func (m *packedMemo) list(data []byte, prefix string) []Ref {
	m.mu.Lock()
	kept, keptPrefix, refs := m.data, m.prefix, m.refs
	m.mu.Unlock()
	if kept != nil && keptPrefix == prefix && bytes.Equal(kept, data) {
		return refs
	}
	// data is not written again: its names become the refs' names
	// without a copy of the 7 MB of 100,000 install refs.
	refs = packedRefList(unsafe.String(unsafe.SliceData(data), len(data)), prefix)
	if data == nil {
		data = []byte{}
	}
	m.mu.Lock()
	m.data, m.prefix, m.refs = data, prefix, refs
	m.mu.Unlock()
	return refs
}

// packedRefList lists the refs of packed-refs text whose name starts with
// prefix, sorted by name, the last line of a name winning.
func packedRefList(text, prefix string) []Ref {
	out := make([]Ref, 0, strings.Count(text, prefix))
	sorted := true
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		line = strings.TrimSuffix(line, "\r")
		if len(line) < 42 || line[40] != ' ' || line[0] == '#' || line[0] == '^' {
			continue
		}
		name := line[41:]
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		var h plumbing.Hash
		if n, err := hexDecode(h[:], line[:40]); err != nil || n != len(h) {
			continue
		}
		if k := len(out); k > 0 && out[k-1].Name >= name {
			sorted = false
		}
		out = append(out, Ref{name, h})
	}
	if !sorted {
		slices.SortStableFunc(out, compareRef)
		dedup := out[:0]
		for _, r := range out {
			if k := len(dedup); k > 0 && dedup[k-1].Name == r.Name {
				dedup[k-1] = r
				continue
			}
			dedup = append(dedup, r)
		}
		out = dedup
	}
	return out
}

// hexDecode decodes the hex digits s into dst: 100,000 ids of refs at a
// time, by table.
func hexDecode(dst []byte, s string) (int, error) {
	if len(s) != 2*len(dst) {
		return 0, errors.New("bad length")
	}
	for i := range dst {
		hi, lo := hexValue[s[2*i]], hexValue[s[2*i+1]]
		if hi|lo > 0x0f {
			return i, errors.New("not hex")
		}
		dst[i] = hi<<4 | lo
	}
	return len(dst), nil
}

// hexValue is the value of each hex digit, 0xff for any other byte.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c], t[c-'a'+'A'] = c-'a'+10, c-'a'+10
	}
	return t
}()

// looseRefs reads the ref files whose name starts with prefix, sorted by
// name; symbolic refs and files that hold no object id are left out, as
// Refs leaves them.
func looseRefs(fsys billy.Filesystem, prefix string) ([]Ref, error) {
	dir := prefix[:strings.LastIndexByte(prefix, '/')]
	var out []Ref
	var walk func(dir string) error
	walk = func(dir string) error {
		infos, err := fsys.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, fi := range infos {
			name := dir + "/" + fi.Name()
			switch {
			case fi.IsDir():
				if err := walk(name); err != nil {
					return err
				}
			case !strings.HasPrefix(name, prefix) || strings.HasSuffix(name, ".lock") || !fi.Mode().IsRegular():
			default:
				h, ok, err := readLooseRef(fsys, name)
				if err != nil {
					return err
				}
				if ok {
					out = append(out, Ref{name, h})
				}
			}
		}
		return nil
	}
	if err := walk(dir); err != nil {
		return nil, err
	}
	slices.SortFunc(out, compareRef)
	return out, nil
}

// readLooseRef reads the ref file name; ok is false when it holds no
// object id (a symbolic ref) or is gone.
func readLooseRef(fsys billy.Filesystem, name string) (plumbing.Hash, bool, error) {
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return plumbing.ZeroHash, false, nil
	}
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	defer f.Close()
	var buf [128]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return plumbing.ZeroHash, false, err
	}
	line := string(bytes.TrimSpace(buf[:n]))
	var h plumbing.Hash
	if k, err := hexDecode(h[:], line); err != nil || k != len(h) {
		return plumbing.ZeroHash, false, nil
	}
	return h, true, nil
}
