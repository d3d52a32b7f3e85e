package redacttest

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestLeaks: the checker finds a secret and any fragment of it longer than
// the minimum in the encodings tools print, and not a shorter fragment.
func TestLeaks(t *testing.T) {
	const secret = `pa"ss<word> with spaces ok&€end`
	quoted, _ := json.Marshal(strconv.Quote("log: " + secret))
	tests := []struct {
		name, text string
		leak       bool
	}{
		{"raw", "error: " + secret + "!", true},
		{"wrapped", "error: pa\"ss<word>\n│ with spaces", true},
		{"json of go %q", string(quoted), true},
		{"an 8-byte fragment", `x ss<word> y`, false},
		{"a 9-byte fragment", `x "ss<word> y`, true},
		{"a 10-byte fragment", `x pa"ss<word y`, true},
		{"short fragments only", "spaces with €end", false},
		{"redacted", "error: [redacted]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Leaks(tt.text, secret)
			if (len(got) > 0) != tt.leak {
				t.Errorf("Leaks(%q) = %q, want a leak: %v", tt.text, got, tt.leak)
			}
		})
	}
}
