package jobs

import (
	"encoding/json"
	"fmt"
	"os"

	"nuon.dev/nuon/schemas"
)

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
	if res.Kind != schemas.KindJobResult {
		return nil, fmt.Errorf("result %s: kind is %q, not %q", path, res.Kind, schemas.KindJobResult)
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
