package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"nuon.dev/nuon/schemas"
)

// newJob writes the manifest of one job.
func (a *Agent) newJob(d *Desired, spec *schemas.ComponentState, op string) *schemas.Job {
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	job := &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         fmt.Sprintf("%s-g%d-%s-%s", spec.Name, d.Generation, op, hex.EncodeToString(suffix[:])),
		Install:    a.cfg.Install,
		Component:  spec.Name,
		Operation:  op,
		Plugin:     spec.Type,
		Version:    spec.Version,
		Generation: d.Generation,
		Commit:     d.Commit.String(),
		Inputs:     spec.Inputs,
		Terraform:  spec.Terraform,
		Helm:       spec.Helm,
		Manifests:  spec.Manifests,
		Timeout:    a.timeout(spec).String(),
		StateDir:   filepath.Join(a.cfg.Workdir, "components", spec.Name),
	}
	if spec.Type == schemas.TypePlugin && spec.Plugin != nil {
		// A vendor's plugin: the job runs its artifact (one of the
		// job's artifacts, synced and verified like the others) with
		// exactly the grants of the signed desired state, never more.
		job.Plugin = spec.Plugin.Name
		job.Grants = &schemas.PluginCapabilities{}
		if spec.Plugin.Grants != nil {
			g := *spec.Plugin.Grants
			g.Env = slices.Clone(g.Env)
			job.Grants = &g
		}
	}
	if spec.Name == schemas.SandboxComponent && a.cfg.SandboxDir != "" {
		job.StateDir = a.cfg.SandboxDir
	}
	if spec.Name == schemas.SandboxComponent && len(a.cfg.SandboxInputs) > 0 {
		// This machine's own inputs (paths): never in git, never part of
		// the spec, so they neither render nor trigger an apply.
		inputs := maps.Clone(spec.Inputs)
		if inputs == nil {
			inputs = map[string]any{}
		}
		for k, v := range a.cfg.SandboxInputs {
			inputs[k] = v
		}
		job.Inputs = inputs
	}
	if spec.Name == schemas.SandboxComponent && d.Install.Sandbox.State != nil {
		// On AWS the sandbox's state is the S3 object create applied it
		// with: the job adopts it instead of a local file.
		st := *d.Install.Sandbox.State
		job.State = &st
	}
	job.ResultFile = filepath.Join(a.jobDir(job.ID), "result.json")
	for _, art := range spec.Artifacts {
		art.Source = "" // jobs deploy from the install registry only
		job.Artifacts = append(job.Artifacts, art)
	}
	return job
}

func (a *Agent) timeout(cs *schemas.ComponentState) time.Duration {
	var s string
	switch {
	case cs.Terraform != nil:
		s = cs.Terraform.Timeout
	case cs.Helm != nil:
		s = cs.Helm.Timeout
	case cs.Manifests != nil:
		s = cs.Manifests.Timeout
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	return a.cfg.JobTimeout
}

func (a *Agent) jobDir(id string) string { return filepath.Join(a.cfg.Workdir, "jobs", id) }

// pastTense is how a status commit's message says an operation succeeded.
var pastTense = map[string]string{
	schemas.OpCreate: "created",
	schemas.OpUpdate: "updated",
	schemas.OpDelete: "deleted",
}

// done says a job's operation succeeded, for the audit log.
func done(job *schemas.Job) string {
	verb, ok := pastTense[job.Operation]
	if !ok {
		verb = job.Operation + " done:"
	}
	return fmt.Sprintf("%s %s %s", verb, job.Component, job.Version)
}

func errString(err error, res *schemas.JobResult) string {
	if err != nil {
		return err.Error()
	}
	if res != nil && res.Error != "" {
		return res.Error
	}
	return ""
}
