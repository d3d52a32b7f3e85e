// Package atomicfile writes files so that a reader, and a process that
// restarts after a crash, sees either the old content or the whole new
// content, never a part: the data goes to a temporary file in the same
// directory, is synced, renamed over the target, and the directory is
// synced so the rename itself survives a power loss.
//
// It is the one way nuon writes state that a later run reads back: the
// agent's journal, job manifests and results, and plugin inventories.
package atomicfile

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Write replaces path with data, atomically and durably, with mode perm.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// WriteJSON writes v as indented JSON with a final newline, as Write does,
// readable by its owner only: these files can hold what a job was given.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return Write(path, append(b, '\n'), 0o600)
}

// SyncDir makes a rename or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
