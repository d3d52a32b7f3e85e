package kubetest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/internal/oci/ocitest"
)

// TestNodeRestrictedPod runs a real pod on a real node: an image the test
// pushes to a local registry, pulled by containerd over plain HTTP, run by
// runc under the restricted Pod Security Standard with a read-only root
// filesystem. The pod completes; its write to its root filesystem failed
// while its write to an emptyDir worked; it ran as its non-root user with
// the runtime's seccomp profile, no new privileges and no capabilities.
// A privileged pod and a hostNetwork pod are refused by admission. Stop
// leaves no process, mount, cgroup or interface behind.
func TestNodeRestrictedPod(t *testing.T) {
	f := startNodeFixture(t)
	ctx, cs, ns, node, image := f.ctx, f.cs, f.ns, f.node, f.image

	pod := restrictedPod(node.Name, image)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the restricted pod is refused: %v", err)
	}
	done := waitSucceeded(t, cs, ns, pod.Name)
	st := done.Status.ContainerStatuses
	if len(st) != 1 || st[0].State.Terminated == nil {
		t.Fatalf("container statuses: %+v", st)
	}
	report := parseReport(st[0].State.Terminated.Message)
	t.Logf("probe: %v", report)
	for key, want := range map[string]string{
		"write /probe":     "open /probe: read-only file system",
		"write /tmp/probe": "ok",
		"uid":              "65532",
		"seccomp":          "2", // a filter: RuntimeDefault
		"nonewprivs":       "1",
		"capeff":           "0000000000000000",
	} {
		if report[key] != want {
			t.Errorf("probe %s = %q, want %q", key, report[key], want)
		}
	}
	logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Errorf("pod logs through the API server: %v", err)
	} else if !strings.Contains(string(logs), "write /tmp/probe: ok") {
		t.Errorf("pod logs = %q, want the probe's report", logs)
	}

	refused := map[string]func(*corev1.Pod){
		"privileged": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		},
		"hostNetwork": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"root": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = ptr.To(false)
			p.Spec.SecurityContext.RunAsNonRoot = nil
			p.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
		},
	}
	for name, mutate := range refused {
		p := restrictedPod(node.Name, image)
		p.Name = "refused-" + strings.ToLower(strings.ReplaceAll(name, " ", "-"))
		mutate(p)
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		switch {
		case name == "privileged" && apierrors.IsInvalid(err) && strings.Contains(err.Error(), "privileged: Forbidden"):
			// The API server refuses privileged containers before
			// admission (it runs without --allow-privileged).
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity"):
		default:
			t.Errorf("%s pod: err = %v, want refused", name, err)
		}
	}

	t.Run("in-cluster API", func(t *testing.T) {
		// A pod reaches the API server as in a cluster: the kubernetes
		// Service's address, its service account's token, the CA.
		p := restrictedPod(node.Name, image)
		p.Name = "api"
		p.Spec.AutomountServiceAccountToken = ptr.To(true)
		p.Spec.Containers[0].Args = []string{"api"}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitSucceeded(t, cs, ns, p.Name)
		if msg := got.Status.ContainerStatuses[0].State.Terminated.Message; msg != "api: 200\n" {
			t.Errorf("in-cluster GET /api: %q, want 200", msg)
		}
	})

	t.Run("kubelet API", func(t *testing.T) {
		// Pods reach the kubelet's address (their gateway): without the
		// API server's client certificate it answers nothing.
		anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		if code := kubeletGet(t, anon, node.kubeletURL+"/pods"); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET /pods = %d, want 401", code)
		}
		cert, err := tls.LoadX509KeyPair(filepath.Join(f.srv.Dir(), "kubelet-client.crt"), filepath.Join(f.srv.Dir(), "kubelet-client.key"))
		if err != nil {
			t.Fatal(err)
		}
		apiserver := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}}
		if code := kubeletGet(t, apiserver, node.kubeletURL+"/pods"); code != http.StatusOK {
			t.Errorf("GET /pods as the API server = %d, want 200", code)
		}
	})

	// A pod still running when the node stops: the kubelet tears it and
	// its network down.
	waiter := restrictedPod(node.Name, image)
	waiter.Name = "waiter"
	waiter.Spec.Containers[0].Args = []string{"wait"}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, waiter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cs, ns, waiter.Name)
	own := nodeInterfaces(t, node)
	if err := node.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f.assertGone(t, own)
}

// TestNodeStopAfterKubeletDies stops a node whose kubelet was killed with
// a pod running: Stop removes the containers through containerd itself and
// still leaves no process, mount, cgroup or interface behind.
func TestNodeStopAfterKubeletDies(t *testing.T) {
	f := startNodeFixture(t)
	waiter := restrictedPod(f.node.Name, f.image)
	waiter.Name = "waiter"
	waiter.Spec.Containers[0].Args = []string{"wait"}
	if _, err := f.cs.CoreV1().Pods(f.ns).Create(f.ctx, waiter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, f.cs, f.ns, waiter.Name)
	if err := f.node.kubelet.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-f.node.kubelet.done
	own := nodeInterfaces(t, f.node)
	if err := f.node.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f.assertGone(t, own)
}

// nodeFixture is a server with the controllers, a registry, a node, the
// probe image pushed and a namespace enforcing the restricted standard.
type nodeFixture struct {
	ctx   context.Context
	srv   *Server
	cs    *kubernetes.Clientset
	node  *Node
	ns    string
	image string
}

