package terraform

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/tfstate"
	"nuon.dev/nuon/schemas"
)

func TestKubernetesBackendConfig(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, tt := range []struct {
		name string
		b    KubernetesBackend
		env  map[string]string
		want map[string]any
	}{
		{"in cluster", KubernetesBackend{Namespace: "nuon-system", SecretSuffix: "s"}, nil,
			map[string]any{"namespace": "nuon-system", "secret_suffix": "s", "in_cluster_config": true}},
		{"KUBECONFIG", KubernetesBackend{Namespace: "n", SecretSuffix: "s"}, map[string]string{"KUBECONFIG": "/k/a:/k/b"},
			map[string]any{"namespace": "n", "secret_suffix": "s", "config_path": "/k/a"}},
		{"explicit kubeconfig", KubernetesBackend{Namespace: "n", SecretSuffix: "s", Kubeconfig: "/k/${x}"}, map[string]string{"KUBECONFIG": "/k/a"},
			map[string]any{"namespace": "n", "secret_suffix": "s", "config_path": "/k/$${x}"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, tt.b.config(env(tt.env))); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
	if b := backendFromEnv(env(map[string]string{tfstate.EnvStateNamespace: "n"})); b != nil {
		t.Errorf("backendFromEnv without a suffix = %+v, want nil", b)
	}
	b := backendFromEnv(env(map[string]string{tfstate.EnvStateNamespace: "n", tfstate.EnvStateSecretSuffix: "s"}))
	if b == nil || b.Namespace != "n" || b.SecretSuffix != "s" {
		t.Errorf("backendFromEnv = %+v", b)
	}
}

func TestS3BackendConfig(t *testing.T) {
	b := S3Backend{S3State: schemas.S3State{Bucket: "nuon-acme-state", Key: "sandbox/${x}.tfstate", Region: "eu-west-1"}}
	base := map[string]any{"bucket": "nuon-acme-state", "key": "sandbox/$${x}.tfstate", "region": "eu-west-1", "use_lockfile": true, "encrypt": true}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want map[string]any
	}{
		{"AWS", nil, base},
		{"credentials are not named", map[string]string{"AWS_ACCESS_KEY_ID": "ASIAX", "AWS_SECRET_ACCESS_KEY": "s"}, base},
		{"S3 endpoint", map[string]string{EnvS3Endpoint: "http://127.0.0.1:9000"},
			with(map[string]any{"use_path_style": true, "endpoints": map[string]any{"s3": "http://127.0.0.1:9000"}})},
		{"STS endpoint only", map[string]string{EnvSTSEndpoint: "https://sts.vpce.example"},
			with(map[string]any{"endpoints": map[string]any{"sts": "https://sts.vpce.example"}})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, b.config(lookupIn(tt.env))); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}
