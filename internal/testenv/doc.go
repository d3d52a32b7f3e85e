// Package testenv is how a test asks for a real component of its
// environment that the repository does not hold (a tool the Makefile
// installs or builds), so that no test and no benchmark drops out of a
// run without anyone noticing.
//
// # Skip locally, fail in CI
//
// A component that is missing is a skip on a developer's machine, naming
// the make target that provides it, and a failure under CI (the
// environment variable CI set to anything but "", "false" or "0") and
// under `make test` and `make bench`, which provision every tool first and
// set NUON_REQUIRE_TOOLS=1: there a missing component means the Makefile
// or the environment is broken, and a suite that quietly shrinks would
// hide it. Missing is that rule; every
// test helper that looks for a tool (internal/oci/ocitest for the registry,
// internal/kubetest for the API server and kubectl, TerraformConfig for
// the provider mirror) goes through it rather than calling t.Skip.
package testenv
