package jobs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/plugin/plugintest"
	"nuon.dev/nuon/schemas"
)

// nodeSpyPlugin answers an apply with what its container is, as runc made
// it: its user, whether it can write its root, its request or its /tmp,
// its environment's names, whether the registry's credential is anywhere
// it could read, and its kernel view of itself (seccomp, no_new_privs,
// capabilities, its root's mount options).
const nodeSpyPlugin = `#!/usr/bin/perl
use strict;
use warnings;
use JSON::PP;
local $/;
my $req = decode_json(<STDIN>);
my %status;
if (open(my $s, '<', '/proc/self/status')) {
	for (split /\n/, <$s>) { $status{$1} = $2 if /^(Seccomp|NoNewPrivs|CapEff|CapPrm|CapBnd):\s*(\S+)/ }
}
my $rootmount = '';
if (open(my $m, '<', '/proc/self/mountinfo')) {
	for (split /\n/, <$m>) { my @f = split / /; $rootmount = $f[5] if $f[4] eq '/' }
}
my $w = sub { my $ok = open(my $f, '>', $_[0]) ? 1 : 0; my $err = "$!"; unlink $_[0] if $ok; return $ok ? 'ok' : $err };
print encode_json({apiVersion => 'nuon.dev/v1', kind => 'PluginResponse', protocol => 1,
	operation => $req->{operation}, changed => JSON::PP::false,
	outputs => {uid => $< + 0, gid => $( + 0, root => $w->('/spy-was-here'), in => $w->('/nuon/plugin/in/spy-was-here'),
		tmp => $w->('/tmp/spy-was-here'), env => [sort keys %ENV], registry => (-e '/nuon/registry' ? 1 : 0),
		rootMount => $rootmount, %status}});
`

