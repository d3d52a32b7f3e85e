package jobs

import "errors"

// Outcomes a caller branches on. A job that failed (ErrJobFailed) or whose
// manifest is wrong (schemas.ErrInvalidJob, job.jobrun.ErrUnknownPlugin) fails the same
// way when run again; a job that did not finish (ErrNotFinished) or whose
// process is still alive (ErrRunning) is not an outcome yet.
var (
	// ErrJobFailed: the job ran and failed, timed out, or its process died
	// without a result.
	ErrJobFailed = errors.New("job failed")
	// ErrNotFinished: no process of the job is running and it left no
	// result, so it must be run again.
	ErrNotFinished = errors.New("job not finished")
	// ErrRunning: a process of the job still holds its lock, for example
	// one started by an agent that has since died. Recover waits for it.
	ErrRunning = errors.New("job still running")
)
