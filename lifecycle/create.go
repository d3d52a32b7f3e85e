package lifecycle

import "context"

// Create makes install o.ID, phase by phase (see the package doc), each
// phase doing only what is missing. It reports an Event per phase to
// o.Progress.
func Create(ctx context.Context, o Options) error {
	if err := o.defaults(true); err != nil {
		return err
	}
	phases := []phase{
		{"keys", keys},
		{"sandbox", sandbox},
		{"install-file", commitInstallFile},
		{"agent", startAgent},
	}
	if o.Cloud == CloudAWS {
		phases = append(phases, phase{"endpoint", closeEndpoint})
	}
	return runPhases(ctx, &o, phases)
}