// TestKubePluginRealNode runs a vendor's plugin job in the image form
// through the Kubernetes runner on a real node (kubetest.NewNode: kubelet,
// containerd, runc, a CNI bridge), where every other test of the runner
// has the test kubelet play the node: nuon's job image (the static nuon
// and nuon-plugin-exec) and the zonefile plugin's image on a perl base are
// pulled by containerd from a registry on the node's bridge, the pod is
// admitted in nuon-system under the restricted Pod Security Standard and
// run by runc on the request the agent staged, and the zonefile job's
// result comes back through
// RunEnv. A spy plugin then reports from inside its container what runc
// enforced: uid 65532, its root mounted read-only, seccomp, no new
// privileges, no capability, and neither the registry's credential nor
// the variables it was not granted. Then the process form: the zonefile
// plugin released without an image runs as a process of nuon's image
// from what the agent staged, its pod denied all egress and given nothing
// of the registry, and a staged content swapped behind the agent is
// refused in the pod. The test binds each of the runner's pods to the
// node, as the scheduler a cluster has would.
func TestKubePluginRealNode(t *testing.T) {
	kubetest.RequireNode(t)
	srv, cs := newPluginServer(t)
	node := kubetest.NewNode(t, srv, kubetest.NodeOptions{})
	bindPods(t, cs, pluginNamespace, node.Name)

	// Pods reach the machine only on the node's bridge: the registry
	// listens on its gateway address, where containerd pulls from too
	// (over plain HTTP: a hosts.toml beside the ones NodeOptions writes,
	// which containerd reads at each pull).
	gw := strings.TrimSuffix(node.PodCIDR, "0/24") + "1"
	host := bridgeRegistry(t, node, gw)
	reg := newPluginRegistryAt(t, host)

	if _, err := cs.CoreV1().Secrets(pluginNamespace).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-pull"},
		Data: map[string][]byte{"password": []byte(nodeRegistryPassword)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k, agentLog := pluginKube(t, srv, reg)
	k.Image = pushJobImage(t, reg, host)
	k.Command = []string{"/bin/nuon", "job", "run", "--pod"}
	k.PollInterval = 200 * time.Millisecond
	k.Env = []corev1.EnvVar{{Name: "NUON_ZONE_DIR", Value: "/tmp"}, {Name: "NOT_GRANTED", Value: "not-granted-value"}}
	k.AdmitPluginImage = reg.imageAdmission()
	k.PluginArtifacts = &oci.Source{Client: reg.c}
	work := t.TempDir()
	k.Volumes, k.VolumeMounts = stagingVolume(t, cs, pluginNamespace, work)
	// The kubelet's pull secret (the bridge's registry serves anyone:
	// the secret must only not stop the pod), and the agent's registry
	// credential for the jobs that fetch: the image form's pod gets
	// neither into a container.
	if _, err := cs.CoreV1().Secrets(pluginNamespace).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "image-pull"},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths": {"` + host + `": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("puller:"+nodeRegistryPassword)) + `"}}}`)}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "image-pull"}}
	k.RegistryVolumes = []corev1.Volume{{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "registry-pull"}}}}
	k.RegistryMounts = []corev1.VolumeMount{{Name: "registry", MountPath: "/nuon/registry", ReadOnly: true}}
	k.RegistryEnv = []corev1.EnvVar{{Name: "NUON_REGISTRY_PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "registry-pull"}, Key: "password"}}}}

	base, err := plugintest.HostImageList("../../fixtures/plugins/zonefile-base.txt")
	if err != nil {
		t.Fatal(err)
	}
	same := func(s string) string { return s }
	run := func(t *testing.T, job *schemas.Job) *schemas.JobResult {
		t.Helper()
		seen := watchPod(t, cs, pluginNamespace, KubeName(job.ID))
		start := time.Now()
		dir := filepath.Join(work, "jobs", job.ID)
		res, err := k.RunEnv(t.Context(), job, dir, nil)
		if err != nil {
			t.Fatalf("RunEnv: %v\nagent: %s\nnode: %s", err, agentLog.String(), node.Dir())
		}
		end := time.Now()
		t.Logf("%s on the real node: %s; %s; as the pod's status says (to the second): %s", job.ID, end.Sub(start).Round(time.Millisecond),
			seen(start, end), podTimes(jobPod(t, cs, pluginNamespace, job.ID)))
		checkUnstaged(t, dir)
		return res
	}

	t.Run("zonefile", func(t *testing.T) {
		art, img := reg.release(t, zonefileDir, same, base, reg.vendor, reg.vendor)
		job := imageJob("dns-g1-update-node", "zonefile", art, img, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		res := run(t, job)
		if !res.Changed || res.Outputs["records"] != float64(1) || res.Outputs["zone_file"] != "/tmp/"+job.ID+".internal.zone" {
			t.Errorf("result %+v", res)
		}
		pod := succeededPod(t, cs, job.ID)
		if pod.Spec.NodeName != node.Name || pod.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s on %q, %s; want it run by node %s", pod.Name, pod.Spec.NodeName, pod.Status.Phase, node.Name)
		}
		// The containers ran on the node, each from its image by digest.
		want := map[string]string{executorContainer: k.Image, pluginContainer: img.String()}
		for _, st := range pod.Status.InitContainerStatuses {
			if w, ok := want[st.Name]; ok {
				if st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 || !strings.HasSuffix(st.ImageID, "@"+digestOf(w)) {
					t.Errorf("container %s: %+v, image %s; want it ended 0 from %s", st.Name, st.State, st.ImageID, w)
				}
				delete(want, st.Name)
			}
		}
		if len(want) != 0 {
			t.Errorf("no status of %v", want)
		}
		// Again, the images on the node already: one job's wall against
		// the test kubelet's (BenchmarkKubePluginImageJob).
		again := imageJob("dns-g2-update-node", "zonefile", art, img, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		again.Generation = 2
		if res := run(t, again); res.Outputs["zone_file"] != "/tmp/"+again.ID+".internal.zone" {
			t.Errorf("result %+v", res)
		}
	})

	t.Run("what runc enforced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spy")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "spy"), []byte(nodeSpyPlugin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, plugin.ManifestFile), []byte(`{"apiVersion": "nuon.dev/v1", "kind": "Plugin", "name": "spy",
  "version": "1.0.0", "protocols": [1], "operations": ["apply"], "capabilities": {}, "executables": {"linux/amd64": "spy"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		art, img := reg.release(t, dir, same, base, reg.vendor, reg.vendor)
		job := imageJob("spy-g1-update-node", "spy", art, img, schemas.PluginCapabilities{})
		res := run(t, job)
		o := res.Outputs
		t.Logf("the spy: %v", o)
		for key, want := range map[string]any{
			"uid": float64(PluginUser), "gid": float64(PluginUser),
			"root": "Read-only file system", "in": "Read-only file system", "tmp": "ok",
			"registry": float64(0), "Seccomp": "2", "NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		} {
			if o[key] != want {
				t.Errorf("%s = %v, want %v", key, o[key], want)
			}
		}
		if opts, _ := o["rootMount"].(string); !slices.Contains(strings.Split(opts, ","), "ro") {
			t.Errorf("the container's root is mounted %q, want ro", opts)
		}
		env, _ := o["env"].([]any)
		if !slices.Contains(env, any("NUON_PLUGIN_PROTOCOL")) {
			t.Errorf("the spy's environment %v lacks NUON_PLUGIN_PROTOCOL: a report that misses it proves nothing", env)
		}
		for _, e := range env {
			if e, _ := e.(string); strings.HasPrefix(e, "NUON_REGISTRY") || e == "NOT_GRANTED" || e == "NUON_ZONE_DIR" {
				t.Errorf("the plugin's container has %s in its environment", e)
			}
		}
		// No container of the pod has the registry's credential, though
		// the agent was given it for the jobs that fetch; the kubelet
		// pulled with its own pull secret.
		pod := jobPod(t, cs, pluginNamespace, job.ID)
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, "NUON_REGISTRY") }) || len(c.EnvFrom) != 0 {
				t.Errorf("container %s has %+v %+v", c.Name, c.Env, c.EnvFrom)
			}
		}
		for _, v := range pod.Spec.Volumes {
			if v.Secret != nil {
				t.Errorf("the pod mounts Secret %s", v.Secret.SecretName)
			}
		}
		if !slices.Equal(pod.Spec.ImagePullSecrets, k.ImagePullSecrets) {
			t.Errorf("the pod's imagePullSecrets %v, want %v", pod.Spec.ImagePullSecrets, k.ImagePullSecrets)
		}
		// Not granted the network: its NetworkPolicy, as the API server
		// keeps it, lets nothing out, not even DNS. This node's CNI (a
		// bridge) does not enforce NetworkPolicies: what is checked is
		// the object a CNI that does would enforce.
		checkDeniesAll(t, egressOf(t, cs, job.ID))
		// No Service's address: the kubelet's KUBERNETES_* the executor
		// withholds, the others enableServiceLinks: false.
		for _, e := range env {
			if e, _ := e.(string); strings.HasPrefix(e, "KUBERNETES_") || strings.HasSuffix(e, "_SERVICE_HOST") || strings.HasSuffix(e, "_PORT") {
				t.Errorf("the plugin's container has %s in its environment", e)
			}
		}
		logs, err := cs.CoreV1().Pods(pluginNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: pluginContainer}).DoRaw(t.Context())
		if err != nil || strings.Contains(string(logs), nodeRegistryPassword) {
			t.Errorf("the plugin container's log (through the kubelet): %v\n%s", err, logs)
		}
	})

	// The process form: a plugin released without an image runs as a
	// process of nuon's image (here on the perl base the zonefile
	// script needs), from what the agent staged.
	t.Run("process form", func(t *testing.T) {
		pk := *k
		pk.AdmitPluginImage = nil
		pk.Image = pushJobImageOn(t, reg, host, base)
		art := reg.push(t, reg.vendor, func(s string) string { return strings.Replace(s, `"version": "0.3.0"`, `"version": "0.3.4"`, 1) })
		job := pluginJob("dns-g1-update-node-process", art, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		job.Version = "0.3.4"
		seen := watchPod(t, cs, pluginNamespace, KubeName(job.ID))
		dir := filepath.Join(work, "jobs", job.ID)
		start := time.Now()
		res, err := pk.RunEnv(t.Context(), job, dir, nil)
		if err != nil {
			t.Fatalf("RunEnv: %v\nagent: %s\nnode: %s", err, agentLog.String(), node.Dir())
		}
		end := time.Now()
		t.Logf("%s on the real node: %s; %s", job.ID, end.Sub(start).Round(time.Millisecond), seen(start, end))
		if !res.Changed || res.Outputs["records"] != float64(1) || res.Outputs["zone_file"] != "/tmp/"+job.ID+".internal.zone" {
			t.Errorf("result %+v", res)
		}
		checkUnstaged(t, dir)
		pod := succeededPod(t, cs, job.ID)
		if pod.Status.Phase != corev1.PodSucceeded || len(pod.Spec.InitContainers) != 0 {
			t.Errorf("pod %s: %s, init containers %d", pod.Name, pod.Status.Phase, len(pod.Spec.InitContainers))
		}
		// Not granted the network: nothing out, not even DNS; and
		// nothing of the registry, which the agent was given for the
		// jobs that fetch.
		checkDeniesAll(t, egressOf(t, cs, job.ID))
		c := pod.Spec.Containers[0]
		if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, "NUON_REGISTRY") }) || len(c.EnvFrom) != 0 {
			t.Errorf("the job's container has %+v %+v", c.Env, c.EnvFrom)
		}
		for _, v := range pod.Spec.Volumes {
			if v.Secret != nil {
				t.Errorf("the pod mounts Secret %s", v.Secret.SecretName)
			}
		}
		if !slices.Contains(c.Command, "--plugin-staged") || slices.Contains(c.Command, "--plugin-key") {
			t.Errorf("the pod's command %v", c.Command)
		}
		// Again, the image on the node already: the form's wall.
		again := pluginJob("dns-g2-update-node-process", art, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		again.Generation, again.Version = 2, "0.3.4"
		seen = watchPod(t, cs, pluginNamespace, KubeName(again.ID))
		start = time.Now()
		if res, err := pk.RunEnv(t.Context(), again, filepath.Join(work, "jobs", again.ID), nil); err != nil || res.Outputs["zone_file"] != "/tmp/"+again.ID+".internal.zone" {
			t.Errorf("RunEnv = %+v, %v", res, err)
		}
		end = time.Now()
		t.Logf("%s on the real node: %s; %s", again.ID, end.Sub(start).Round(time.Millisecond), seen(start, end))

		// The staged content swapped behind the agent (after it staged
		// the plugin, while it extracts the job's other artifact):
		// refused in the pod before anything of it runs.
		swapped, swap := swappedPlugin(t, reg, "dns-g1-update-node-swapped", art, "#!/bin/sh\necho evil ran >&2\nexit 0\n")
		sk := pk
		sk.PluginArtifacts = swap
		dir = filepath.Join(work, "jobs", swapped.ID)
		_, err = sk.RunEnv(t.Context(), swapped, dir, nil)
		if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), plugin.ErrStagedDigest.Error()) {
			t.Fatalf("RunEnv = %v; want %v: %v", err, ErrJobFailed, plugin.ErrStagedDigest)
		}
		pod = jobPod(t, cs, pluginNamespace, swapped.ID)
		logs, err := cs.CoreV1().Pods(pluginNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: jobContainer}).DoRaw(t.Context())
		if err != nil || strings.Contains(string(logs), "evil ran") {
			t.Errorf("the job's log: %v\n%s", err, logs)
		}
		checkUnstaged(t, dir)
	})
}

