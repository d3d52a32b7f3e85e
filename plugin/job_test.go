package plugin

import (
	"strings"
	"testing"
)

func TestDecodeJob(t *testing.T) {
	const good = `{"apiVersion": "nuon.dev/v1", "kind": "Job", "id": "dns-1", "install": "acme", "component": "dns",
"operation": "update", "plugin": "zonefile", "version": "1.0.0", "generation": 1,
"commit": "0123456789abcdef0123456789abcdef01234567", "timeout": "1m", "stateDir": "/s", "resultFile": "/r"}`
	job, err := DecodeJob("job.json", []byte(good))
	if err != nil || job.Plugin != "zonefile" {
		t.Fatalf("DecodeJob = %+v, %v", job, err)
	}
	tests := []struct{ name, old, new, want string }{
		{"plugin that is not a name", `"zonefile"`, `"Zone File"`, `job.json:2:34: plugin: "Zone File" is not a lower-case DNS label`},
		{"unknown field", `"generation": 1,`, `"generation": 1, "root": true,`, `job.json:2:83: root: unknown field "root"`},
		{"missing id", `"id": "dns-1", `, ``, `job.json:1:1: missing required field "id"`},
		{"not JSON", `}`, `]`, `job.json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeJob("job.json", []byte(strings.Replace(good, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeJob = %v, want %q", err, tt.want)
			}
		})
	}
}
