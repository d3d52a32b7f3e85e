package schemas

import (
	"os"
	"testing"
)

func TestLoadFixtures(t *testing.T) {
	s, err := Load(os.DirFS("../fixtures/tenant"))
	if err != nil {
		t.Fatalf("load fixtures:\n%v", err)
	}
	if len(s.Installs) < 3 || len(s.Channels) < 2 || len(s.App.Components) < 4 {
		t.Fatalf("fixtures too small: %d installs, %d channels, %d components", len(s.Installs), len(s.Channels), len(s.App.Components))
	}
}
