package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"
)

// ErrInvalidJob marks a job manifest that is malformed or incomplete: it
// fails the same way however often it is run.
var ErrInvalidJob = errors.New("invalid job manifest")

// jobID is what a job id may look like: it names files and directories.
var jobID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// DecodeJob checks a job manifest, read from the file name, against its
// JSON Schema, decodes it strictly and checks what the job runners and
// the job process rely on. Every error wraps ErrInvalidJob and names the
// file.
func DecodeJob(name string, data []byte) (*Job, error) {
	if err := ValidateJSON(SchemaJob, data); err != nil {
		var ps Problems
		if errors.As(err, &ps) {
			for i := range ps {
				ps[i].File = name
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var job Job
	if err := dec.Decode(&job); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidJob, name, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: data after the manifest", ErrInvalidJob, name)
	}
	if err := validateJob(&job); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidJob, name, err)
	}
	return &job, nil
}

// validateJob checks what the runner and the job process rely on, whatever
// the schema says.
func validateJob(job *Job) error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(job.APIVersion == APIVersion, "apiVersion must be %q, not %q", APIVersion, job.APIVersion)
	check(job.Kind == KindJob, "kind must be %q, not %q", KindJob, job.Kind)
	check(jobID.MatchString(job.ID), "id %q is not a job id (letters, digits, ., _ and -, at most 128 characters)", job.ID)
	check(job.Install != "", "install is empty")
	check(job.Component != "", "component is empty")
	check(job.Plugin != "", "plugin is empty")
	switch job.Operation {
	case OpCreate, OpUpdate, OpDelete, OpDrift, OpHealth:
		check(job.Debug == nil, "debug is set for a %s job (only debug jobs take a command)", job.Operation)
	case OpDebug:
		check(job.Debug != nil && len(job.Debug.Command) > 0, "a debug job has no debug.command")
		if job.Debug != nil && job.Debug.Timeout != "" {
			if d, err := time.ParseDuration(job.Debug.Timeout); err != nil || d <= 0 {
				check(false, "debug.timeout %q is not a positive duration such as 90s or 30m", job.Debug.Timeout)
			}
		}
	default:
		check(false, "operation must be %s, %s, %s, %s, %s or %s, not %q", OpCreate, OpUpdate, OpDelete, OpDrift, OpHealth, OpDebug, job.Operation)
	}
	if d, err := time.ParseDuration(job.Timeout); err != nil || d <= 0 {
		check(false, "timeout %q is not a positive duration such as 90s or 30m", job.Timeout)
	}
	check(job.StateDir != "", "stateDir is empty")
	check(job.ResultFile != "", "resultFile is empty")
	return errors.Join(errs...)
}
