package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/klauspost/compress/zlib"
)

// objectDB reads the repository's objects for a push: the bases of a thin
// pack's deltas and the objects a pushed tree names but the push did not
// bring. It keeps one git cat-file --batch-command running for the life of
// the server, started on first use and again after it failed: git finds
// packs that git gc wrote since it started and loose objects written by
// anyone, which an in-process reader of the pack folder (go-git's, or
// gitobj.Store) would have to re-list itself. A status push from the agent
// brings every object it names but its parent, so it reads nothing here.
type objectDB struct {
	dir string

	mu  sync.Mutex
	cmd *exec.Cmd
	in  *bufio.Writer
	out *bufio.Reader
}

func newObjectDB(dir string) *objectDB { return &objectDB{dir: dir} }

// errNoObject is an object the repository does not hold.
var errNoObject = errors.New("object not found")

// info returns the type and size of h; errNoObject when it is missing.
func (d *objectDB) info(h plumbing.Hash) (plumbing.ObjectType, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, size, err := d.ask("info", h)
	if err != nil && !errors.Is(err, errNoObject) {
		d.stop()
	}
	return t, size, err
}

// read returns the object h whole, refusing one over limit bytes.
func (d *objectDB) read(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, size, err := d.ask("info", h)
	if err != nil {
		if !errors.Is(err, errNoObject) {
			d.stop()
		}
		return t, nil, err
	}
	if size > limit {
		return t, nil, fmt.Errorf("object %s: %d bytes: %w", h, size, errTooLarge)
	}
	t, size, err = d.ask("contents", h)
	if err != nil {
		d.stop()
		return t, nil, err
	}
	data := make([]byte, size+1) // and the newline after it
	if _, err := io.ReadFull(d.out, data); err != nil {
		d.stop()
		return t, nil, fmt.Errorf("read object %s: %w", h, err)
	}
	return t, data[:size], nil
}

// ask sends one command and reads its header line; d.mu is held.
func (d *objectDB) ask(command string, h plumbing.Hash) (plumbing.ObjectType, int64, error) {
	if d.cmd == nil {
		if err := d.start(); err != nil {
			return plumbing.InvalidObject, 0, err
		}
	}
	if _, err := fmt.Fprintf(d.in, "%s %s\n", command, h); err != nil {
		return plumbing.InvalidObject, 0, fmt.Errorf("git cat-file: %w", err)
	}
	if err := d.in.Flush(); err != nil {
		return plumbing.InvalidObject, 0, fmt.Errorf("git cat-file: %w", err)
	}
	line, err := d.out.ReadString('\n')
	if err != nil {
		return plumbing.InvalidObject, 0, fmt.Errorf("git cat-file: %w", err)
	}
	f := strings.Fields(line)
	if len(f) == 2 && f[1] == "missing" {
		return plumbing.InvalidObject, 0, fmt.Errorf("%s: %w", h, errNoObject)
	}
	if len(f) != 3 || f[0] != h.String() {
		return plumbing.InvalidObject, 0, fmt.Errorf("git cat-file: unexpected answer %q", truncate(line))
	}
	t, err := plumbing.ParseObjectType(f[1])
	if err != nil {
		return plumbing.InvalidObject, 0, fmt.Errorf("git cat-file: %w", err)
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		return plumbing.InvalidObject, 0, fmt.Errorf("git cat-file: bad size %q", f[2])
	}
	return t, size, nil
}

func (d *objectDB) start() error {
	cmd := exec.Command("git", "cat-file", "--batch-command")
	cmd.Dir = d.dir
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git cat-file: %w", err)
	}
	d.cmd, d.in, d.out = cmd, bufio.NewWriter(in), bufio.NewReaderSize(out, 64<<10)
	return nil
}

// stop ends the process; the next read starts another. d.mu is held.
func (d *objectDB) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	d.cmd, d.in, d.out = nil, nil, nil
}

// close ends the process.
func (d *objectDB) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stop()
}

// zlibWriters and zlibStorers keep zlib writers (compressing, storing)
// for reuse: a new one allocates about a megabyte of state, which was a
// fifth of a push's CPU.
var zlibWriters, zlibStorers sync.Pool

// pending is a file written under a temporary name (git's tmp_obj_ or
// lock file), to be synced and renamed into place.
type pending struct {
	f          *os.File
	tmp, final string
}

// sync flushes the file to disk.
func (p *pending) sync() error { return p.f.Sync() }

// commit closes the file and renames it into place.
func (p *pending) commit() error {
	err := p.f.Close()
	if err == nil {
		err = os.Rename(p.tmp, p.final)
	}
	if err != nil {
		os.Remove(p.tmp)
	}
	return err
}

