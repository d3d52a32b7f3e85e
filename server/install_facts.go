package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/atomicfile"
)

// installFactsFile keeps, beside the repository, what the rollout
// controller took of each install file it read and accepted: by blob,
// the install's channel and labels. A blob is content, so what it gives
// holds wherever main has it under the same name rules; a restart then
// parses only the install files whose blob is not in it, where a first
// read of a million files took minutes of CPU and 2.67 GB.
//
// The file is the server's own: written only from files a main it
// accepted held, atomically, with a SHA-256 of its bytes at its end. A
// file that does not decode (truncated, corrupted, another version) is no
// store, and is written again after the next read.
const installFactsFile = "nuon-install-facts.bin"

// installFactsMagic and installFactsVersion open the file; a file of
// another version is ignored.
const (
	installFactsMagic   = "nuon install facts\n"
	installFactsVersion = 1
)

// installFacts is a decoded store: entries sorted by blob, strings and
// label sets each decoded once and shared by the entries that name them.
type installFacts struct {
	strs    []string
	sets    []map[string]string
	entries []installFact
}

// installFact is what one accepted blob gives. id is an index of strs
// plus one when the file sets its id (it is then accepted only under the
// name id.yaml), else zero; set likewise for its labels.
type installFact struct {
	blob    plumbing.Hash
	channel uint32
	set     uint32
	id      uint32
	deleted bool
}

// lookup is the fact of blob h, if the store has it.
func (f *installFacts) lookup(h plumbing.Hash) (installFact, bool) {
	if f == nil {
		return installFact{}, false
	}
	i, ok := slices.BinarySearchFunc(f.entries, h, func(e installFact, h plumbing.Hash) int { return bytes.Compare(e.blob[:], h[:]) })
	if !ok {
		return installFact{}, false
	}
	return f.entries[i], true
}

// seen is the install fact gives under the entry name (id.yaml), and
// whether the fact may be taken for that name: a file that sets its id
// was accepted only under that id.
func (f *installFacts) seen(name string, fact installFact) (installSeen, bool) {
	id := strings.TrimSuffix(name, ".yaml")
	if fact.id != 0 && f.strs[fact.id-1] != id {
		return installSeen{}, false
	}
	var labels map[string]string
	if fact.set != 0 {
		labels = f.sets[fact.set-1]
	}
	return installSeen{blob: fact.blob, deleted: fact.deleted, named: fact.id != 0,
		install: installFleet(id, f.strs[fact.channel], labels)}, true
}

// loadInstallFacts reads the store at path; a missing file, or one that
// does not decode, is none (nil).
func loadInstallFacts(path string) *installFacts {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	f, err := decodeInstallFacts(b)
	if err != nil {
		return nil
	}
	return f
}

var errInstallFacts = errors.New("not an install facts store")

// decodeInstallFacts decodes a store as encodeInstallFacts wrote it.
func decodeInstallFacts(b []byte) (*installFacts, error) {
	if len(b) < len(installFactsMagic)+sha256.Size || !bytes.HasPrefix(b, []byte(installFactsMagic)) {
		return nil, errInstallFacts
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], sum) {
		return nil, errInstallFacts
	}
	d := factsDecoder{b: body[len(installFactsMagic):]}
	if d.uvarint() != installFactsVersion {
		return nil, errInstallFacts
	}
	f := &installFacts{}
	n := d.count(1)
	f.strs = make([]string, 0, n)
	for range n {
		l := d.count(1)
		if d.err != nil {
			break
		}
		f.strs = append(f.strs, string(d.b[:l]))
		d.b = d.b[l:]
	}
	n = d.count(1)
	f.sets = make([]map[string]string, 0, n)
	for range n {
		pairs := d.count(2)
		if d.err != nil || pairs == 0 {
			d.fail()
			break
		}
		m := make(map[string]string, pairs)
		for range pairs {
			k, v := d.index(len(f.strs)), d.index(len(f.strs))
			if d.err != nil {
				break
			}
			m[f.strs[k]] = f.strs[v]
		}
		if len(m) != pairs {
			d.fail()
		}
		f.sets = append(f.sets, m)
	}
	n = d.count(len(plumbing.ZeroHash) + 4)
	f.entries = make([]installFact, 0, n)
	for k := range n {
		if d.err != nil || len(d.b) < len(plumbing.ZeroHash) {
			d.fail()
			break
		}
		var e installFact
		copy(e.blob[:], d.b)
		d.b = d.b[len(e.blob):]
		e.channel = uint32(d.index(len(f.strs)))
		e.set = uint32(d.index(len(f.sets) + 1))
		e.id = uint32(d.index(len(f.strs) + 1))
		switch flags := d.uvarint(); flags {
		case 0, 1:
			e.deleted = flags == 1
		default:
			d.fail()
		}
		if k > 0 && bytes.Compare(f.entries[k-1].blob[:], e.blob[:]) >= 0 {
			d.fail() // sorted, each blob once
		}
		f.entries = append(f.entries, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return nil, d.err
	}
	return f, nil
}

