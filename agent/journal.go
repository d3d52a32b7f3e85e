package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/schemas"
)

// pendingJob is a journal entry: written before a job starts, removed once
// a status commit records its outcome.
type pendingJob struct {
	Job    *schemas.Job            `json:"job"`
	Spec   *schemas.ComponentState `json:"spec"`
	Action string                  `json:"action"`
}

// journalFile is where a job's journal entry is kept.
func (a *Agent) journalFile(id string) string {
	return filepath.Join(a.cfg.Workdir, "pending", id+".json")
}

// journal records that job is about to start.
func (a *Agent) journal(job *schemas.Job, spec *schemas.ComponentState, action string) (string, error) {
	f := a.journalFile(job.ID)
	entry, err := json.Marshal(pendingJob{Job: job, Spec: spec, Action: action})
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(f, entry, 0o600); err != nil {
		return "", fmt.Errorf("journal: %w", err)
	}
	return f, nil
}

// journalled lists the journal entries a previous process left, oldest
// name first.
func (a *Agent) journalled() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(a.cfg.Workdir, "pending", "*.json"))
	sort.Strings(files)
	return files, err
}

// readJournal reads one entry.
func readJournal(f string) (*pendingJob, error) {
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	var p pendingJob
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if p.Job == nil {
		return nil, errors.New("no job")
	}
	return &p, nil
}

// clearJournal removes entries a status commit now records.
func clearJournal(files []string) error {
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clear journal: %w", err)
		}
	}
	return nil
}

// keepJobDirs is how many finished jobs' directories (manifest, log,
// result) stay in the workdir; the status history keeps every manifest.
const keepJobDirs = 100

// pruneJobDirs removes the oldest job directories beyond keep, never one
// whose job is still journalled.
func (a *Agent) pruneJobDirs(keep int) error {
	entries, err := os.ReadDir(filepath.Join(a.cfg.Workdir, "jobs"))
	if err != nil || len(entries) <= keep {
		return err
	}
	type dir struct {
		name string
		mod  time.Time
	}
	var dirs []dir
	for _, e := range entries {
		if _, err := os.Stat(a.journalFile(e.Name())); err == nil {
			continue
		}
		if info, err := e.Info(); err == nil && e.IsDir() {
			dirs = append(dirs, dir{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].mod.After(dirs[j].mod) })
	for _, d := range dirs[min(keep, len(dirs)):] {
		if err := os.RemoveAll(a.jobDir(d.name)); err != nil {
			return err
		}
	}
	return nil
}
