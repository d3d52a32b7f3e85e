package plugintest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/schemas"
)

func loadJob(t *testing.T, path string) *schemas.Job {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	job, err := plugin.DecodeJob(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// TestZonefile runs the kit against the vendor plugin in the fixtures,
// written in Perl, and checks the zone file it left behind.
func TestZonefile(t *testing.T) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl")
	}
	zones := t.TempDir()
	other := "; kept by hand\nmail\t300\tIN\tA\t10.0.0.99\n"
	zone := filepath.Join(zones, "acme.shop.internal.zone")
	if err := os.WriteFile(zone, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	job := loadJob(t, "../../fixtures/plugins/zonefile/job.json")
	rep := Test(t, Kit{
		Path:    "../../fixtures/plugins/zonefile/zonefile",
		Job:     job,
		Environ: append(os.Environ(), "NUON_ZONE_DIR="+zones),
	})
	if rep.Plugin == nil || rep.Plugin.Name != "zonefile" || len(rep.Results) < 12 {
		t.Fatalf("report = %+v", rep)
	}
	// The plugin destroyed its records and kept the line it does not own.
	if b, _ := os.ReadFile(zone); string(b) != other {
		t.Errorf("zone file after destroy:\n%s", b)
	}
}

// TestKitFails: the kit fails a plugin that breaks the protocol's rules,
// with a message that says which.
func TestKitFails(t *testing.T) {
	const handshake = `req=$(cat)
case "$req" in *'"operation":"handshake"'*)
  echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"handshake","plugin":{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"careless","version":"1.0.0","protocols":[1],"operations":["apply","drift"],"capabilities":{}}}'
  exit 0;;
esac
`
	// It always says it changed something, never refuses, and finds
	// drift that is not there.
	body := handshake + `case "$req" in
*'"operation":"apply"'*) echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","changed":true}';;
*) echo '{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"drift","drift":[{"name":"x","action":"changed"}]}';;
esac`
	path := filepath.Join(t.TempDir(), "careless")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := Kit{Path: path}.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, r := range rep.Results {
		if !r.OK {
			failed[r.Check] = r.Message
		}
	}
	want := map[string]string{
		"handshake in protocol 999 only":  "want error unsupported",
		"a request that is not JSON":      "answered without an error",
		"apply again changes nothing":     "not idempotent",
		"drift after apply finds nothing": "drift right after apply",
		"apply in protocol 999":           "want error unsupported",
	}
	for check, msg := range want {
		if !strings.Contains(failed[check], msg) {
			t.Errorf("check %q: got %q, want a failure saying %q", check, failed[check], msg)
		}
	}
	if _, ok := failed["handshake"]; ok {
		t.Errorf("handshake failed: %s", failed["handshake"])
	}
}