func startNodeFixture(t *testing.T) *nodeFixture {
	t.Helper()
	RequireNode(t)
	f := &nodeFixture{}
	f.srv = New(t, WithControllerManager())
	reg := ocitest.Start(t, ocitest.Options{})
	f.node = NewNode(t, f.srv, NodeOptions{HTTPRegistries: []string{reg.Host}})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	f.cs = f.srv.Clientset(t)
	f.image = pushProbe(ctx, t, reg.Host)
	f.ns = f.srv.Namespace(t)
	nsObj, err := f.cs.CoreV1().Namespaces().Get(ctx, f.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}
	if _, err := f.cs.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// assertGone checks that the stopped node left nothing: see assertNodeGone,
// and none of own, the node's network interfaces before it stopped (its
// bridge and the veths on it), is left. Other nodes of tests running
// beside this one come and go meanwhile: only the node's own count.
func (f *nodeFixture) assertGone(t *testing.T, own []string) {
	t.Helper()
	assertNodeGone(t, f.node)
	// The kernel destroys a network namespace, and the veth in it, a
	// moment after its last mount and process go.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		now := netInterfaces(t)
		if left = slices.DeleteFunc(slices.Clone(own), func(name string) bool { return !slices.Contains(now, name) }); len(left) == 0 {
			return
		}
	}
	t.Errorf("network interfaces of the node left after stop: %v (of %v)", left, own)
}

// nodeInterfaces is node's network interfaces: its bridge and those on
// it. With a pod running there is a veth on it, or the check that they
// go proves nothing.
func nodeInterfaces(t *testing.T, node *Node) []string {
	t.Helper()
	own := []string{node.bridge}
	for _, name := range netInterfaces(t) {
		if master, err := os.Readlink(filepath.Join("/sys/class/net", name, "master")); err == nil && filepath.Base(master) == node.bridge {
			own = append(own, name)
		}
	}
	if len(own) < 2 {
		t.Fatalf("no interface on the node's bridge %s with a pod running", node.bridge)
	}
	return own
}

func netInterfaces(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func kubeletGet(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func waitRunning(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	eventually(t, 2*time.Minute, "pod "+name+" Running", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + " " + podWaiting(p)
	})
}

// restrictedPod is a pod of the probe that the restricted Pod Security
// Standard admits, on node.
func restrictedPod(node, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "probe",
				Image: image,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// pushProbe builds testdata/probe static and pushes it to the registry
// as an image; it returns the image's reference by digest.
func pushProbe(ctx context.Context, t testing.TB, host string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "probe")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(map[string][]byte{"probe": b}, []string{"/probe"})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(host+"/kubetest/probe:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return host + "/kubetest/probe@" + d.String()
}

// parseReport reads the probe's "key: value" lines.
func parseReport(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			out[k] = v
		}
	}
	return out
}

// podWaiting says why a pod's containers wait, for a timeout's message.
func podWaiting(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			out = append(out, w.Reason+": "+w.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			out = append(out, string(c.Type)+": "+c.Message)
		}
	}
	return strings.Join(out, "; ")
}

// assertNodeGone checks that a stopped node left nothing behind: no
// process serving its containerd, no mount under its folder, no bridge,
// no cgroup root.
func assertNodeGone(t *testing.T, n *Node) {
	t.Helper()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), n.dir) {
			t.Errorf("process %s still runs: %q", p.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	if m, err := mountsUnder(n.dir); err != nil || len(m) > 0 {
		t.Errorf("mounts left under %s: %v %v", n.dir, m, err)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.bridge)); err == nil {
		t.Errorf("bridge %s left", n.bridge)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, n.cgroupRoot)); err == nil {
			t.Errorf("cgroup %s left in %s", n.cgroupRoot, m)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/kn-1/root`:       "/tmp/kn-1/root",
		`/tmp/a\040b`:          "/tmp/a b",
		`/tmp/tab\011x\134y`:   "/tmp/tab\tx\\y",
		`/tmp/short\04`:        `/tmp/short\04`,
		`/tmp/not-octal\089`:   `/tmp/not-octal\089`,
		`/tmp/too-big\777`:     `/tmp/too-big\777`,
		`\040`:                 " ",
		``:                     "",
		`/tmp/trailing\\`:      `/tmp/trailing\\`,
		`/tmp/two\040\040x`:    "/tmp/two  x",
		`/run/netns/cni-\0401`: "/run/netns/cni- 1",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzUnescapeMount holds unescapeMount to mountinfo's escaping: a path
// escaped as the kernel does comes back whole.
func FuzzUnescapeMount(f *testing.F) {
	for _, s := range []string{"/tmp/kn-1/root", "/tmp/a b", "tab\tnl\nbs\\", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		var b strings.Builder
		for i := 0; i < len(path); i++ {
			switch c := path[i]; c {
			case ' ', '\t', '\n', '\\':
				fmt.Fprintf(&b, `\%03o`, c)
			default:
				b.WriteByte(c)
			}
		}
		if got := unescapeMount(b.String()); got != path {
			t.Fatalf("unescapeMount(%q) = %q, want %q", b.String(), got, path)
		}
		_ = unescapeMount(path) // never panics on what the kernel did not write
	})
}

// waitSucceeded waits until the pod completed and returns it; a pod that
// failed fails the test.
func waitSucceeded(t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var done *corev1.Pod
	eventually(t, 2*time.Minute, "pod "+name+" Succeeded", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done = p
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed: %+v", name, p.Status)
		}
		return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase) + " " + podWaiting(p)
	})
	return done
}
