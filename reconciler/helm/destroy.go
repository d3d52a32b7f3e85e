package helm

import (
	"context"
	"os"
	"path/filepath"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Destroy uninstalls the release and its history. A release that does not
// exist is already gone.
func (p *Plugin) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	r, err := p.start(ctx, job, env)
	if err != nil {
		return err
	}
	return r.do(ctx,
		step{"connect", r.connect},
		step{"uninstall", func(context.Context) error { return r.uninstall(true) }},
		step{"forget", func(context.Context) error { return os.RemoveAll(filepath.Join(r.dir, chartDir)) }},
	)
}
