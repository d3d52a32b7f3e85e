package renderer_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// TestDeletedInstall renders an install marked deleted: true (what `nuon
// install delete` commits) with no component, so its agent deletes every
// component it applied; the other installs keep theirs.
func TestDeletedInstall(t *testing.T) {
	src, err := schemas.Load(os.DirFS(fixtureTenant))
	if err != nil {
		t.Fatal(err)
	}
	acme := src.Installs["acme"]
	acme.Deleted = true
	src.Installs["acme"] = acme
	tests := []struct {
		id      string
		deleted bool
		files   int
	}{
		{"acme", true, 1},
		{"globex", false, 1 + len(src.App.Components)},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			files, err := renderer.Install(src, tt.id)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != tt.files {
				t.Errorf("%d files, want %d", len(files), tt.files)
			}
			var st schemas.InstallState
			if err := json.Unmarshal(files[schemas.InstallStateFile], &st); err != nil {
				t.Fatal(err)
			}
			if st.Deleted != tt.deleted || (len(st.Components) == 0) != tt.deleted {
				t.Errorf("deleted %v, components %v", st.Deleted, st.Components)
			}
		})
	}
	var st schemas.InstallState
	files, _ := renderer.Install(src, "acme")
	_ = json.Unmarshal(files[schemas.InstallStateFile], &st)
	if d := cmp.Diff([]string{}, st.Components); d != "" {
		t.Errorf("components (-want +got):\n%s", d)
	}
}
