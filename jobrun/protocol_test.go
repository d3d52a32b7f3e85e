package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/reconciler"
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

// TestVendorPluginJob: a job for a vendor's plugin, which the job process
// runs behind the protocol, may name a type the job schema does not
// list, and every other rule of a job still holds.
func TestVendorPluginJob(t *testing.T) {
	zones := t.TempDir()
	zonefile := &plugin.Process{
		Runner:  plugin.Runner{Path: "../fixtures/plugins/zonefile/zonefile", Environ: append(os.Environ(), "NUON_ZONE_DIR="+zones)},
		Granted: schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}},
	}
	write := func(t *testing.T, edit func(m map[string]any)) (string, string) {
		data, err := os.ReadFile("../fixtures/plugins/zonefile/job.json")
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "debug")
		m["stateDir"], m["resultFile"] = t.TempDir(), filepath.Join(t.TempDir(), ResultFile)
		edit(m)
		b, _ := json.Marshal(m)
		return writeManifestFile(t, b), m["resultFile"].(string)
	}
	tests := []struct {
		name    string
		plugins map[string]reconciler.Plugin
		edit    func(m map[string]any)
		want    string
	}{
		{"zero timeout", map[string]reconciler.Plugin{"zonefile": zonefile}, func(m map[string]any) { m["timeout"] = "0s" }, `timeout "0s" is not a positive duration`},
		{"a command on an update", map[string]reconciler.Plugin{"zonefile": zonefile}, func(m map[string]any) { m["debug"] = map[string]any{"command": []string{"records"}} }, "debug is set for a update job"},
		{"no such plugin here", map[string]reconciler.Plugin{}, func(map[string]any) {}, `plugin: must be one of terraform, helm, manifests or image, not "zonefile"`},
		{"a built-in's name, not here", map[string]reconciler.Plugin{"zonefile": zonefile}, func(m map[string]any) { m["plugin"] = "helm"; m["timeout"] = "0s" }, `timeout "0s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, result := write(t, tt.edit)
			err := Main(t.Context(), path, tt.plugins, nil, io.Discard)
			if !errors.Is(err, schemas.ErrInvalidJob) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Main = %v, want an invalid job saying %q", err, tt.want)
			}
			if _, err := os.Stat(result); !os.IsNotExist(err) {
				t.Errorf("a result for an invalid job: %v", err)
			}
		})
	}
	path, result := write(t, func(map[string]any) {})
	if err := Main(t.Context(), path, map[string]reconciler.Plugin{"zonefile": zonefile}, nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	res, err := readResult(result)
	if err != nil || !res.Changed || res.Outputs["records"] != float64(3) {
		t.Errorf("result = %+v, %v", res, err)
	}
}