// factsDecoder reads uvarints off b; the first fault sticks.
type factsDecoder struct {
	b   []byte
	err error
}

func (d *factsDecoder) fail() { d.err = errInstallFacts }

func (d *factsDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a length whose items take at least each bytes: one larger
// than the bytes left allow is a fault, so no allocation outgrows the file.
func (d *factsDecoder) count(each int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/each) {
		d.fail()
	}
	if d.err != nil {
		return 0
	}
	return int(v)
}

// index is a value below n.
func (d *factsDecoder) index(n int) int {
	v := d.uvarint()
	if d.err == nil && v >= uint64(n) {
		d.fail()
	}
	if d.err != nil {
		return 0
	}
	return int(v)
}

// encodeInstallFacts writes the installs of files (all accepted) as a
// store: each blob once, in blob order.
func encodeInstallFacts(files map[string]installSeen) []byte {
	strs := map[string]int{}
	var strList []string
	str := func(s string) int {
		if i, ok := strs[s]; ok {
			return i
		}
		strs[s] = len(strList)
		strList = append(strList, s)
		return len(strList) - 1
	}
	type set struct{ pairs [][2]int }
	sets := map[string]int{}
	var setList []set
	var key strings.Builder
	setOf := func(m map[string]string) int {
		if len(m) == 0 {
			return 0
		}
		keys := slices.Sorted(maps.Keys(m))
		key.Reset()
		for _, k := range keys {
			key.WriteString(k)
			key.WriteByte(0)
			key.WriteString(m[k])
			key.WriteByte(0)
		}
		if i, ok := sets[key.String()]; ok {
			return i + 1
		}
		var s set
		for _, k := range keys {
			s.pairs = append(s.pairs, [2]int{str(k), str(m[k])})
		}
		sets[key.String()] = len(setList)
		setList = append(setList, s)
		return len(setList)
	}
	entries := make([]installFact, 0, len(files))
	for _, seen := range files {
		e := installFact{blob: seen.blob, deleted: seen.deleted,
			channel: uint32(str(seen.install.Channel)), set: uint32(setOf(seen.install.Labels))}
		if seen.named {
			e.id = uint32(str(seen.install.ID) + 1)
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b installFact) int { return bytes.Compare(a.blob[:], b.blob[:]) })
	entries = slices.CompactFunc(entries, func(a, b installFact) bool { return a.blob == b.blob })

	b := []byte(installFactsMagic)
	b = binary.AppendUvarint(b, installFactsVersion)
	b = binary.AppendUvarint(b, uint64(len(strList)))
	for _, s := range strList {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(setList)))
	for _, s := range setList {
		b = binary.AppendUvarint(b, uint64(len(s.pairs)))
		for _, p := range s.pairs {
			b = binary.AppendUvarint(b, uint64(p[0]))
			b = binary.AppendUvarint(b, uint64(p[1]))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = append(b, e.blob[:]...)
		b = binary.AppendUvarint(b, uint64(e.channel))
		b = binary.AppendUvarint(b, uint64(e.set))
		b = binary.AppendUvarint(b, uint64(e.id))
		flags := uint64(0)
		if e.deleted {
			flags = 1
		}
		b = binary.AppendUvarint(b, flags)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// saveInstallFacts writes the store of files to path.
func saveInstallFacts(path string, files map[string]installSeen) error {
	return atomicfile.Write(path, encodeInstallFacts(files), 0o600)
}
