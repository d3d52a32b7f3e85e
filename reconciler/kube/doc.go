// Package kube holds what the manifests and helm plugins share about a
// cluster's objects once they are applied: their health, as kstatus
// computes it (the library Flux uses), and the read-only Kubernetes debug
// commands of package internal/debugcmd (get, describe, events, logs), answered
// through client-go, never through kubectl.
//
// Health lists each kind once per namespace, with full objects, and
// computes every object's status from it: a health check of N objects of
// K kinds costs K requests, not N.
//
// Debug reads only namespaced kinds in the namespace the command names,
// which the plugin has already checked against the install's namespaces.
// A Secret never shows its values, only its keys and their sizes, and the
// kubectl last-applied-configuration annotation (which may hold a
// Secret's data) and managed fields are dropped from every object.
package kube
