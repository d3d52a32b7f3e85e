package manifests_test

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/manifests"
	"nuon.dev/nuon/reconciler"
	plugin "nuon.dev/nuon/reconciler/manifests"
)

// TestServerManifests applies the tenant server's manifests to a real API
// server: every object is accepted and a re-apply changes nothing; each
// Deployment's pod passes the namespace's restricted policy; the probes
// use the health endpoints; the writer is one and never rolls two at once;
// the server's service account may do nothing in the API.
func TestServerManifests(t *testing.T) {
	srv := kubetest.Shared(t)
	dir := t.TempDir()
	sub, err := fs.Sub(manifests.Server, "server")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatal(err)
	}
	p := &plugin.Plugin{Config: srv.Config()}
	var log strings.Builder
	env := reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}, Log: &log}
	res, err := p.Apply(t.Context(), job("nuon-server", dir, nil), env)
	if err != nil {
		t.Fatalf("apply the server's manifests: %v\n%s", err, log.String())
	}
	if n := len(res.Outputs["inventory"].([]any)); n != 8 {
		t.Errorf("applied %d objects, want 8: %v", n, res.Outputs["inventory"])
	}
	log.Reset()
	if res, err := p.Apply(t.Context(), job("nuon-server", dir, nil), env); err != nil || res.Changed {
		t.Errorf("re-apply: changed %v, %v\n%s", res != nil && res.Changed, err, log.String())
	}

	cs := srv.Clientset(t)
	writer, err := cs.AppsV1().Deployments("nuon-server").Get(t.Context(), "nuon-server-writer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *writer.Spec.Replicas != 1 || writer.Spec.Strategy.Type != "Recreate" {
		t.Errorf("writer: %d replicas, strategy %s; want one, Recreate", *writer.Spec.Replicas, writer.Spec.Strategy.Type)
	}
	replicas, err := cs.AppsV1().Deployments("nuon-server").Get(t.Context(), "nuon-server-replica", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *replicas.Spec.Replicas < 2 {
		t.Errorf("%d read replicas, want several", *replicas.Spec.Replicas)
	}
	for _, d := range []struct {
		name string
		spec corev1.PodTemplateSpec
		args []string
	}{
		{"writer", writer.Spec.Template, []string{"--replica-token-file=/etc/nuon/tokens/replica-token", "--render-key=/etc/nuon/render/render.key",
			"--upstream=$(NUON_UPSTREAM)", "--git-token-file=/etc/nuon/upstream/token"}},
		{"replica", replicas.Spec.Template, []string{"--mode=replica", "--writer=http://nuon-server-writer.nuon-server.svc:8080"}},
	} {
		c := d.spec.Spec.Containers[0]
		for _, a := range d.args {
			if !slices.Contains(c.Args, a) {
				t.Errorf("%s: no %s in %v", d.name, a, c.Args)
			}
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: probes %+v %+v", d.name, c.LivenessProbe, c.ReadinessProbe)
		}
		// Admit a pod of the template, as the ReplicaSet controller would.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nuon-server-" + d.name + "-abcde", Namespace: "nuon-server", Labels: d.spec.Labels},
			Spec: *d.spec.Spec.DeepCopy()}
		if _, err := cs.CoreV1().Pods("nuon-server").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Errorf("%s's pod is refused (restricted policy?): %v", d.name, err)
		}
	}

	// The upstream's credentials: a file from a Secret, read-only and for
	// its owner alone; nothing secret in the URL or the environment.
	ws := writer.Spec.Template.Spec
	var upstreamVol *corev1.Volume
	for i, v := range ws.Volumes {
		if v.Name == "upstream" {
			upstreamVol = &ws.Volumes[i]
		}
	}
	if upstreamVol == nil || upstreamVol.Secret == nil || upstreamVol.Secret.SecretName != "nuon-server-upstream" ||
		upstreamVol.Secret.DefaultMode == nil || *upstreamVol.Secret.DefaultMode != 0o400 {
		t.Errorf("writer: upstream credentials volume %+v, want Secret nuon-server-upstream with mode 0400", upstreamVol)
	}
	mounted := false
	for _, m := range ws.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "upstream" && m.MountPath == "/etc/nuon/upstream" && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("writer: upstream credentials not mounted read-only at /etc/nuon/upstream: %+v", ws.Containers[0].VolumeMounts)
	}
	for _, e := range ws.Containers[0].Env {
		if strings.Contains(e.Value, "@") || e.ValueFrom != nil {
			t.Errorf("writer: env %s = %q: credentials belong in the upstream Secret's files", e.Name, e.Value)
		}
	}

	// The server's service account: no access to anything.
	const sa = "system:serviceaccount:nuon-server:nuon-server"
	for _, a := range []authorizationv1.ResourceAttributes{
		{Namespace: "nuon-server", Verb: "get", Resource: "secrets"},
		{Namespace: "nuon-server", Verb: "list", Resource: "pods"},
		{Namespace: "nuon-system", Verb: "get", Resource: "secrets"},
		{Verb: "list", Resource: "namespaces"},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:authenticated"}, ResourceAttributes: &a,
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed {
			t.Errorf("nuon-server may %s %s in %q", a.Verb, a.Resource, a.Namespace)
		}
	}
}
