package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"nuon.dev/nuon/schemas"
)

func serveBytes(t testing.TB, in string) (*schemas.PluginResponse, int, []byte) {
	s := &Server{Manifest: notesManifest(), Plugin: notes{}}
	var out, log bytes.Buffer
	code := s.Serve(context.Background(), strings.NewReader(in), &out, &log)
	var resp schemas.PluginResponse
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, out.Bytes())
	}
	return &resp, code, out.Bytes()
}

// TestServeBadRequests: a Go plugin behind Server answers every request,
// however broken, with a response that validates, the error code that
// says why, and the matching exit code.
func TestServeBadRequests(t *testing.T) {
	job := testJob(t, "notes", schemas.OpUpdate, map[string]any{"text": "x"})
	req := func(edit func(r *schemas.PluginRequest)) string {
		r := schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest, Protocol: 1,
			Operation: schemas.PluginApply, Job: job, StateDir: t.TempDir(), WorkDir: t.TempDir()}
		edit(&r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	tests := []struct {
		name, in string
		op, code string
		exit     int
		want     string
	}{
		{"empty", "", schemas.PluginHandshake, schemas.PluginInvalid, ExitInvalid, "plugin request: EOF"},
		{"not JSON", "apply!", schemas.PluginHandshake, schemas.PluginInvalid, ExitInvalid, "invalid character"},
		{"unknown field", `{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"operation":"apply","force":true}`,
			schemas.PluginApply, schemas.PluginInvalid, ExitInvalid, `unknown field "force"`},
		{"apply without a job", req(func(r *schemas.PluginRequest) { r.Job = nil }),
			schemas.PluginApply, schemas.PluginInvalid, ExitInvalid, "needs a job"},
		{"wrong kind", req(func(r *schemas.PluginRequest) { r.Kind = "Job" }),
			schemas.PluginApply, schemas.PluginInvalid, ExitInvalid, `kind "Job"`},
		{"unknown operation", req(func(r *schemas.PluginRequest) { r.Operation = "upgrade" }),
			schemas.PluginHandshake, schemas.PluginInvalid, ExitInvalid, `unknown operation "upgrade"`},
		{"a job for another plugin", req(func(r *schemas.PluginRequest) { r.Job = testJob(t, "helm", schemas.OpUpdate, nil) }),
			schemas.PluginApply, schemas.PluginInvalid, ExitInvalid, "plugin notes got a job for plugin helm"},
		{"protocol 2", req(func(r *schemas.PluginRequest) { r.Protocol = 2 }),
			schemas.PluginApply, schemas.PluginUnsupported, ExitUnsupported, "speaks protocols [1], not 2"},
		{"undeclared operation", req(func(r *schemas.PluginRequest) { r.Operation = schemas.PluginPlan }),
			schemas.PluginPlan, schemas.PluginUnsupported, ExitUnsupported, "has no plan operation"},
		{"handshake in protocol 3 only", `{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":3,"protocols":[3],"operation":"handshake"}`,
			schemas.PluginHandshake, schemas.PluginUnsupported, ExitUnsupported, "the job [3]"},
		{"failed", req(func(r *schemas.PluginRequest) { j := *job; j.Inputs = nil; r.Job = &j }),
			schemas.PluginApply, schemas.PluginFailed, ExitFailed, "input text is empty"},
		{"two documents", req(func(*schemas.PluginRequest) {}) + "{}",
			schemas.PluginApply, schemas.PluginInvalid, ExitInvalid, "more than one JSON document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, exit, raw := serveBytes(t, tt.in)
			if err := schemas.ValidateJSON(schemas.SchemaPluginResponse, raw); err != nil {
				t.Errorf("response does not validate: %v\n%s", err, raw)
			}
			if resp.Operation != tt.op || resp.Error == nil || resp.Error.Code != tt.code || exit != tt.exit || !strings.Contains(resp.Error.Message, tt.want) {
				t.Errorf("response %s, exit %d; want operation %s, error %s saying %q, exit %d", raw, exit, tt.op, tt.code, tt.want, tt.exit)
			}
		})
	}
}

// FuzzServe: whatever arrives on its stdin, a Server answers with one
// response that validates against the schema, with an exit code that
// matches it, and never panics.
func FuzzServe(f *testing.F) {
	f.Add(`{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"protocols":[1],"operation":"handshake"}`)
	f.Add(`{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"operation":"health","job":{"id":"a","plugin":"notes","inputs":{"text":"x"}},"stateDir":"/nonexistent","workDir":"/nonexistent"}`)
	f.Add(`{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"operation":"drift","job":{"id":"a","plugin":"notes"},"stateDir":"/nonexistent","workDir":"/x"}`)
	f.Add(`{"operation":"apply"}`)
	f.Add("\x00")
	f.Fuzz(func(t *testing.T, in string) {
		// Only read-only operations reach the plugin: the fuzzer must not
		// write files where a request points.
		var head struct{ Operation string }
		if json.Unmarshal([]byte(in), &head) == nil && (head.Operation == schemas.PluginApply || head.Operation == schemas.PluginDestroy) {
			in = strings.Replace(in, `"`+head.Operation+`"`, `"plan"`, -1)
		}
		resp, exit, raw := serveBytes(t, in)
		if err := schemas.ValidateJSON(schemas.SchemaPluginResponse, raw); err != nil {
			t.Fatalf("response does not validate: %v\n%s", err, raw)
		}
		if exit != ExitCode(resp) {
			t.Fatalf("exit %d for %s", exit, raw)
		}
	})
}
