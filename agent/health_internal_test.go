package agent

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

// TestHealthFailure: a check that could not run, or found resources gone,
// fails the component; one that found them not Ready does not.
func TestHealthFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		h    *schemas.Health
		want string
	}{
		{"ready", nil, &schemas.Health{Status: schemas.HealthReady}, ""},
		{"no health", nil, nil, ""},
		{"progressing", nil, &schemas.Health{Status: schemas.HealthProgressing, Resources: []schemas.ResourceHealth{{Kind: "Deployment", Name: "api", Status: schemas.HealthProgressing}}}, ""},
		{"failed, there", nil, &schemas.Health{Status: schemas.HealthFailed, Resources: []schemas.ResourceHealth{{Kind: "Job", Name: "migrate", Status: schemas.HealthFailed, Message: "BackoffLimitExceeded"}}}, ""},
		{"unreachable", errors.New("dial tcp 127.0.0.1:6443: connection refused"), nil, "health check failed: dial tcp 127.0.0.1:6443: connection refused"},
		{"gone", nil, &schemas.Health{Status: schemas.HealthFailed, Resources: []schemas.ResourceHealth{
			{Kind: "ConfigMap", Namespace: "shop", Name: "settings", Status: schemas.HealthFailed, Message: "not found"},
			{Address: "local_file.config", Status: schemas.HealthFailed, Message: "Resource not found"},
			{Kind: "Deployment", Name: "api", Status: schemas.HealthReady},
		}}, "resources gone: ConfigMap/shop/settings, local_file.config"},
	} {
		if got := healthFailure(tc.err, tc.h); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestChangedOutputs: only outputs the status records are compared, by
// value, whatever the JSON's form.
func TestChangedOutputs(t *testing.T) {
	applied := map[string]any{
		"registry": map[string]any{"url": "127.0.0.1:5001", "region": "local"},
		"cluster":  map[string]any{"endpoint": "https://127.0.0.1:6443", "subnets": []any{}},
		"count":    float64(3),
	}
	for _, tc := range []struct {
		name string
		now  map[string]any
		want []string
	}{
		{"same", map[string]any{"registry": map[string]any{"region": "local", "url": "127.0.0.1:5001"}, "cluster": map[string]any{"endpoint": "https://127.0.0.1:6443", "subnets": []any{}}, "count": 3, "extra": "x"}, nil},
		{"new port", map[string]any{"registry": map[string]any{"url": "127.0.0.1:5002", "region": "local"}, "cluster": applied["cluster"], "count": 3}, []string{"registry"}},
		{"gone", map[string]any{"registry": applied["registry"]}, []string{"cluster", "count"}},
	} {
		if got := changedOutputs(applied, tc.now); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
