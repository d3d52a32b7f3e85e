package server

import (
	"errors"
	"fmt"
)

// maxStoreBatch bounds the pushes one batch writes.
const maxStoreBatch = 256

// errClosed is a push that came after the server closed.
var errClosed = errors.New("server closed")

// pushStore writes checked pushes into the repository from one goroutine,
// in batches: every push waiting when a batch starts is in it. Pushes are
// read and checked side by side; their writes are not, because creating
// and renaming files in the same few directories from many threads at
// once cost ten times the CPU it costs from one (the kernel spins on the
// directories' locks), and because a batch syncs its files together: on a
// journalling file system the first sync commits the others' data too.
//
// A batch writes every push's objects (loose files under temporary names),
// syncs them if core.fsync says so, renames them into place, then takes
// every push's ref lock, syncs and renames those: no ref names an object
// not yet in place.
type pushStore struct {
	dir   string
	fsync fsyncPolicy
	jobs  chan *storeJob
	stop  chan struct{}
	done  chan struct{}
}

// storeJob is one push to write; err is its outcome once done is closed.
type storeJob struct {
	q     *quarantine
	c     pushCommand
	err   error
	files []*pending
	done  chan struct{}
}

func newPushStore(dir string, fsync fsyncPolicy) *pushStore {
	s := &pushStore{dir: dir, fsync: fsync, jobs: make(chan *storeJob), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// store writes a checked push: its objects, then the ref. It returns once
// both are in place (or neither ref moved), whatever the caller's
// context: the ref table must follow the repository.
func (s *pushStore) store(q *quarantine, c pushCommand) error {
	j := &storeJob{q: q, c: c, done: make(chan struct{})}
	select {
	case s.jobs <- j:
	case <-s.stop:
		return errClosed
	}
	<-j.done
	return j.err
}

// close stops the writer once the batch it writes is done.
func (s *pushStore) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *pushStore) run() {
	defer close(s.done)
	for {
		var batch []*storeJob
		select {
		case j := <-s.jobs:
			batch = append(batch, j)
		case <-s.stop:
			return
		}
	more:
		for len(batch) < maxStoreBatch {
			select {
			case j := <-s.jobs:
				batch = append(batch, j)
			default:
				break more
			}
		}
		s.write(batch)
		for _, j := range batch {
			close(j.done)
		}
	}
}

// write writes a batch; each push's error is its own.
func (s *pushStore) write(batch []*storeJob) {
	for _, j := range batch {
		for _, h := range j.q.order {
			t, data, err := j.q.content(h)
			var p *pending
			if err == nil {
				p, err = createLoose(s.dir, h, t, data)
			}
			if err != nil {
				j.fail(err)
				break
			}
			j.files = append(j.files, p)
		}
	}
	s.finish(batch, s.fsync.objects)
	for _, j := range batch {
		if j.err != nil {
			continue
		}
		p, err := lockRef(s.dir, j.c.ref, j.c.old, j.c.new)
		if err != nil {
			j.fail(err)
			continue
		}
		j.files = append(j.files, p)
	}
	s.finish(batch, s.fsync.refs)
}

// finish syncs (with sync) and renames into place the pending files of
// every push of the batch that has not failed.
func (s *pushStore) finish(batch []*storeJob, sync bool) {
	if sync {
		for _, j := range batch {
			for _, p := range j.files {
				if j.err == nil {
					if err := p.sync(); err != nil {
						j.fail(fmt.Errorf("sync %s: %w", p.final, err))
					}
				}
			}
		}
	}
	for _, j := range batch {
		for _, p := range j.files {
			if j.err != nil {
				p.abort()
				continue
			}
			if err := p.commit(); err != nil {
				j.fail(fmt.Errorf("write %s: %w", p.final, err))
			}
		}
		j.files = nil
	}
}

// fail records a push's first error; its pending files are dropped.
func (j *storeJob) fail(err error) {
	if j.err == nil {
		j.err = err
	}
}