// abort closes and removes the file.
func (p *pending) abort() {
	p.f.Close()
	os.Remove(p.tmp)
}

// createLoose writes an object as git writes a loose one, under a
// temporary name: zlib-compressed "type size\0content", to become
// objects/xx/yyyy.
func createLoose(dir string, h plumbing.Hash, t plumbing.ObjectType, content []byte) (*pending, error) {
	hex := h.String()
	fan := filepath.Join(dir, "objects", hex[:2])
	var b bytes.Buffer
	b.Grow(len(content)/2 + 64)
	// Trees and small objects are stored, not compressed, as gitobj
	// packs them: a status commit's tree is object ids, its blob a few
	// hundred bytes, and building a Huffman table for each cost more than
	// the bytes it saves.
	pool, level := &zlibWriters, zlib.BestSpeed
	if t == plumbing.TreeObject || len(content) < 256 {
		pool, level = &zlibStorers, zlib.NoCompression
	}
	zw, _ := pool.Get().(*zlib.Writer)
	if zw == nil {
		zw, _ = zlib.NewWriterLevel(&b, level)
	} else {
		zw.Reset(&b)
	}
	// Writes to a bytes.Buffer do not fail.
	_, _ = zw.Write(fmt.Appendf(nil, "%s %d\x00", t, len(content)))
	_, _ = zw.Write(content)
	_ = zw.Close()
	pool.Put(zw)
	tmp := filepath.Join(fan, "tmp_obj_"+hex[2:10]+strconv.FormatUint(rand.Uint64(), 36))
	// git prune-packed (repository maintenance) removes a fan-out
	// directory it emptied, which can happen between the MkdirAll and the
	// open.
	f, err := createIn(fan, func() (*os.File, error) { return os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444) })
	if err != nil {
		return nil, fmt.Errorf("write object %s: %w", h, err)
	}
	p := &pending{f: f, tmp: tmp, final: filepath.Join(fan, hex[2:])}
	if _, err := f.Write(b.Bytes()); err != nil {
		p.abort()
		return nil, fmt.Errorf("write object %s: %w", h, err)
	}
	return p, nil
}

// writeLoose writes an object as a loose file, synced first when sync is
// set (git's core.fsync loose-object).
func writeLoose(dir string, h plumbing.Hash, t plumbing.ObjectType, content []byte, sync bool) error {
	p, err := createLoose(dir, h, t, content)
	if err != nil {
		return err
	}
	if sync {
		if err := p.sync(); err != nil {
			p.abort()
			return fmt.Errorf("write object %s: %w", h, err)
		}
	}
	if err := p.commit(); err != nil {
		return fmt.Errorf("write object %s: %w", h, err)
	}
	return nil
}

// errRefLocked is a ref whose lock file another writer holds: try again.
var errRefLocked = errors.New("ref is locked")

// createIn creates a file in dir with open, making dir when it is missing
// — again and again, as git's own writers do (raceproof_create_file): git
// prune-packed and pack-refs, run by repository maintenance beside the
// server, remove the directories they empty, and can do so between the
// MkdirAll and the open any number of times while they work through a
// fleet's refs. It gives up after about a second.
func createIn(dir string, open func() (*os.File, error)) (*os.File, error) {
	f, err := open()
	for try := 0; errors.Is(err, os.ErrNotExist) && try < 200; try++ {
		if try >= 3 {
			time.Sleep(5 * time.Millisecond)
		}
		if err = os.MkdirAll(dir, 0o755); err == nil {
			f, err = open()
		}
	}
	return f, err
}

// refLockWait is how long lockRef waits for another writer's lock on a
// ref.
const refLockWait = time.Second

// staleLock is the age past which a ref's lock file is taken to be left
// by a writer that died (git's own hold one for milliseconds).
const staleLock = 10 * time.Second

