package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often a wait for a job's lock retries.
const lockPoll = 50 * time.Millisecond

// createLock opens dir/lock, creating it, and takes its exclusive lock
// without waiting. It fails with ErrRunning when a process of the job
// holds it. The descriptor is close-on-exec in the agent; a job process
// gets it on purpose through ExtraFiles.
func createLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	ok, err := tryLock(f)
	if err == nil && !ok {
		err = ErrRunning
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tryLock takes f's exclusive lock if no other open file description
// holds it.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		default:
			return false, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
	}
}

// waitLock takes the exclusive lock of the existing file dir/lock, waiting
// until no process holds it or ctx ends. It returns fs.ErrNotExist if no
// job was ever started in dir.
func waitLock(ctx context.Context, dir string) (*os.File, error) {
	f, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		return nil, err
	}
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		if ok {
			return f, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// lockFree reports whether no process holds dir/lock.
func lockFree(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		return false, err
	}
	defer f.Close()
	return tryLock(f)
}