// succeededPod is the pod of job id once the kubelet reports it
// succeeded: the runner collects the result when the job's container
// ended, which the kubelet may report before the pod's phase.
func succeededPod(t *testing.T, cs kubernetes.Interface, id string) *corev1.Pod {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		pod := jobPod(t, cs, pluginNamespace, id)
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || time.Now().After(deadline) {
			return pod
		}
	}
}

// nodeRegistryPassword is the registry's pull credential: the agent's,
// given to the jobs that fetch, never to a container of the image form.
const nodeRegistryPassword = "registry-pull-password-node-0001"

// bindPods binds each pod of ns that names no node to node until the test
// ends: what a cluster's scheduler does, which the test server has none
// of.
func bindPods(t *testing.T, cs kubernetes.Interface, ns, node string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
			if err == nil {
				for _, p := range pods.Items {
					_ = cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns, UID: p.UID},
						Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// bridgeRegistry serves go-containerregistry's in-memory registry on the
// node's gateway address gw until the test ends, lets the node's
// containerd pull from it over plain HTTP, and returns its host.
func bridgeRegistry(t *testing.T, node *kubetest.Node, gw string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	host := l.Addr().String()
	d := filepath.Join(node.Dir(), "certs.d", host)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
	if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o600); err != nil {
		t.Fatal(err)
	}
	return host
}

// pushJobImage pushes nuon's job image, as a release of nuon ships it:
// nuon and nuon-plugin-exec, static, in /bin; it returns its reference by
// digest.
func pushJobImage(t *testing.T, reg *pluginRegistry, host string) string {
	t.Helper()
	return pushJobImageOn(t, reg, host, nil)
}

// pushJobImageOn is pushJobImage with nuon's files on base (nil: none),
// for a plugin run as a process of nuon's image that needs what base
// holds (the zonefile plugin, a Perl script, needs perl).
func pushJobImageOn(t *testing.T, reg *pluginRegistry, host string, base v1.Image) string {
	t.Helper()
	nuon, exe := nodeBinaries(t)
	files := map[string][]byte{}
	for p, file := range map[string]string{"bin/nuon": nuon, "bin/" + jobrun.ExecutorName: exe} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = b
	}
	img, err := kubetest.Image(files, []string{"/bin/nuon"})
	if err != nil {
		t.Fatal(err)
	}
	if base != nil {
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		on, err := mutate.AppendLayers(base, layers...)
		if err != nil {
			t.Fatal(err)
		}
		bcf, err := on.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		bcf = bcf.DeepCopy()
		bcf.OS, bcf.Architecture, bcf.Config.Entrypoint, bcf.Config.User = "linux", "amd64", cf.Config.Entrypoint, cf.Config.User
		if img, err = mutate.ConfigFile(on, bcf); err != nil {
			t.Fatal(err)
		}
	}
	return pushImage(t, reg, host+"/nuon/job", img)
}

