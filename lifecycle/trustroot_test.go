package lifecycle

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/trusttest"
)

// TestKeysKeepTheTrustRoot: create's keys phase copies the trust root's
// version 1 into the install's directory, once it is signed by a
// threshold of its own root keys, and refuses one that is not; the agent
// is then started with --trust-root rather than --trust.
func TestKeysKeepTheTrustRoot(t *testing.T) {
	v1 := trusttest.Version{Version: 1, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2"}, Threshold: 2,
		Render: []trusttest.RenderKey{{Name: "render-a"}}}
	for _, tc := range []struct {
		name    string
		signers []string
		want    string
	}{
		{"signed by its threshold", []string{"root-1", "root-2"}, ""},
		{"below its threshold", []string{"root-1"}, "too few root signatures"},
		{"unsigned", nil, "too few root signatures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := dir + "/1.json"
			data := v1.File(t, tc.signers...)
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			o := &Options{ID: "acme", Dir: dir + "/acme", TrustRoot: file}
			result, _, err := keys(context.Background(), o, &state{})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("keys: %v, want an error with %q", err, tc.want)
				}
				if _, err := os.Stat(o.path(TrustRootFile)); err == nil {
					t.Errorf("%s written for a refused root", TrustRootFile)
				}
				return
			}
			if err != nil || result != Done {
				t.Fatalf("keys: %s, %v", result, err)
			}
			if got, _ := os.ReadFile(o.path(TrustRootFile)); string(got) != string(data) {
				t.Errorf("%s holds\n%s\nwant the given file", TrustRootFile, got)
			}
			if _, err := os.Stat(o.path(TrustFile)); err == nil {
				t.Errorf("an allowed_signers trust file was written beside the trust root")
			}
			if result, _, err := keys(context.Background(), o, &state{}); err != nil || result != Unchanged {
				t.Errorf("keys again: %s, %v; want unchanged", result, err)
			}
		})
	}
}
