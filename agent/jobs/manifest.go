package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"nuon.dev/nuon/schemas"
)

// kindJobResult is the kind of a result file.
const kindJobResult = "JobResult"

// jobID is what a job id may look like: it names files and directories.
var jobID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validateManifest checks the job manifest data, read from the file name,
// against its JSON Schema, decodes it strictly and checks what this
// package relies on. Every error wraps ErrInvalidManifest and names the
// file.
func validateManifest(name string, data []byte) (*schemas.Job, error) {
	if err := schemas.ValidateJSON(schemas.SchemaJob, data); err != nil {
		var ps schemas.Problems
		if errors.As(err, &ps) {
			for i := range ps {
				ps[i].File = name
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidManifest, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var job schemas.Job
	if err := dec.Decode(&job); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidManifest, name, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: data after the manifest", ErrInvalidManifest, name)
	}
	if err := validate(&job); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidManifest, name, err)
	}
	return &job, nil
}

// validate checks what the runner and the job process rely on, whatever
// the schema says.
func validate(job *schemas.Job) error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(job.APIVersion == schemas.APIVersion, "apiVersion must be %q, not %q", schemas.APIVersion, job.APIVersion)
	check(job.Kind == schemas.KindJob, "kind must be %q, not %q", schemas.KindJob, job.Kind)
	check(jobID.MatchString(job.ID), "id %q is not a job id (letters, digits, ., _ and -, at most 128 characters)", job.ID)
	check(job.Install != "", "install is empty")
	check(job.Component != "", "component is empty")
	check(job.Plugin != "", "plugin is empty")
	switch job.Operation {
	case schemas.OpCreate, schemas.OpUpdate, schemas.OpDelete:
	default:
		check(false, "operation must be %s, %s or %s, not %q", schemas.OpCreate, schemas.OpUpdate, schemas.OpDelete, job.Operation)
	}
	if d, err := time.ParseDuration(job.Timeout); err != nil || d <= 0 {
		check(false, "timeout %q is not a positive duration such as 90s or 30m", job.Timeout)
	}
	check(job.StateDir != "", "stateDir is empty")
	check(job.ResultFile != "", "resultFile is empty")
	return errors.Join(errs...)
}

// writeJSON writes v to path atomically: a reader sees the old file or the
// whole new one, also after a crash.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'))
}

func writeFileAtomic(path string, data []byte) (err error) {
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
	if err = f.Chmod(0o600); err != nil {
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
	return syncDir(dir)
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readResult reads the result file a job wrote. It returns an error
// satisfying errors.Is(err, fs.ErrNotExist) if there is none.
func readResult(path string) (*schemas.JobResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res schemas.JobResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("result %s: %w", path, err)
	}
	if res.Kind != kindJobResult {
		return nil, fmt.Errorf("result %s: kind is %q, not %q", path, res.Kind, kindJobResult)
	}
	return &res, nil
}

// readManifest reads the manifest a runner wrote into a job directory. It
// was validated when it was written, so it is only decoded: a manifest an
// older agent wrote must still be readable after an upgrade.
func readManifest(path string) (*schemas.Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var job schemas.Job
	if err := json.Unmarshal(b, &job); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return &job, nil
}
