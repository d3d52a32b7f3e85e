package server

import (
	"bufio"
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/atomicfile"
)

// viewCacheFile keeps the fleet view's installs as they were read and
// verified, in the repository directory, so that a restart reads again
// only the installs whose refs or install file moved since.
const viewCacheFile = "nuon-fleet-index.gob"

// viewCacheVersion is the cache's format: a file of another is ignored
// (2: the labels of main's installs files by blob; 3: installs as the
// index keeps them, viewWords.slim, their key by its SHA-256; 4: read as
// the index reads them, view_read.go, keyed by their install file's blob
// rather than their key, so that a restart parses no install file whose
// blob it has).
const viewCacheVersion = 4

// viewCache is the file: each install's reading, keyed by what it was
// read from (its desired and status commits and its file on main). An
// entry is used only when all three are what the ref table and main say
// now: the key in force is what the file and the status history give, and
// a status commit verified once against a key stays verified against it.
// A status read with no key in force is not taken (viewInstall.keyless).
//
// Labels are main's installs files' labels by blob (nil: none): a blob is
// content, so its labels hold whatever main has it, and a restart parses
// only the files whose blob is not in it.
type viewCache struct {
	Version  int
	Installs map[string]viewCached
	Labels   map[plumbing.Hash]map[string]string
}

type viewCached struct {
	DesiredH, StatusH plumbing.Hash
	File              plumbing.Hash
	Keyless           bool
	Desired           fleet.Desired
	Status            *fleet.Install
	Err               string
}

func (s *Server) viewCachePath() string { return filepath.Join(s.cfg.Dir, viewCacheFile) }

// loadViewCache reads the cache: the installs and the labels by blob; a
// missing, unreadable or older file is no cache.
func loadViewCache(path string) (map[string]viewCached, map[plumbing.Hash]map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var c viewCache
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&c); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Version != viewCacheVersion {
		return nil, nil, nil
	}
	return c.Installs, c.Labels, nil
}

// saveViewCache writes the installs of x and the labels of l (nil: none)
// to path.
func saveViewCache(path string, x *fleetIndex, l *viewLabels) error {
	c := viewCache{Version: viewCacheVersion, Installs: make(map[string]viewCached, len(x.entries))}
	if l != nil {
		c.Labels = l.byBlob
	}
	for id, e := range x.entries {
		in := e.in
		c.Installs[id] = viewCached{DesiredH: in.desiredH, StatusH: in.statsH, File: in.file, Keyless: in.keyless, Desired: in.Desired, Status: in.Status, Err: in.Err}
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := gob.NewEncoder(w).Encode(c); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return atomicfile.Write(path, buf.Bytes(), 0o600)
}

// cached is the install read from the cache, when it was read from the
// refs and install file given.
func (v *view) cached(id string, desired, status, file plumbing.Hash) *viewInstall {
	c, ok := v.cache[id]
	if !ok {
		return nil
	}
	in := &viewInstall{ID: id, desiredH: c.DesiredH, statsH: c.StatusH, file: c.File, keyless: c.Keyless, Desired: c.Desired, Status: c.Status, Err: c.Err}
	if !in.readFrom(desired, status, file) {
		return nil
	}
	return in
}
