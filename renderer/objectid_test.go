package renderer_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/renderer"
)

// TestInstallResultJSON checks that a result's commit and tree are
// written as before they were ids: 40 hex digits, left out when there is
// none, and read back the same; and that anything but 40 hex digits or
// nothing is refused.
func TestInstallResultJSON(t *testing.T) {
	h := plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")
	tests := []struct {
		name string
		in   renderer.InstallResult
		want string
	}{
		{"commit and tree", renderer.InstallResult{ID: "acme", Change: renderer.Added, Generation: 1, Commit: renderer.ObjectID(h), Tree: renderer.ObjectID(h)},
			`{"install":"acme","change":"added","generation":1,"commit":"0123456789abcdef0123456789abcdef01234567","tree":"0123456789abcdef0123456789abcdef01234567"}`},
		{"tree only", renderer.InstallResult{ID: "acme", Change: renderer.Unchanged, Tree: renderer.ObjectID(h)},
			`{"install":"acme","change":"unchanged","tree":"0123456789abcdef0123456789abcdef01234567"}`},
		{"neither", renderer.InstallResult{ID: "acme", Change: renderer.Failed, Error: "bad"},
			`{"install":"acme","change":"failed","error":"bad"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.want {
				t.Errorf("got  %s\nwant %s", data, tc.want)
			}
			var back renderer.InstallResult
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if back != tc.in {
				t.Errorf("read back %+v, want %+v", back, tc.in)
			}
		})
	}
	for _, bad := range []string{`"0123"`, `"` + strings.Repeat("g", 40) + `"`, `"` + h.String() + `0"`, `"` + strings.ToUpper(h.String())[:39] + `"`, `12`} {
		var in renderer.InstallResult
		if err := json.Unmarshal([]byte(`{"commit":`+bad+`}`), &in); err == nil {
			t.Errorf("commit %s read as %s, want an error", bad, in.Commit)
		}
	}
}

// FuzzObjectID reads fuzzed text as an object id: it is refused, or it
// is none and was empty, or it is written back as the same text in
// lower case.
func FuzzObjectID(f *testing.F) {
	f.Add("")
	f.Add("0123456789abcdef0123456789abcdef01234567")
	f.Add("0123456789ABCDEF0123456789abcdef01234567")
	f.Add("0000000000000000000000000000000000000000")
	f.Add("xyz")
	f.Fuzz(func(t *testing.T, text string) {
		var o renderer.ObjectID
		if err := o.UnmarshalText([]byte(text)); err != nil {
			return
		}
		out, err := o.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		if o.IsZero() {
			if strings.Trim(text, "0") != "" {
				t.Fatalf("%q read as no object", text)
			}
			return
		}
		if string(out) != strings.ToLower(text) {
			t.Fatalf("%q written back as %q", text, out)
		}
	})
}
