package manifests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// dirSource is an ArtifactSource whose artifacts are directories: it copies
// the one an artifact's Local reference names.
type dirSource struct{}

func (dirSource) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return os.CopyFS(dir, os.DirFS(a.Local))
}

// writeFiles writes files (name → content) into a new directory.
func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// newJob is a manifests job for component whose artifact is the directory
// dir.
func newJob(component, namespace, dir string, inputs map[string]any) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         component + "-g1-create-test",
		Install:    "acme",
		Component:  component,
		Operation:  schemas.OpCreate,
		Plugin:     schemas.TypeManifests,
		Version:    "1.0.0",
		Artifacts:  []schemas.Artifact{{Name: ManifestsArtifact, Local: dir, Digest: "sha256:test"}},
		Inputs:     inputs,
		Manifests:  &schemas.ManifestSettings{Namespace: namespace},
		Timeout:    "2m",
	}
}

// requests counts the requests a client sends, by method, dry-runs apart.
type requests struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		key := req.Method
		if req.URL.Query().Get("dryRun") != "" {
			key += " dry-run"
		}
		c.mu.Lock()
		c.counts[key]++
		c.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (c *requests) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.counts
	c.counts = map[string]int{}
	return got
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// testPlugin is a Plugin on the shared API server whose requests are
// counted.
func testPlugin(t testing.TB, srv *kubetest.Server) (*Plugin, *requests) {
	t.Helper()
	cfg := srv.Config()
	counts := &requests{counts: map[string]int{}}
	cfg.Wrap(counts.wrap)
	return &Plugin{Config: cfg, PollInterval: 200 * time.Millisecond, LookupEnv: func(string) (string, bool) { return "", false }}, counts
}

func testEnv(t testing.TB, stateDir string) (reconciler.Env, *strings.Builder) {
	log := &strings.Builder{}
	return reconciler.Env{StateDir: stateDir, Artifacts: dirSource{}, Log: &syncWriter{w: log}}, log
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// dyn is a dynamic client for the admin user.
func dyn(t testing.TB, cfg *rest.Config) *dynamic.DynamicClient {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	configMaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// get reads an object, or nil if it does not exist.
func get(t testing.TB, c *dynamic.DynamicClient, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := c.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return u
}

func schemaGVR(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}
