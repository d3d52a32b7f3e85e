package jobs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	sigstoresig "github.com/sigstore/sigstore/pkg/signature"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/schemas"
)

const zonefileDir = "../../fixtures/plugins/zonefile"

// pluginRegistry is a registry holding the zonefile plugin and variants
// of it, signed by the vendor's key or another.
type pluginRegistry struct {
	c       *oci.Client
	repo    name.Repository
	pub     []byte // the vendor's public key, PEM
	verify  sigstoresig.Verifier
	vendor  sigstoresig.SignerVerifier
	another sigstoresig.SignerVerifier
}

func newPluginRegistry(t testing.TB) *pluginRegistry {
	t.Helper()
	return newPluginRegistryAt(t, ocitest.InProcess(t))
}

// newPluginRegistryAt is newPluginRegistry on the registry at host.
func newPluginRegistryAt(t testing.TB, host string) *pluginRegistry {
	t.Helper()
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(host + "/nuon-acme/acme/plugins/zonefile")
	if err != nil {
		t.Fatal(err)
	}
	r := &pluginRegistry{c: c, repo: repo}
	r.vendor, r.pub = cosignKeyPair(t)
	r.another, _ = cosignKeyPair(t)
	if r.verify, err = oci.ParsePublicKey(r.pub); err != nil {
		t.Fatal(err)
	}
	return r
}

