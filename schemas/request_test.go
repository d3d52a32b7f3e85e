package schemas

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const goodRequest = `{"apiVersion":"nuon.dev/v1","kind":"Request","id":"r-1","install":"acme","type":"logs","component":"api","requester":"alice","created":"2030-01-01T00:00:00Z","deadline":"2030-01-01T01:00:00Z","logs":{"since":"1h","tail":100}}`

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name, path, data, err string
	}{
		{"logs", "requests/acme/r-1.json", goodRequest, ""},
		{"debug", "requests/acme/r-2.json", `{"apiVersion":"nuon.dev/v1","kind":"Request","id":"r-2","install":"acme","type":"debug","component":"api","requester":"alice","created":"2030-01-01T00:00:00Z","deadline":"2030-01-01T01:00:00Z","command":["get","pods"]}`, ""},
		{"wrong folder", "requests/globex/r-1.json", goodRequest, "belong in requests/acme/r-1.json"},
		{"debug without command", "requests/acme/r-3.json", `{"apiVersion":"nuon.dev/v1","kind":"Request","id":"r-3","install":"acme","type":"debug","requester":"a","created":"2030-01-01T00:00:00Z","deadline":"2030-01-01T01:00:00Z"}`, "no command"},
		{"deadline before created", "requests/acme/r-4.json", `{"apiVersion":"nuon.dev/v1","kind":"Request","id":"r-4","install":"acme","type":"logs","requester":"a","created":"2030-01-01T02:00:00Z","deadline":"2030-01-01T01:00:00Z"}`, "not after created"},
		{"unknown field", "requests/acme/r-1.json", strings.Replace(goodRequest, `"tail":100`, `"tail":100,"shell":true`, 1), "shell"},
		{"bad type", "requests/acme/r-1.json", strings.Replace(goodRequest, `"type":"logs"`, `"type":"exec"`, 1), "type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRequest(tt.path, []byte(tt.data))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if r.Install != "acme" || r.Deadline.Sub(r.Created) != time.Hour {
					t.Fatalf("decoded %+v", r)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want ErrInvalidRequest mentioning %q", err, tt.err)
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add("requests/acme/r-1.json", []byte(goodRequest))
	f.Add("requests/acme/r-2.json", []byte(`{"apiVersion":"nuon.dev/v1","kind":"Request","id":"r-2","install":"acme","type":"debug","requester":"alice","created":"2030-01-01T00:00:00Z","deadline":"2030-01-01T01:00:00Z","command":["logs","web-0","--tail","10"]}`))
	f.Add("requests/../r.json", []byte(`{"id":"../x","install":".."}`))
	f.Add("x", []byte(`{} {}`))
	f.Add("", []byte(``))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		r, err := DecodeRequest(name, data)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted request fails Validate: %v", err)
		}
		if name != RequestPath(r.Install, r.ID) || strings.Contains(r.ID, "/") || strings.Contains(r.Install, "/") {
			t.Fatalf("accepted %q at %s", r.ID, name)
		}
		if diff := cmp.Diff(r.Deadline.After(r.Created), true); diff != "" {
			t.Fatal(diff)
		}
	})
}
