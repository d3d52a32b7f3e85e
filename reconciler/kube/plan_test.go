package kube

import "testing"

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"PersistentVolumeClaim": "persistent_volume_claim",
		"ConfigMap":             "config_map",
		"CRDThing":              "crd_thing",
		"Secret":                "secret",
		"":                      "",
	} {
		if got := Snake(in); got != want {
			t.Errorf("Snake(%q) = %q, want %q", in, got, want)
		}
	}
}
