// Package jobrun is what runs inside a job process (`nuon job run
// MANIFEST`): it validates the job manifest the agent wrote, runs the
// plugin of the component's type under the job's timeout, and writes the
// JobResult atomically as the very last thing it does, so that a result
// file means the job finished. PodMain does the same inside a Kubernetes
// Job's pod and also hands the result back through the pod's log and
// termination message, since the runner cannot read the pod's files.
//
// Nothing leaves a job with a secret in it. The job process is where the
// install's secrets (NUON_SECRET_* variables) are used, so it is where
// they are redacted, once, with package internal/redact: the job's log,
// the result's outputs and error, the error Main returns, and (with
// WithStdio, as `nuon job run` runs) everything written to fds 1 and 2 by
// the plugins, their libraries and the tools they start. The plugins carry
// no redaction of their own.
//
// Besides create, update and delete, a job may be a drift, health or
// debug job: the job process calls the plugin's reconciler.DriftChecker,
// HealthChecker or Debugger, or fails with ErrUnsupported. A debug job's
// command is parsed against the plugin's allow-list (internal/debugcmd)
// before the plugin sees it; a refused one fails with an error wrapping
// debugcmd.ErrRefused that says why. Its output is bounded by
// debug.maxBytes (and debug.timeout, within the job's timeout) and is
// redacted like every other output before it goes into the result.
//
// A plugin may also run behind the plugin protocol (package plugin), as a
// process of its own: a *plugin.Process in the plugins map is one. The
// built-ins run that way with `nuon job run --plugin-process NAME`, served
// by the same binary (`nuon plugin serve NAME`); a vendor's plugin with
// --plugin-process NAME=PATH, and its jobs may then name a component type
// the job schema does not list. Its stderr is the job's log, redacted like
// the rest; a debug command for a vendor's plugin is parsed by the plugin
// against its own allow-list, and its answer bounded here.
//
// The agent side, which starts these processes and waits for them, is
// package agent/jobs; the two share only the manifest and result formats
// of package schemas. Keeping them apart keeps the plugins and their
// libraries out of the long-running agent binary.
package jobrun