func cosignKeyPair(t testing.TB) (sigstoresig.SignerVerifier, []byte) {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte("pw"), nil })
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(file, kb.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	sv, err := builder.LoadKey(file, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	return sv, kb.PublicBytes
}

// push releases the zonefile plugin, its manifest edited by edit, signed
// with key.
func (r *pluginRegistry) push(t testing.TB, key sigstoresig.SignerVerifier, edit func(string) string) name.Digest {
	t.Helper()
	return r.pushDir(t, key, editedPlugin(t, zonefileDir, edit))
}

// pushDir releases the plugin directory dir, signed with key.
func (r *pluginRegistry) pushDir(t testing.TB, key sigstoresig.SignerVerifier, dir string) name.Digest {
	t.Helper()
	img, _, err := plugin.Package(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := r.repo.Digest(d.String())
	p, err := r.c.NewPusher(t.Context(), r.repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(t.Context(), ref, img); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Sign(t.Context(), r.c, ref, key); err != nil {
		t.Fatal(err)
	}
	return ref
}

// admission is Kube.AdmitPlugin as the agent wires it: plugin.Admit with
// the install registry and the vendor's key.
func (r *pluginRegistry) admission() PluginAdmission {
	return func(ctx context.Context, job *schemas.Job) (*plugin.Artifact, schemas.PluginCapabilities, error) {
		return plugin.Admit(ctx, r.c, job, r.verify)
	}
}

// pluginJob is a job of component dns, of the zonefile plugin the
// artifact ref holds.
func pluginJob(id string, ref name.Digest, grants schemas.PluginCapabilities) *schemas.Job {
	return &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: id, Install: "acme", Component: "dns",
		Operation: schemas.OpUpdate, Plugin: "zonefile", Version: "0.3.0", Generation: 1, Commit: strings.Repeat("a", 40),
		Artifacts: []schemas.Artifact{{Name: schemas.PluginArtifactName, Local: ref.String(), Digest: ref.DigestStr()}},
		Inputs:    map[string]any{"zone": id + ".internal", "records": []any{map[string]any{"name": "api", "type": "A", "value": "10.0.0.1"}}},
		Grants:    &grants, Timeout: "2m", StateDir: "/var/lib/nuon/components/dns"}
}

// pluginNamespace runs the plugin jobs; installSecret is the value of the
// install's secret TOKEN (Kube.SecretName).
const (
	pluginNamespace = "nuon-system"
	installSecret   = "install-secret-value-0001"
)

// pluginCluster is the real API server and controller manager with
// manifests/ applied, the test kubelet, and a Kube runner acting as the
// agent's service account that admits plugins with reg.
type pluginCluster struct {
	srv   *kubetest.Server
	cs    kubernetes.Interface
	kl    *kubelet
	k     *Kube
	zones string
	log   *strings.Builder
	// work is the agent's workdir as the jobs see it, through a claim
	// (stagingVolume): the plugin jobs' directories, where their staged
	// directories are made, are in it (jobDir).
	work string
}

// jobDir is the directory of job id in the agent's workdir.
func (pc *pluginCluster) jobDir(id string) string { return filepath.Join(pc.work, "jobs", id) }

func newPluginCluster(t testing.TB, reg *pluginRegistry) *pluginCluster {
	t.Helper()
	srv, cs := newPluginServer(t)
	zones := t.TempDir()
	kl := startKubelet(t, srv, pluginNamespace, nil)
	k, log := pluginKube(t, srv, reg)
	k.Env = []corev1.EnvVar{{Name: "NUON_ZONE_DIR", Value: zones}}
	pc := &pluginCluster{srv: srv, cs: cs, kl: kl, k: k, zones: zones, log: log, work: t.TempDir()}
	k.Volumes, k.VolumeMounts = stagingVolume(t, cs, pluginNamespace, pc.work)
	// The registry's pull settings, as --job-registry-secret gives them
	// to the jobs that fetch: no pod of a vendor's plugin may get them.
	k.RegistryVolumes = []corev1.Volume{{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "registry-pull"}}}}
	k.RegistryMounts = []corev1.VolumeMount{{Name: "registry", MountPath: "/nuon/registry", ReadOnly: true}}
	k.RegistryEnv = []corev1.EnvVar{{Name: "NUON_REGISTRY_PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "registry-pull"}, Key: "password"}}}}
	k.Command = []string{"nuon", "job", "run", "--registry-ca", "/nuon/registry/ca.crt", "--pod"}
	k.PluginCommand = []string{"nuon", "job", "run", "--pod"}
	return pc
}

// newPluginServer is the real API server and controller manager with
// manifests/ applied and the install's secrets in nuon-secrets.
func newPluginServer(t testing.TB) (*kubetest.Server, kubernetes.Interface) {
	t.Helper()
	srv := kubetest.New(t, kubetest.WithControllerManager())
	kubectl := kubetest.Kubectl(t)
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	for _, f := range []string{"00-namespaces.yaml", "10-agent-rbac.yaml", "20-jobs-rbac.yaml"} {
		out, err := exec.Command(kubectl, "--kubeconfig", srv.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(root, "manifests", f)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	const ns = pluginNamespace
	cs := srv.Clientset(t)
	if ns, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("namespace %s: %v, labels %v; want it restricted", ns, err, ns.Labels)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "nuon-secrets"},
		Data: map[string][]byte{"TOKEN": []byte(installSecret)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv, cs
}

// pluginKube is a Kube runner of nuon-system acting as the agent's service
// account, admitting plugins with reg.
func pluginKube(t testing.TB, srv *kubetest.Server, reg *pluginRegistry) (*Kube, *strings.Builder) {
	t.Helper()
	agentCfg := srv.Config()
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nuon-system:nuon-agent",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nuon-system", "system:authenticated"}}
	client, err := NewKubeClient(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	k := &Kube{Client: client, Namespace: pluginNamespace, Image: "registry.example/nuon:test", PollInterval: 100 * time.Millisecond,
		SecretName: "nuon-secrets", AdmitPlugin: reg.admission(), PluginArtifacts: &oci.Source{Client: reg.c},
		Logger: slog.New(slog.NewTextHandler(&log, nil))}
	return k, &log
}

// TestKubePlugin runs jobs of a vendor's plugin (the zonefile plugin, a
// Perl script, from a registry, signed) as the Kubernetes runner does, for
// real: the real kube-apiserver and controller manager (Job controller,
// garbage collector), manifests/ applied (nuon-system enforces the
// restricted Pod Security Standard), the runner acting as the agent's
// service account, and the test kubelet running the pods' commands. It
// checks what an attacker in the plugin would try: the pod is admitted
// under restricted and a privileged copy of it is not; the job's
// NetworkPolicy selects its pod and no other, lets nothing in, and lets
// nothing out, not even DNS, unless the plugin is granted the network;
// without secrets or cloudRole the pod has neither the install's secrets
// nor the cloud credentials, and no Secret is made; it has no service
// account token, no registry credential and of the agent's volume only
// the staged directory, read-only; the plugin it runs is the one the
// agent staged, and a staged content swapped behind the agent is refused
// before it runs; the NetworkPolicy goes with the Job; and a plugin that
// needs more than its grants, or is signed by another key, fails the job
// before any object of it exists.
func TestKubePlugin(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl")
	}
	reg := newPluginRegistry(t)
	zonefile := reg.push(t, reg.vendor, func(s string) string { return s })
	needsAll := reg.push(t, reg.vendor, func(s string) string {
		s = strings.Replace(s, `"version": "0.3.0"`, `"version": "0.3.1"`, 1)
		return strings.Replace(s, `"capabilities": {`, `"capabilities": {"network": true, "secrets": true, "cloudRole": true, `, 1)
	})
	otherKey := reg.push(t, reg.another, func(s string) string {
		return strings.Replace(s, `"version": "0.3.0"`, `"version": "0.3.2"`, 1)
	})

	pc := newPluginCluster(t, reg)
	srv, cs, kl, k, zones := pc.srv, pc.cs, pc.kl, pc.k, pc.zones
	const ns = pluginNamespace
	runnerLog := pc.log
	cloud := []string{"AWS_ACCESS_KEY_ID=ASIAPLUGINTEST0001", "AWS_SECRET_ACCESS_KEY=cloud-secret-value-0001"}

	// run runs job with the cloud credentials and checks its zone file.
	run := func(t *testing.T, job *schemas.Job) time.Duration {
		t.Helper()
		start := time.Now()
		res, err := k.RunEnv(t.Context(), job, pc.jobDir(job.ID), cloud)
		if err != nil {
			t.Fatalf("RunEnv: %v\n%s\n%s", err, kl.log(KubeName(job.ID)), runnerLog.String())
		}
		took := time.Since(start)
		checkUnstaged(t, pc.jobDir(job.ID))
		if !res.Changed {
			t.Errorf("not changed: %+v", res)
		}
		z, err := os.ReadFile(filepath.Join(zones, job.ID+".internal.zone"))
		if err != nil || !strings.Contains(string(z), "api\t300\tIN\tA\t10.0.0.1") {
			t.Errorf("zone file: %v\n%s", err, z)
		}
		return took
	}

	restricted := pluginJob("dns-g1-update-restricted", zonefile, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
	took := run(t, restricted)
	all := schemas.PluginCapabilities{Network: true, Secrets: true, CloudRole: true, Env: []string{"NUON_ZONE_DIR"}}
	granted := pluginJob("dns-g1-update-granted", needsAll, all)
	run(t, granted)
	t.Logf("a plugin job through the kubernetes runner and the test kubelet: %s from RunEnv to its result", took.Round(time.Millisecond))
	if started, _ := kl.startedAt(KubeName(restricted.ID)); started.IsZero() {
		t.Error("the test kubelet never started the plugin job's pod")
	}

	t.Run("restricted pod security admits the pod, and only it", func(t *testing.T) {
		pod := jobPod(t, cs, ns, restricted.ID)
		// The pod exists: the Job controller created it in a restricted
		// namespace. The same pod made to escape is refused there.
		for what, tamper := range map[string]func(*corev1.PodSpec){
			"in the node's network": func(s *corev1.PodSpec) { s.HostNetwork = true },
			"as root":               func(s *corev1.PodSpec) { s.SecurityContext.RunAsNonRoot = ptr.To(false) },
			"with NET_RAW": func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
			},
			"with privilege escalation": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
			"without seccomp":           func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile = nil },
		} {
			tampered := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tampered", Namespace: ns}, Spec: *pod.Spec.DeepCopy()}
			tampered.Spec.NodeName = ""
			tamper(&tampered.Spec)
			_, err := cs.CoreV1().Pods(ns).Create(t.Context(), tampered, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
				t.Errorf("the plugin job's pod %s was not refused by the namespace's pod security: %v", what, err)
			}
		}
		sc := pod.Spec.Containers[0].SecurityContext
		if !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(pod.Spec.SecurityContext.RunAsNonRoot, false) {
			t.Errorf("the pod's security context: %+v, %+v", sc, pod.Spec.SecurityContext)
		}
	})

	t.Run("network policy", func(t *testing.T) {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		registry := netip.MustParseAddrPort(reg.repo.RegistryStr())
		apiURL, err := url.Parse(srv.Config().Host)
		if err != nil {
			t.Fatal(err)
		}
		apiServer := netip.MustParseAddrPort(apiURL.Host)
		for _, tt := range []struct {
			job     *schemas.Job
			network bool
		}{{restricted, false}, {granted, true}} {
			np := jobNetworkPolicy(t, cs, ns, tt.job.ID)
			kj, err := cs.BatchV1().Jobs(ns).Get(t.Context(), KubeName(tt.job.ID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != kj.UID {
				t.Errorf("%s: NetworkPolicy owners %+v, want the Job %s", tt.job.ID, np.OwnerReferences, kj.UID)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || sel.Empty() {
				t.Fatalf("%s: selector %v: %v", tt.job.ID, sel, err)
			}
			var selected []string
			for _, p := range pods.Items {
				if sel.Matches(labels.Set(p.Labels)) {
					selected = append(selected, p.Name)
				}
			}
			if own := jobPod(t, cs, ns, tt.job.ID); len(selected) != 1 || selected[0] != own.Name {
				t.Errorf("%s: the NetworkPolicy selects %v of %d pods, want only %s", tt.job.ID, selected, len(pods.Items), own.Name)
			}
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || len(np.Spec.Ingress) != 0 {
				t.Errorf("%s: ingress is not denied: %v %+v", tt.job.ID, np.Spec.PolicyTypes, np.Spec.Ingress)
			}
			if !tt.network {
				// Not even DNS: the pod pulls nothing.
				checkDeniesAll(t, np)
			}
			for _, c := range []struct {
				what string
				addr netip.Addr
				port int32
				want bool
			}{
				{"the install registry", registry.Addr(), int32(registry.Port()), tt.network},
				{"the install registry on another port", registry.Addr(), 22, tt.network},
				{"an address outside", netip.MustParseAddr("203.0.113.7"), 443, tt.network},
				{"a resolver outside", netip.MustParseAddr("8.8.8.8"), 53, tt.network},
				{"the cloud's metadata service", netip.MustParseAddr("169.254.169.254"), 80, tt.network},
				{"the API server", apiServer.Addr(), int32(apiServer.Port()), tt.network},
			} {
				if got := egressAllowed(np, c.addr, c.port); got != c.want {
					t.Errorf("%s (network granted: %v): egress to %s (%s:%d) allowed %v, want %v", tt.job.ID, tt.network, c.what, c.addr, c.port, got, c.want)
				}
			}
		}
	})

	t.Run("no secrets, no cloud credentials, no token, no registry, no shared state unless granted", func(t *testing.T) {
		pod := jobPod(t, cs, ns, restricted.ID)
		if ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) || ptr.Deref(pod.Spec.EnableServiceLinks, true) {
			t.Error("the plugin job's pod mounts its service account's token, or has the Services' addresses")
		}
		// The staged directory alone, read-only, by subPath: the only
		// claim, the only mount of the agent's volume.
		rel, _ := filepath.Rel(pc.work, StagedDir(pc.jobDir(restricted.ID)))
		c := pod.Spec.Containers[0]
		for _, v := range pod.Spec.Volumes {
			if v.Secret != nil || v.Projected != nil || (v.PersistentVolumeClaim != nil && v.Name != "nuon-work") {
				t.Errorf("the plugin job's pod has volume %s: %+v", v.Name, v.VolumeSource)
			}
		}
		for _, m := range c.VolumeMounts {
			if m.Name == "nuon-work" && (m.MountPath != PodPluginIn || m.SubPath != rel || !m.ReadOnly) {
				t.Errorf("the plugin job's pod mounts the agent's volume as %+v; want %s alone, read-only, at %s", m, rel, PodPluginIn)
			}
			if m.Name == "registry" {
				t.Errorf("the plugin job's pod mounts the registry's Secret at %s", m.MountPath)
			}
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == PodPluginIn }) {
			t.Errorf("the pod does not mount the staged directory: %+v", c.VolumeMounts)
		}
		if len(c.EnvFrom) != 0 {
			t.Errorf("the plugin job's pod takes its environment from %+v", c.EnvFrom)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil || strings.HasPrefix(e.Name, "NUON_REGISTRY") {
				t.Errorf("the plugin job's pod has %s (%+v)", e.Name, e.ValueFrom)
			}
		}
		sel := LabelJob + "=" + idHash(restricted.ID)
		if secrets, err := cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel}); err != nil || len(secrets.Items) != 0 {
			t.Errorf("the plugin job not granted cloudRole has Secrets: %v %v", err, secrets)
		}
		want := []string{"nuon", "job", "run", "--pod", "--plugin-staged", PodPluginIn, "--plugin-shared-network", podManifestFile}
		if !slices.Equal(c.Command, want) {
			t.Errorf("the pod's command %v, want %v (no registry flag, no key)", c.Command, want)
		}
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), KubeName(restricted.ID), metav1.GetOptions{})
		if err != nil || len(cm.Data) != 1 {
			t.Errorf("the job's ConfigMap: %v %v; want the manifest alone", err, cm.Data)
		}

		// Granted: the install's secrets, and the cloud credentials in
		// the job's own Secret.
		pod = jobPod(t, cs, ns, granted.ID)
		var envFrom []string
		for _, e := range pod.Spec.Containers[0].EnvFrom {
			envFrom = append(envFrom, e.SecretRef.Name)
		}
		secrets, err := cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(granted.ID)})
		if err != nil || len(secrets.Items) != 1 || string(secrets.Items[0].Data["AWS_SECRET_ACCESS_KEY"]) != "cloud-secret-value-0001" {
			t.Fatalf("the granted job's Secret: %v %+v", err, secrets)
		}
		if want := []string{"nuon-secrets", secrets.Items[0].Name}; !slices.Equal(envFrom, want) {
			t.Errorf("the granted job's environment from %v, want %v", envFrom, want)
		}
	})

	t.Run("refused before any object exists", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			job  *schemas.Job
			is   error
			want string
		}{
			{"needs more than granted", pluginJob("dns-g1-update-exceeds", needsAll, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}),
				plugin.ErrNotGranted, "needs network, secrets and cloudRole"},
			{"signed by another key", pluginJob("dns-g1-update-otherkey", otherKey, all), oci.ErrBadSignature, ""},
			{"pinned by another digest", func() *schemas.Job {
				j := pluginJob("dns-g1-update-digest", zonefile, all)
				j.Artifacts[0].Digest = needsAll.DigestStr()
				return j
			}(), plugin.ErrNotPinned, "is not pinned by its digest"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, err := k.RunEnv(t.Context(), tt.job, pc.jobDir(tt.job.ID), cloud)
				if err == nil || !errors.Is(err, ErrJobFailed) || !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("RunEnv = %v; want %v and %v saying %q", err, ErrJobFailed, tt.is, tt.want)
				}
				sel := metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(tt.job.ID)}
				jobs, _ := cs.BatchV1().Jobs(ns).List(t.Context(), sel)
				cms, _ := cs.CoreV1().ConfigMaps(ns).List(t.Context(), sel)
				nps, _ := cs.NetworkingV1().NetworkPolicies(ns).List(t.Context(), sel)
				secrets, _ := cs.CoreV1().Secrets(ns).List(t.Context(), sel)
				pods, _ := cs.CoreV1().Pods(ns).List(t.Context(), sel)
				if n := len(jobs.Items) + len(cms.Items) + len(nps.Items) + len(secrets.Items) + len(pods.Items); n != 0 {
					t.Errorf("a refused plugin job left %d objects", n)
				}
			})
		}
	})

	t.Run("a staged plugin swapped is refused before it runs", func(t *testing.T) {
		// Another release of zonefile by the same vendor, whose
		// executable only leaves a mark, swapped in for the staged one.
		job, swap := swappedPlugin(t, reg, "dns-g1-update-swapped", zonefile, "#!/bin/sh\ntouch \"$NUON_ZONE_DIR/evil-ran\"\n")
		swapped := *k
		swapped.PluginArtifacts = swap
		_, err := swapped.RunEnv(t.Context(), job, pc.jobDir(job.ID), nil)
		if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), plugin.ErrStagedDigest.Error()) {
			t.Fatalf("RunEnv = %v; want %v: %v\n%s", err, ErrJobFailed, plugin.ErrStagedDigest, kl.log(KubeName(job.ID)))
		}
		if _, err := os.Stat(filepath.Join(zones, "evil-ran")); err == nil {
			t.Error("the swapped executable ran")
		}
		if jobObjects(t, pc, job.ID) == 0 {
			t.Error("no object of the job: the pod never saw the swap, and the test proves nothing")
		}
		checkUnstaged(t, pc.jobDir(job.ID))
	})

	t.Run("a staging that fails leaves nothing", func(t *testing.T) {
		missing := pluginJob("dns-g1-update-missing", zonefile, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		missing.Artifacts = append(missing.Artifacts, schemas.Artifact{Name: "records", Local: reg.repo.Digest("sha256:" + strings.Repeat("0", 64)).String(),
			Digest: "sha256:" + strings.Repeat("0", 64), MediaType: "application/vnd.oci.image.manifest.v1+json"})
		if _, err := k.RunEnv(t.Context(), missing, pc.jobDir(missing.ID), nil); !errors.Is(err, ErrJobFailed) {
			t.Errorf("RunEnv = %v; want it failed", err)
		}
		if n := jobObjects(t, pc, missing.ID); n != 0 {
			t.Errorf("a job whose staging failed left %d objects", n)
		}
		checkUnstaged(t, pc.jobDir(missing.ID))
	})

	t.Run("objects per job", func(t *testing.T) {
		for _, job := range []*schemas.Job{restricted, granted} {
			sel := metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(job.ID)}
			jobs, _ := cs.BatchV1().Jobs(ns).List(t.Context(), sel)
			cms, _ := cs.CoreV1().ConfigMaps(ns).List(t.Context(), sel)
			nps, _ := cs.NetworkingV1().NetworkPolicies(ns).List(t.Context(), sel)
			secrets, _ := cs.CoreV1().Secrets(ns).List(t.Context(), sel)
			pods, _ := cs.CoreV1().Pods(ns).List(t.Context(), sel)
			t.Logf("%s: %d Job, %d ConfigMap, %d NetworkPolicy, %d Secret, %d Pod", job.ID,
				len(jobs.Items), len(cms.Items), len(nps.Items), len(secrets.Items), len(pods.Items))
			if len(jobs.Items) != 1 || len(cms.Items) != 1 || len(nps.Items) != 1 || len(pods.Items) != 1 {
				t.Errorf("%s: objects %d %d %d %d", job.ID, len(jobs.Items), len(cms.Items), len(nps.Items), len(pods.Items))
			}
		}
	})

	t.Run("the NetworkPolicy goes with its Job", func(t *testing.T) {
		np := jobNetworkPolicy(t, cs, ns, restricted.ID)
		bg := metav1.DeletePropagationBackground
		if err := cs.BatchV1().Jobs(ns).Delete(t.Context(), KubeName(restricted.ID), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		awaitGone(t, cs, ns, np.Name)
		jobNetworkPolicy(t, cs, ns, granted.ID) // another job's stays
	})

	t.Run("a rerun gets a NetworkPolicy of its own", func(t *testing.T) {
		old := jobNetworkPolicy(t, cs, ns, granted.ID)
		if res, err := k.RunEnv(t.Context(), granted, pc.jobDir(granted.ID), cloud); err != nil || res.Changed {
			t.Fatalf("rerun = %+v, %v; want nothing changed", res, err)
		}
		kj, err := cs.BatchV1().Jobs(ns).Get(t.Context(), KubeName(granted.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		awaitGone(t, cs, ns, old.Name)
		if np := jobNetworkPolicy(t, cs, ns, granted.ID); np.OwnerReferences[0].UID != kj.UID || np.Name == old.Name {
			t.Errorf("the rerun's NetworkPolicy %s is owned by %s, want a new one owned by the Job %s", np.Name, np.OwnerReferences[0].UID, kj.UID)
		}
	})

	t.Run("collected when its container succeeded, rerun at once", func(t *testing.T) {
		// The runner reads the result once the pod's job container
		// ended with exit 0, maybe before the Job controller marks the
		// Job complete; a rerun straight after deletes that Job as a
		// finished one, where it would otherwise refuse it as active;
		// and the Job the runner returned from completes all the same.
		job := pluginJob("dns-g1-update-at-once", zonefile, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		var uids []string
		for i := range 3 {
			res, err := k.RunEnv(t.Context(), job, pc.jobDir(job.ID), nil)
			if err != nil || res.Outputs["records"] != float64(1) {
				t.Fatalf("run %d: %+v, %v\n%s", i, res, err, kl.log(KubeName(job.ID)))
			}
			kj, err := cs.BatchV1().Jobs(ns).Get(t.Context(), KubeName(job.ID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, done := finished(kj)
			t.Logf("run %d collected; its Job complete then: %v", i, done)
			uids = append(uids, string(kj.UID))
		}
		if uids[0] == uids[1] || uids[1] == uids[2] {
			t.Errorf("the reruns' Jobs %v: a rerun returned an earlier run's Job", uids)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			kj, err := cs.BatchV1().Jobs(ns).Get(t.Context(), KubeName(job.ID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ok, done := finished(kj); done {
				if !ok || kj.Spec.TTLSecondsAfterFinished == nil {
					t.Errorf("the Job ended %+v, ttl %v", kj.Status.Conditions, kj.Spec.TTLSecondsAfterFinished)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Job never completed: %+v", kj.Status)
			}
		}
		// A failure still waits for the Job's own conditions.
		fails := pluginJob("dns-g1-update-at-once-fails", zonefile, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		fails.Inputs = map[string]any{"zone": "not a zone!", "records": "none"}
		if _, err := k.RunEnv(t.Context(), fails, pc.jobDir(fails.ID), nil); !errors.Is(err, ErrJobFailed) {
			t.Fatalf("RunEnv = %v; want it failed", err)
		}
		kj, err := cs.BatchV1().Jobs(ns).Get(t.Context(), KubeName(fails.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, done := finished(kj); !done {
			t.Errorf("a failed job collected before its Job ended: %+v", kj.Status)
		}
	})

	for _, s := range []string{installSecret, "cloud-secret-value-0001"} {
		if strings.Contains(runnerLog.String(), s) {
			t.Errorf("the runner's log holds a secret")
		}
	}
}

// jobNetworkPolicy is the one NetworkPolicy of the job id.
func jobNetworkPolicy(t *testing.T, cs kubernetes.Interface, ns, id string) *networkingv1.NetworkPolicy {
	t.Helper()
	l, err := cs.NetworkingV1().NetworkPolicies(ns).List(t.Context(), metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(id)})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("NetworkPolicies of %s: %v, %d", id, err, len(l.Items))
	}
	return &l.Items[0]
}

// awaitGone waits until the garbage collector deleted the NetworkPolicy
// name.
func awaitGone(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, err := cs.NetworkingV1().NetworkPolicies(ns).Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("NetworkPolicy %s outlived its Job: %v", name, err)
		}
	}
}

// jobPod is the one pod of the job id.
func jobPod(t *testing.T, cs kubernetes.Interface, ns, id string) *corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: labelJobName + "=" + KubeName(id)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %v, %d", id, err, len(pods.Items))
	}
	return &pods.Items[0]
}

// egressAllowed tells whether np lets its pods send TCP to addr:port, as
// a CNI that enforces NetworkPolicies decides it for a destination
// outside the cluster's pods (a peer that selects pods or namespaces does
// not match it).
func egressAllowed(np *networkingv1.NetworkPolicy, addr netip.Addr, port int32) bool {
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		return true
	}
	for _, r := range np.Spec.Egress {
		portOK := len(r.Ports) == 0
		for _, p := range r.Ports {
			if ptr.Deref(p.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP && (p.Port == nil || p.Port.IntVal == port) {
				portOK = true
			}
		}
		peerOK := len(r.To) == 0
		for _, peer := range r.To {
			if peer.IPBlock == nil {
				continue
			}
			pre, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil || !pre.Contains(addr) {
				continue
			}
			excepted := slices.ContainsFunc(peer.IPBlock.Except, func(e string) bool {
				ep, err := netip.ParsePrefix(e)
				return err == nil && ep.Contains(addr)
			})
			if !excepted {
				peerOK = true
			}
		}
		if portOK && peerOK {
			return true
		}
	}
	return false
}

// BenchmarkKubePluginJob is a job of a vendor's plugin (the zonefile
// plugin, not granted the network, secrets or cloudRole) through the
// Kubernetes runner against the real API server and controller manager,
// its pod run by the test kubelet: admitted (signature and signed
// manifest from the registry), its objects created, its pod scheduled by
// the Job controller and run, its result read. It reports the time to the
// pod's process starting (pod-start-ms), from there to Run's return
// (pod-result-ms), and the objects the job left (objects/job).
func BenchmarkKubePluginJob(b *testing.B) {
	if _, err := exec.LookPath("perl"); err != nil {
		b.Skip("no perl")
	}
	reg := newPluginRegistry(b)
	ref := reg.push(b, reg.vendor, func(s string) string { return s })
	pc := newPluginCluster(b, reg)
	ctx := context.Background()
	var toPod, inPod, toResult time.Duration
	var objects int
	b.ResetTimer()
	for i := range b.N {
		job := pluginJob("dns-g1-update-bench-"+strconv.Itoa(i), ref, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		start := time.Now()
		if _, err := pc.k.RunEnv(ctx, job, pc.jobDir(job.ID), []string{"AWS_SECRET_ACCESS_KEY=withheld"}); err != nil {
			b.Fatalf("RunEnv: %v\n%s", err, pc.kl.log(KubeName(job.ID)))
		}
		end := time.Now()
		started, ended := pc.kl.startedAt(KubeName(job.ID))
		toPod += started.Sub(start)
		inPod += ended.Sub(started)
		toResult += end.Sub(ended)
		b.StopTimer()
		sel := metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(job.ID)}
		jobs, _ := pc.cs.BatchV1().Jobs(pluginNamespace).List(ctx, sel)
		cms, _ := pc.cs.CoreV1().ConfigMaps(pluginNamespace).List(ctx, sel)
		nps, _ := pc.cs.NetworkingV1().NetworkPolicies(pluginNamespace).List(ctx, sel)
		secrets, _ := pc.cs.CoreV1().Secrets(pluginNamespace).List(ctx, sel)
		pods, _ := pc.cs.CoreV1().Pods(pluginNamespace).List(ctx, sel)
		objects += len(jobs.Items) + len(cms.Items) + len(nps.Items) + len(secrets.Items) + len(pods.Items)
		b.StartTimer()
	}
	b.ReportMetric(float64(toPod.Milliseconds())/float64(b.N), "pod-start-ms")
	b.ReportMetric(float64(inPod.Milliseconds())/float64(b.N), "pod-run-ms")
	b.ReportMetric(float64(toResult.Milliseconds())/float64(b.N), "result-ms")
	b.ReportMetric(float64(objects)/float64(b.N), "objects/job")
}

// editedPlugin copies the plugin directory dir into a temporary one of the
// same name, its manifest edited by edit, and returns the copy.
func editedPlugin(t testing.TB, dir string, edit func(string) string) string {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), filepath.Base(dir))
	if err := os.CopyFS(tmp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(tmp, plugin.ManifestFile)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(edit(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// swapSource is an artifact source whose extraction of any artifact into
// dir writes an empty directory and then runs swap: the stand-in for one
// who changes the staged directory behind the agent.
type swapSource func(dir string) error

func (s swapSource) Extract(_ context.Context, _ schemas.Artifact, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return s(dir)
}

// stagedLayer is the hex digest of the content layer of the plugin
// artifact ref staged in the directory in.
func stagedLayer(t testing.TB, in string, ref name.Digest) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(in, plugin.StagedPluginBlobs, ref.DigestStr()[len("sha256:"):]))
	if err != nil {
		t.Fatal(err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m.Layers[0].Digest.Hex
}

// swappedPlugin is a job of the plugin art with one artifact more, and
// the artifact source that, once the plugin is staged, swaps its staged
// layer for that of another release by the same vendor whose
// executable is script: what one who can write the agent's volume would
// do behind the agent.
func swappedPlugin(t testing.TB, reg *pluginRegistry, id string, art name.Digest, script string) (*schemas.Job, swapSource) {
	t.Helper()
	grants := schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}
	evilDir := editedPlugin(t, zonefileDir, func(s string) string { return strings.Replace(s, `"version": "0.3.0"`, `"version": "0.3.9"`, 1) })
	if err := os.WriteFile(filepath.Join(evilDir, "zonefile"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	evilRef := reg.pushDir(t, reg.vendor, evilDir)
	evil, _, err := plugin.Admit(t.Context(), reg.c, pluginJob("evil", evilRef, grants), reg.verify)
	if err != nil {
		t.Fatal(err)
	}
	evilIn := t.TempDir()
	if err := evil.Stage(t.Context(), evilIn); err != nil {
		t.Fatal(err)
	}
	evilLayer, err := os.ReadFile(filepath.Join(evilIn, plugin.StagedPluginBlobs, stagedLayer(t, evilIn, evilRef)))
	if err != nil {
		t.Fatal(err)
	}
	job := pluginJob(id, art, grants)
	job.Artifacts = append(job.Artifacts, schemas.Artifact{Name: "records", Local: reg.repo.Digest("sha256:" + strings.Repeat("1", 64)).String(),
		Digest: "sha256:" + strings.Repeat("1", 64), MediaType: "application/vnd.oci.image.manifest.v1+json"})
	// The job's other artifact is extracted after the plugin is staged.
	return job, func(dir string) error {
		in := filepath.Dir(filepath.Dir(dir))
		return os.WriteFile(filepath.Join(in, plugin.StagedPluginBlobs, stagedLayer(t, in, art)), evilLayer, 0o644)
	}
}