func pushImage(t *testing.T, reg *pluginRegistry, repo string, img v1.Image) string {
	t.Helper()
	r, err := name.NewRepository(repo)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := r.Digest(d.String())
	p, err := reg.c.NewPusher(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(t.Context(), ref, img); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

func digestOf(ref string) string {
	_, d, _ := strings.Cut(ref, "@")
	return d
}

// nodeBinaries builds cmd/nuon and cmd/nuon-plugin-exec once, static
// (CGO_ENABLED=0), as nuon's job image holds them.
func nodeBinaries(t testing.TB) (nuon, exe string) {
	t.Helper()
	nodeBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nuon-node-bin-")
		if err != nil {
			nodeBinErr = err
			return
		}
		nodeBinDir = dir
		for _, pkg := range []string{"nuon", "nuon-plugin-exec"} {
			cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", filepath.Join(dir, pkg), "../../cmd/"+pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				nodeBinErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if nodeBinErr != nil {
		t.Fatal(nodeBinErr)
	}
	return filepath.Join(nodeBinDir, "nuon"), filepath.Join(nodeBinDir, "nuon-plugin-exec")
}

var (
	nodeBinOnce sync.Once
	nodeBinDir  string
	nodeBinErr  error
)

// podTimes breaks a finished pod's time down from its status, as the
// kubelet stamps it (to the second): created, the executor's copy done,
// the plugin done, the job's container done.
func podTimes(pod *corev1.Pod) string {
	created := pod.CreationTimestamp.Time
	at := func(sts []corev1.ContainerStatus, name string) time.Time {
		for _, st := range sts {
			if st.Name == name && st.State.Terminated != nil {
				return st.State.Terminated.FinishedAt.Time
			}
		}
		return time.Time{}
	}
	exe, plug, job := at(pod.Status.InitContainerStatuses, executorContainer), at(pod.Status.InitContainerStatuses, pluginContainer), at(pod.Status.ContainerStatuses, jobContainer)
	return fmt.Sprintf("pod created → executor copied %s → plugin done %s → job done %s (total %s)",
		exe.Sub(created), plug.Sub(exe), job.Sub(plug), job.Sub(created))
}

// watchPod watches the pod of the Kubernetes Job name from now on and
// returns what breaks its time down, as the watch saw it happen (to the
// millisecond; the pod's own timestamps are to the second): from start,
// the pod created, the executor's container ended, the plugin's ended,
// the job's ended, then end (the result collected).
func watchPod(t *testing.T, cs kubernetes.Interface, ns, name string) func(start, end time.Time) string {
	t.Helper()
	w, err := cs.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: labelJobName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	at := map[string]time.Time{}
	mark := func(k string) {
		if _, ok := at[k]; !ok {
			at[k] = time.Now()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			mark("created")
			for _, st := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
				if st.State.Terminated != nil {
					mark(st.Name)
				}
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func(start, end time.Time) string {
		mu.Lock()
		defer mu.Unlock()
		prev, b := start, strings.Builder{}
		for _, k := range []string{"created", executorContainer, pluginContainer, jobContainer} {
			if at[k].IsZero() {
				fmt.Fprintf(&b, "%s unseen → ", k)
				continue
			}
			fmt.Fprintf(&b, "%s +%s → ", k, at[k].Sub(prev).Round(time.Millisecond))
			prev = at[k]
		}
		fmt.Fprintf(&b, "result +%s", end.Sub(prev).Round(time.Millisecond))
		return b.String()
	}
}
