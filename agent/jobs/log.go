package jobs

import (
	"io"
	"os"
	"strings"
	"time"
)

// mirrorPoll is how often a mirror looks for new output.
const mirrorPoll = 100 * time.Millisecond

// mirror copies what is appended to a log file to a writer, from an
// offset on, until it is closed.
type mirror struct {
	stop chan struct{}
	done chan struct{}
}

func startMirror(path string, off int64, w io.Writer) (*mirror, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	m := &mirror{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer f.Close()
		for {
			if _, err := io.Copy(w, f); err != nil {
				return
			}
			select {
			case <-m.stop:
				io.Copy(w, f)
				return
			case <-time.After(mirrorPoll):
			}
		}
	}()
	return m, nil
}

// close copies what is left and stops.
func (m *mirror) close() {
	close(m.stop)
	<-m.done
}

// readTail reads at most n bytes from the end of f, not before off.
func readTail(f *os.File, off, n int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	start := max(off, st.Size()-n)
	if start >= st.Size() {
		return nil, nil
	}
	b := make([]byte, st.Size()-start)
	k, err := f.ReadAt(b, start)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return b[:k], nil
}

// lastLines returns the last n lines of s, each indented.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
