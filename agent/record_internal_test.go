package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/redact"
)

// TestRedactJSON: a secret that spans JSON syntax leaves valid JSON.
func TestRedactJSON(t *testing.T) {
	red, err := redact.New(map[string]string{"S": `"key": "val`})
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{red: red}
	for _, in := range []string{
		"{\n  \"key\": \"val\",\n  \"e\": \"x \\\"key\\\": \\\"val y\"\n}\n",
		`{"list": ["\"key\": \"val"], "key": "val"}`,
	} {
		out := a.redactJSON([]byte(in))
		if !json.Valid(out) {
			t.Errorf("redactJSON(%s) = %s: not JSON", in, out)
		}
		if strings.Contains(string(out), `\"key\": \"val`) {
			t.Errorf("redactJSON(%s) = %s: holds the secret", in, out)
		}
	}
}
