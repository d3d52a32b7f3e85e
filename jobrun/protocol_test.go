package jobrun

import (
	"context"
	"os"
	"testing"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// The test binary doubles as the terraform plugin behind the protocol:
// with the arguments serve-terraform CLICONFIG it answers one request on
// its stdin, as `nuon plugin serve terraform` does.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "serve-terraform" {
		mf, err := plugin.Builtin(schemas.TypeTerraform)
		if err != nil {
			os.Exit(plugin.ExitFailed)
		}
		s := &plugin.Server{Manifest: mf, Plugin: &terraform.Plugin{CLIConfig: os.Args[2]}}
		os.Exit(s.Serve(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// servedTerraform is the terraform plugin in a process of its own.
func servedTerraform(t testing.TB, cliConfig string) *plugin.Process {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &plugin.Process{
		Runner:  plugin.Runner{Path: exe, Args: []string{"serve-terraform", cliConfig}},
		Granted: plugin.BuiltinGrant(schemas.TypeTerraform),
	}
}