// lockRef starts moving the loose ref name of the repository at dir from
// old to new as git's files backend does: it takes name.lock (O_EXCL:
// git's writers, pack-refs among them, wait for it or fail; a lock held
// by another is waited for up to refLockWait), checks that a
// loose file still names old and writes new into the lock; committing the
// pending file renames it onto the ref. The caller has checked old against
// the ref table, which only this server moves; a loose file that names
// something else means another writer moved the ref after all, and the
// update is refused as stale.
func lockRef(dir, name string, old, new plumbing.Hash) (*pending, error) {
	path := filepath.Join(dir, filepath.FromSlash(name))
	lock := path + ".lock"
	open := func() (*os.File, error) { return os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644) }
	// git pack-refs (repository maintenance) removes the directories of
	// the loose refs it packed.
	f, err := createIn(filepath.Dir(path), open)
	// Another writer's lock (git pack-refs, run by maintenance): wait for
	// it up to about a second, longer than git's own writers do
	// (core.filesRefLockTimeout, 100 ms by default): on a loaded machine
	// pack-refs holds a lock for longer, and maintenance must never
	// refuse a push. The lock's holder may remove the directory as it
	// lets go (pack-refs prunes the loose ref, drops its lock, then the
	// emptied directories), so each try makes the directory again too.
	for wait, waited := time.Millisecond, time.Duration(0); errors.Is(err, os.ErrExist) && waited < refLockWait; wait = min(2*wait, 64*time.Millisecond) {
		time.Sleep(wait)
		waited += wait
		f, err = createIn(filepath.Dir(path), open)
	}
	if errors.Is(err, os.ErrExist) {
		if fi, serr := os.Stat(lock); serr == nil && time.Since(fi.ModTime()) > staleLock {
			os.Remove(lock)
			f, err = createIn(filepath.Dir(path), open)
		}
	}
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("update %s: %w", name, errRefLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("update %s: %w", name, err)
	}
	p := &pending{f: f, tmp: lock, final: path}
	if cur, ok := readLooseRef(dir, name); ok && cur != old {
		p.abort()
		return nil, fmt.Errorf("update %s: is %s, not %s: %w", name, cur, old, errStaleRef)
	}
	if _, err := f.WriteString(new.String() + "\n"); err != nil {
		p.abort()
		return nil, fmt.Errorf("update %s: %w", name, err)
	}
	return p, nil
}

// writeRef moves a loose ref (lockRef), synced first when sync is set
// (git's core.fsync reference).
func writeRef(dir, name string, old, new plumbing.Hash, sync bool) error {
	p, err := lockRef(dir, name, old, new)
	if err != nil {
		return err
	}
	if sync {
		if err := p.sync(); err != nil {
			p.abort()
			return fmt.Errorf("update %s: %w", name, err)
		}
	}
	if err := p.commit(); err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	return nil
}

// errStaleRef is a ref that moved under the update.
var errStaleRef = errors.New("stale ref")

// fsyncPolicy is what git would sync writing a push: core.fsync of the
// repository (git 2.36 and later; core.fsyncObjectFiles before). git's
// default syncs neither loose objects nor refs: an accepted push then
// survives the server's end, not the machine's; core.fsync=committed
// makes it survive both, at a few milliseconds of latency per push.
type fsyncPolicy struct{ objects, refs bool }

// readFsyncPolicy reads the repository's core.fsync settings.
func readFsyncPolicy(ctx context.Context, dir string) fsyncPolicy {
	var p fsyncPolicy
	out, _ := exec.CommandContext(ctx, "git", "-C", dir, "config", "--get-all", "core.fsync").Output()
	for _, line := range strings.Fields(strings.ReplaceAll(string(out), ",", " ")) {
		on := !strings.HasPrefix(line, "-")
		switch strings.TrimPrefix(line, "-") {
		case "loose-object", "objects":
			p.objects = on
		case "reference":
			p.refs = on
		case "committed", "added", "all":
			p.objects, p.refs = on, on
		case "none":
			p = fsyncPolicy{}
		}
	}
	if out, _ := exec.CommandContext(ctx, "git", "-C", dir, "config", "--bool", "core.fsyncObjectFiles").Output(); strings.TrimSpace(string(out)) == "true" {
		p.objects = true
	}
	return p
}

// objectPool is a few objectDBs, each a git cat-file process, shared by
// the requests that read objects: fetches walking an install's closure,
// pushes reading what they name but do not bring. Each read takes one for
// its length, so one slow reader does not hold the others up.
type objectPool struct {
	free chan *objectDB
}

var _ objectSource = (*objectPool)(nil)

// newObjectPool makes a pool of n readers of the repository at dir; their
// processes start on first use.
func newObjectPool(dir string, n int) *objectPool {
	p := &objectPool{free: make(chan *objectDB, n)}
	for range n {
		p.free <- newObjectDB(dir)
	}
	return p
}

// info returns the type and size of h; errNoObject when it is missing.
func (p *objectPool) info(h plumbing.Hash) (plumbing.ObjectType, int64, error) {
	d := <-p.free
	defer func() { p.free <- d }()
	return d.info(h)
}

// read returns the object h whole, refusing one over limit bytes.
func (p *objectPool) read(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	d := <-p.free
	defer func() { p.free <- d }()
	return d.read(h, limit)
}

// close ends every reader's process; it waits for those in use.
func (p *objectPool) close() {
	for range cap(p.free) {
		d := <-p.free
		d.close()
		defer func() { p.free <- d }()
	}
}
