package jobrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// opsPlugin implements every read-only operation; echoPlugin none.
type opsPlugin struct{ echoPlugin }

var (
	_ reconciler.DriftChecker  = opsPlugin{}
	_ reconciler.HealthChecker = opsPlugin{}
	_ reconciler.Debugger      = opsPlugin{}
)

func (opsPlugin) Drift(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	return &schemas.JobResult{
		Changed: true, // the job process must not believe it
		Drift:   []schemas.ResourceDrift{{Kind: "ConfigMap", Namespace: "shop", Name: "settings", Action: schemas.DriftChanged, Fields: []string{"data.theme"}}},
		Health:  &schemas.Health{Status: schemas.HealthReady},
	}, nil
}

func (opsPlugin) Health(context.Context, *schemas.Job, reconciler.Env) (*schemas.Health, error) {
	return &schemas.Health{Status: schemas.HealthProgressing, Message: "1 of 2 ready"}, nil
}

// Debug answers "get pods" with a line per pod, the last one holding the
// install's secret; "get nodes" as if it reached outside the install;
// "events" with a line per event until the output is full.
func (opsPlugin) Debug(ctx context.Context, _ *schemas.Job, _ reconciler.Env, cmd debugcmd.Command, out io.Writer) error {
	switch cmd.Kind {
	case "pods":
		fmt.Fprintf(out, "web-0 Running\nweb-1 Running password=%s\n", "hunter2-secret")
		return nil
	case "nodes":
		return &debugcmd.Refusal{Command: cmd.Words(), Reason: "nodes are not in the install's namespaces"}
	}
	for i := 0; ; i++ {
		if _, err := fmt.Fprintf(out, "event %d\n", i); err != nil {
			return err
		}
	}
}

func TestMainOperations(t *testing.T) {
	t.Setenv("NUON_SECRET_DB_PASSWORD", "hunter2-secret")
	plugins := map[string]reconciler.Plugin{schemas.TypeTerraform: echoPlugin{}, schemas.TypeManifests: opsPlugin{}}
	set := func(kv ...any) func(map[string]any) {
		return func(m map[string]any) {
			for i := 0; i < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
		}
	}
	cmd := func(words string, maxBytes int) map[string]any {
		d := map[string]any{"command": strings.Fields(words)}
		if maxBytes > 0 {
			d["maxBytes"] = maxBytes
		}
		return d
	}
	tests := []struct {
		name   string
		edit   func(map[string]any)
		wantIs error
		want   schemas.JobResult
	}{
		{
			name: "drift",
			edit: set("plugin", schemas.TypeManifests, "operation", schemas.OpDrift),
			want: schemas.JobResult{
				Drift:  []schemas.ResourceDrift{{Kind: "ConfigMap", Namespace: "shop", Name: "settings", Action: schemas.DriftChanged, Fields: []string{"data.theme"}}},
				Health: &schemas.Health{Status: schemas.HealthReady},
			},
		},
		{
			name: "health",
			edit: set("plugin", schemas.TypeManifests, "operation", schemas.OpHealth),
			want: schemas.JobResult{Health: &schemas.Health{Status: schemas.HealthProgressing, Message: "1 of 2 ready"}},
		},
		{
			name: "debug redacted",
			edit: set("plugin", schemas.TypeManifests, "operation", schemas.OpDebug, "debug", cmd("get pods", 0)),
			want: schemas.JobResult{Answer: &schemas.Answer{
				Command: []string{"get", "pods"}, Output: "web-0 Running\nweb-1 Running password=[redacted]\n", Bytes: 52,
			}},
		},
		{
			name: "debug truncated",
			edit: set("plugin", schemas.TypeManifests, "operation", schemas.OpDebug, "debug", cmd("events -n shop", 20)),
			want: schemas.JobResult{Answer: &schemas.Answer{
				Command: []string{"events", "-n", "shop"}, Output: "event 0\nevent 1\neven" + debugcmd.TruncatedMarker, Truncated: true, Bytes: 24,
			}},
		},
		{
			name:   "debug refused by the allow-list",
			edit:   set("plugin", schemas.TypeManifests, "operation", schemas.OpDebug, "debug", cmd("exec web-0 -- sh", 0)),
			wantIs: debugcmd.ErrRefused,
			want:   schemas.JobResult{Error: `debug command refused: "exec web-0 -- sh": "exec" is not an allowed manifests command (allowed: get, describe, events, logs)`, Refused: true},
		},
		{
			name:   "debug refused by the plugin",
			edit:   set("plugin", schemas.TypeManifests, "operation", schemas.OpDebug, "debug", cmd("get nodes", 0)),
			wantIs: debugcmd.ErrRefused,
			want:   schemas.JobResult{Error: `debug command refused: "get nodes": nodes are not in the install's namespaces`, Refused: true},
		},
		{
			name:   "drift unsupported",
			edit:   set("operation", schemas.OpDrift),
			wantIs: ErrUnsupported,
			want:   schemas.JobResult{Error: "operation not supported: plugin terraform has no drift operation"},
		},
		{
			name:   "debug unsupported",
			edit:   set("operation", schemas.OpDebug, "debug", cmd("state list", 0)),
			wantIs: ErrUnsupported,
			want:   schemas.JobResult{Error: "operation not supported: plugin terraform has no debug operation"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, result := manifest(t, "ops", tt.edit)
			var out bytes.Buffer
			err := Main(t.Context(), writeManifestFile(t, data), plugins, nil, &out)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v\n%s", err, tt.wantIs, out.String())
			}
			got, rerr := readResult(result)
			if rerr != nil {
				t.Fatal(rerr)
			}
			want := tt.want
			want.APIVersion, want.Kind, want.Job = schemas.APIVersion, "JobResult", "j-ops"
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if strings.Contains(out.String(), "hunter2") {
				t.Errorf("the job's log holds the secret:\n%s", out.String())
			}
		})
	}
}
