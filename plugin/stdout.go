package plugin

import (
	"os"

	"golang.org/x/sys/unix"
)

// ProtectStdout keeps the protocol's stdout for the response alone: it
// points fd 1 at stderr, so that whatever a library or a tool the plugin
// starts writes there lands in the log, and returns the original stdout
// to write the response to, and a function that puts fd 1 back.
func ProtectStdout() (*os.File, func(), error) {
	saved, err := unix.Dup(1)
	if err != nil {
		return nil, nil, err
	}
	unix.CloseOnExec(saved)
	if err := unix.Dup2(2, 1); err != nil {
		unix.Close(saved)
		return nil, nil, err
	}
	out := os.NewFile(uintptr(saved), "stdout")
	restore := func() {
		_ = unix.Dup2(saved, 1)
		out.Close()
	}
	return out, restore, nil
}
