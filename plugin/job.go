package plugin

import (
	"errors"
	"strings"

	"nuon.dev/nuon/schemas"
)

// DecodeJob reads a job manifest for a plugin: a job as
// schemas/job.schema.json describes it, except that its plugin may be any
// plugin's name, a vendor's own included. Its problems name file and the
// line and column in it.
func DecodeJob(file string, data []byte) (*schemas.Job, error) {
	// The job is checked as the job of a request, placed first so that
	// its lines and columns stay where they are in the file.
	wrapped := append(append([]byte(`{"job":`), data...),
		[]byte(`,"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"operation":"apply","stateDir":"-","workDir":"-"}`)...)
	if err := schemas.ValidateJSON(schemas.SchemaPluginRequest, wrapped); err != nil {
		var ps schemas.Problems
		if !errors.As(err, &ps) {
			return nil, err
		}
		out := make(schemas.Problems, 0, len(ps))
		for _, p := range ps {
			p.File = file
			p.Field = strings.TrimPrefix(strings.TrimPrefix(p.Field, "job"), ".")
			if p.Line == 1 && p.Column > len(`{"job":`) {
				p.Column -= len(`{"job":`)
			}
			out = append(out, p)
		}
		return nil, out
	}
	var job schemas.Job
	if err := decodeStrict(data, &job); err != nil {
		return nil, err
	}
	return &job, nil
}
