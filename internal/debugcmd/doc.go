// Package debugcmd parses the read-only debug commands a vendor's support
// engineer may run in an install, and bounds their answers. The job
// process parses every debug job's command before a plugin sees it; the
// agent can call the same Parse to refuse a request before it starts a
// job (this package links nothing heavier than regexp, so nuon-agent may
// import it, which it may not do with reconciler's subpackages).
//
// # The allow-list
//
// A command is a list of words, never a string for a shell, and never
// handed to kubectl, helm or terraform as argv: Parse checks the words
// against a fixed grammar per plugin and returns a Command, whose fields
// the plugin then uses through its own libraries (client-go, the Helm SDK,
// terraform's JSON state).
//
//	Kubernetes (plugins manifests and helm)
//	  get KIND [NAME] [-n NS]            objects of a namespaced kind; Secrets show keys only
//	  describe KIND NAME [-n NS]         a readable summary: metadata, health, conditions, events
//	  events [-n NS]                     the namespace's events, newest last
//	  logs POD [-c CONTAINER] [--tail N] [--since DURATION]
//	Helm (plugin helm)
//	  status RELEASE                     the release's revision, status, chart (never its values)
//	  history RELEASE                    its revisions
//	Terraform (plugin terraform)
//	  state list                         every resource address in the state
//	  state show ADDRESS                 one resource's attributes; sensitive ones as (sensitive)
//
// Kubernetes commands run only in the install's namespaces (the job's
// debug.namespaces, or the component's own namespace); NS defaults to the
// component's namespace. Anything else is refused with a *Refusal, which
// wraps ErrRefused and says why: the agent reports it as the answer.
//
// # Limits
//
// The job's timeout bounds a command. Limit bounds its output: it keeps
// the first MaxBytes bytes, counts the rest, and Answer appends
// TruncatedMarker when it cut anything.
package debugcmd
