package jobrun

import (
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// stdioDrain is how long restore waits for the output of processes the
// job left behind, which may hold the pipe open.
const stdioDrain = 5 * time.Second

// stdio is fds 1 and 2 of this process pointed at a pipe, so that what
// anything in the process (or a child that inherits them) writes there
// passes through the job's redactor.
type stdio struct {
	savedOut, savedErr int
	r                  *os.File
	done               chan struct{}
	once               sync.Once
	copying            bool
}

// routeStdio points fds 1 and 2 at a new pipe and returns the original
// stdout, which the redacted output goes to.
func routeStdio() (*stdio, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	savedOut, err := unix.Dup(1)
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	savedErr, err := unix.Dup(2)
	if err != nil {
		r.Close()
		unix.Close(savedOut)
		return nil, nil, err
	}
	unix.CloseOnExec(savedOut)
	unix.CloseOnExec(savedErr)
	s := &stdio{savedOut: savedOut, savedErr: savedErr, r: r, done: make(chan struct{})}
	if err := unix.Dup2(int(w.Fd()), 1); err != nil {
		s.restore()
		return nil, nil, err
	}
	if err := unix.Dup2(int(w.Fd()), 2); err != nil {
		s.restore()
		return nil, nil, err
	}
	stdout, err := unix.Dup(savedOut)
	if err != nil {
		s.restore()
		return nil, nil, err
	}
	unix.CloseOnExec(stdout)
	return s, os.NewFile(uintptr(stdout), "stdout"), nil
}

// copyTo passes what reaches the pipe to w until restore.
func (s *stdio) copyTo(w io.Writer) {
	s.copying = true
	go func() {
		defer close(s.done)
		_, _ = io.Copy(w, s.r)
	}()
}

// restore points fds 1 and 2 back where they were and waits until what
// was written to the pipe has been copied, at most stdioDrain if a process
// the job started still holds the pipe.
func (s *stdio) restore() {
	s.once.Do(func() {
		_ = unix.Dup2(s.savedErr, 2)
		_ = unix.Dup2(s.savedOut, 1)
		unix.Close(s.savedErr)
		unix.Close(s.savedOut)
		if s.copying {
			select {
			case <-s.done:
			case <-time.After(stdioDrain):
			}
		}
		s.r.Close()
	})
}
