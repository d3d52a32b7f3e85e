package kubetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/internal/testenv"
)

// NodeVersion names the node's assets folder: the versions of kubelet,
// containerd and the CNI plugins that `make kube-node`
// (hack/kube-node.sh) builds into it.
const NodeVersion = Version + "-containerd-v2.4.2-cni-v1.10.0"

// PauseImage is the sandbox image of a node's pods: the pause program of
// the assets folder, imported into containerd at start, never pulled.
const PauseImage = "kubetest.nuon.dev/pause:1"

// ErrNoNode reports that the node's binaries, or what they need of the
// machine (root, runc, overlayfs), are missing.
var ErrNoNode = errors.New("kubelet, containerd and CNI plugins not found")

// NodeStartTimeout bounds how long a node may take to become Ready.
const NodeStartTimeout = 2 * time.Minute

// nodeBinaries are the files NodeAssets must hold.
var nodeBinaries = []string{
	"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "pause",
	"cni/bridge", "cni/host-local", "cni/loopback",
}

// NodeAssets returns the folder holding the node's binaries (kubelet,
// containerd, containerd-shim-runc-v2, ctr, pause and the CNI plugins in
// cni/): NUON_KUBE_NODE_ASSETS, or the user cache folder that
// `make kube-node` fills (~/.cache/nuon/kube-node/NodeVersion). runc is
// taken from the folder when it holds one, else from PATH. The error
// wraps ErrNoNode when none holds them.
func NodeAssets() (string, error) {
	var tried []string
	if dir := os.Getenv("NUON_KUBE_NODE_ASSETS"); dir != "" {
		if hasNode(dir) {
			return dir, nil
		}
		tried = append(tried, "NUON_KUBE_NODE_ASSETS="+dir)
	}
	if cache, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(cache, "nuon", "kube-node", NodeVersion)
		if hasNode(dir) {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	return "", fmt.Errorf("%w in %s: run `make kube-node`", ErrNoNode, strings.Join(tried, ", "))
}

func hasNode(dir string) bool {
	for _, b := range nodeBinaries {
		if !executable(filepath.Join(dir, b)) {
			return false
		}
	}
	return true
}

// runc returns the runc binary: the assets folder's, else PATH's.
func runc(assets string) (string, error) {
	if p := filepath.Join(assets, "runc"); executable(p) {
		return p, nil
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("%w: no runc in %s or PATH: run `make kube-node`", ErrNoNode, assets)
	}
	return p, nil
}

// NodeOptions change how StartNode starts a node.
type NodeOptions struct {
	// HTTPRegistries are registry hosts (127.0.0.1:PORT) the node pulls
	// from over plain HTTP, as ocitest.Start serves without TLS.
	HTTPRegistries []string
}

// Node is a kubelet and containerd registered to a Server as one Node,
// running pods with runc, their network a CNI bridge of its own.
type Node struct {
	// Name is the Node's name.
	Name string
	// PodCIDR is the subnet the node's pods take addresses from.
	PodCIDR string

	srv    *Server
	dir    string
	assets string
	bridge string
	// kubeletURL is the kubelet's https API, on the bridge's address.
	kubeletURL string
	cgroupRoot string
	// api forwards the pods' connections to the server's service IP
	// (port 443) to the API server on loopback.
	api        net.Listener
	apiConns   sync.WaitGroup
	containerd *process
	kubelet    *process
	stopped    bool
}

// Dir is the node's working folder (configuration, logs, containerd's and
// the kubelet's state).
func (n *Node) Dir() string { return n.dir }

// socket is containerd's gRPC socket.
func (n *Node) socket() string { return filepath.Join(n.dir, "containerd.sock") }

// StartNode starts containerd and a kubelet with their files in dir (keep
// its path short: containerd's sockets live there), registers the kubelet
// to srv as a Node of a random name, and waits until the Node is Ready.
// Pods reach it by naming it in spec.nodeName (the server has no
// scheduler). Stop it with Stop, which leaves no process, mount, cgroup or
// network interface behind. It needs root.
func StartNode(ctx context.Context, srv *Server, assets, dir string, o NodeOptions) (n *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: a node needs root (mounts, cgroups, network namespaces)", ErrNoNode)
	}
	runcBin, err := runc(assets)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile("/proc/filesystems"); err != nil || !bytes.Contains(b, []byte("\toverlay\n")) {
		return nil, fmt.Errorf("%w: the kernel has no overlayfs", ErrNoNode)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	suffix := hex.EncodeToString(id)
	n = &Node{
		Name:       "kubetest-" + suffix,
		PodCIDR:    fmt.Sprintf("10.%d.%d.0/24", 200+int(id[0])%50, id[1]),
		srv:        srv,
		dir:        dir,
		assets:     assets,
		bridge:     "kt" + suffix,
		cgroupRoot: "/kubetest-" + suffix,
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	for _, d := range []string{"cni", "certs.d", "kubelet", "pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := n.writeContainerdConfig(runcBin, o); err != nil {
		return nil, err
	}
	n.containerd, err = startProcess(filepath.Join(assets, "containerd"), filepath.Join(dir, "containerd.log"),
		"--config", filepath.Join(dir, "containerd.toml"))
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	if err := n.importPause(ctx); err != nil {
		return nil, err
	}
	if err := n.writeCNIConfig(); err != nil {
		return nil, err
	}
	if err := n.makeBridge(); err != nil {
		return nil, err
	}
	if err := n.serveAPI(); err != nil {
		return nil, err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return nil, err
	}
	kubeconfig, err := n.kubeletKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	config, err := n.writeKubeletConfig()
	if err != nil {
		return nil, err
	}
	n.kubelet, err = startProcess(filepath.Join(assets, "kubelet"), filepath.Join(dir, "kubelet.log"),
		"--config="+config,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(dir, "kubelet"),
		"--cert-dir="+filepath.Join(dir, "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.gateway(),
		"--v=1",
	)
	if err != nil {
		return nil, fmt.Errorf("start kubelet: %w", err)
	}
	if err := n.waitReady(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// ctr runs containerd's ctr against the node's containerd, in the
// namespace the kubelet's pods live in.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.assets, "ctr"), append([]string{"--address", n.socket(), "--namespace", "k8s.io"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (n *Node) writeContainerdConfig(runcBin string, o NodeOptions) error {
	for _, host := range o.HTTPRegistries {
		d := filepath.Join(n.dir, "certs.d", host)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o600); err != nil {
			return err
		}
	}
	q := strconv.Quote
	cfg := `version = 3
root = ` + q(filepath.Join(n.dir, "root")) + `
state = ` + q(filepath.Join(n.dir, "state")) + `
imports = []
# Nothing of the machine's: no NRI socket, no /opt, no tracing, no
# snapshotters but overlayfs and native.
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.mount-handler.v1.erofs",
  "io.containerd.image-verifier.v1.bindir",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = ` + q(n.socket()) + `

[ttrpc]
  address = ` + q(n.socket()+".ttrpc") + `

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = ` + q(PauseImage) + `
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = ` + q(filepath.Join(n.dir, "certs.d")) + `

  [plugins."io.containerd.cri.v1.runtime"]
    netns_mounts_under_state_dir = true
    # Lowering an oom_score_adj needs CAP_SYS_RESOURCE, which a sandboxed
    # test machine may lack (runc then fails every pod): keep pods' at or
    # above containerd's own.
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    enable_criu = false
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = ` + q(runcBin) + `
        Root = ` + q(filepath.Join(n.dir, "runc")) + `
        SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [` + q(filepath.Join(n.assets, "cni")) + `]
      conf_dir = ` + q(filepath.Join(n.dir, "cni")) + `
      max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = ` + q(filepath.Join(n.dir, "s")) + `
`
	return os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(cfg), 0o600)
}

// importPause waits for containerd and imports the pause program of the
// assets folder as PauseImage.
func (n *Node) importPause(ctx context.Context) error {
	deadline := time.Now().Add(NodeStartTimeout)
	for {
		_, err := n.ctr(ctx, "version")
		if err == nil {
			break
		}
		if n.containerd.exited() {
			return fmt.Errorf("containerd exited: %s", n.containerd.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd not answering after %s (%v); its log: %s", NodeStartTimeout, err, n.containerd.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	bin, err := os.ReadFile(filepath.Join(n.assets, "pause"))
	if err != nil {
		return err
	}
	img, err := Image(map[string][]byte{"pause": bin}, []string{"/pause"})
	if err != nil {
		return err
	}
	tag, err := name.NewTag(PauseImage)
	if err != nil {
		return err
	}
	file := filepath.Join(n.dir, "pause.tar")
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return err
	}
	defer os.Remove(file)
	_, err = n.ctr(ctx, "images", "import", "--no-unpack", file)
	return err
}

// Image returns a one-layer linux/amd64 image of files (path to content,
// each executable) running entrypoint as user 65532, for a node's pods:
// push it to a registry with go-containerregistry's remote.Write.
func Image(files map[string][]byte, entrypoint []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range files {
			if !yield(p) {
				return
			}
		}
	}) {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o755, Size: int64(len(files[p])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = entrypoint
	cf.Config.User = "65532:65532"
	return mutate.ConfigFile(img, cf)
}

func (n *Node) writeCNIConfig() error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.Name,
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    n.bridge,
			"isGateway": true,
			// A default route to the bridge: the pods reach the API
			// server at its service IP there (serveAPI).
			"isDefaultGateway": true,
			"ipMasq":           false,
			"hairpinMode":      true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR}}},
				"dataDir": filepath.Join(n.dir, "ipam"),
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "cni", "10-kubetest.conflist"), b, 0o600)
}

// cgroupMounts returns the mount points of the machine's cgroup
// hierarchies (v1 controllers and the v2 unified one).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		i := slices.Index(fs, "-")
		if i < 0 || i+1 >= len(fs) || len(fs) < 5 {
			continue
		}
		if fs[i+1] == "cgroup" || fs[i+1] == "cgroup2" {
			out = append(out, fs[4])
		}
	}
	return out, sc.Err()
}

// makeCgroupRoot makes the node's cgroup root in every hierarchy: the
// kubelet puts its pods under it (cgroupRoot), so nodes never share one
// and Stop removes it whole.
func (n *Node) makeCgroupRoot() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := os.Mkdir(filepath.Join(m, n.cgroupRoot), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup root: %w", err)
		}
	}
	return nil
}

// kubeletKubeconfig gives the kubelet an identity of its own: a service
// account bound to the system:node role, and a token for it.
func (n *Node) kubeletKubeconfig(ctx context.Context) (string, error) {
	cs, err := kubernetes.NewForConfig(n.srv.Config())
	if err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: "kube-system"}}
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("kubelet service account: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: n.Name, Namespace: "kube-system"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("kubelet role binding: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, n.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("kubelet token: %w", err)
	}
	cfg := n.srv.Config()
	cfg.BearerToken = tr.Status.Token
	file := filepath.Join(n.dir, "kubelet.kubeconfig")
	return file, writeKubeconfig(file, cfg)
}

func (n *Node) writeKubeletConfig() (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	n.kubeletURL = "https://" + n.gateway() + ":" + strconv.Itoa(ports[0])
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// The machine's cgroups are v1; kubelet v1.35 and later refuse
		// them unless told.
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		"cgroupRoot":   n.cgroupRoot,
		"failSwapOn":   false,
		// The kubelet listens on its bridge's address (a kubelet refuses a
		// loopback node IP), where the API server reaches it for logs and
		// exec. It authenticates only the API server's client certificate
		// (a CA of the server's own): no anonymous request, no token, so a
		// pod that reaches the address gets nothing.
		"address":      n.gateway(),
		"port":         ports[0],
		"readOnlyPort": 0,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": filepath.Join(n.srv.dir, "kubelet-client-ca.crt")},
		},
		"authorization":            map[string]any{"mode": "AlwaysAllow"},
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              ports[1],
		"containerRuntimeEndpoint": "unix://" + n.socket(),
		"podLogsDir":               filepath.Join(n.dir, "logs"),
		"registerNode":             true,
		"rotateCertificates":       false,
		"serializeImagePulls":      false,
		"resolvConf":               "/etc/resolv.conf",
		// A test machine's disk may be nearly full: never evict for it,
		// never collect images for it.
		"evictionHard": map[string]string{
			"memory.available":  "50Mi",
			"nodefs.available":  "50Mi",
			"imagefs.available": "50Mi",
		},
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"nodeStatusUpdateFrequency":     "2s",
		"syncFrequency":                 "5s",
		"fileCheckFrequency":            "5s",
		"localStorageCapacityIsolation": false,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	file := filepath.Join(n.dir, "kubelet.json")
	return file, os.WriteFile(file, b, 0o600)
}

// waitReady waits until the Node is registered with condition Ready.
func (n *Node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, NodeStartTimeout)
	defer cancel()
	cs, err := kubernetes.NewForConfig(n.srv.Config())
	if err != nil {
		return err
	}
	last := "not registered"
	for {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = fmt.Sprintf("Ready %s: %s", c.Status, c.Message)
				}
			}
		}
		for _, p := range []*process{n.containerd, n.kubelet} {
			if p.exited() {
				return fmt.Errorf("%s exited before node %s was ready: %s", p.name, n.Name, p.tail())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready after %s (%s); kubelet's log: %s", n.Name, NodeStartTimeout, last, n.kubelet.tail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop deletes the node's pods (the kubelet stops their containers and
// tears their network down), stops the kubelet, then removes whatever
// containers are left and stops containerd and the shims it started,
// unmounts everything under the node's folder, and removes its bridge,
// its cgroups and its Node. Errors are joined; everything is attempted.
func (n *Node) Stop() error {
	if n.stopped {
		return nil
	}
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	cs, err := kubernetes.NewForConfig(n.srv.Config())
	if err != nil {
		errs = append(errs, err)
	}
	if cs != nil && n.kubelet != nil && !n.kubelet.exited() {
		errs = append(errs, n.drain(ctx, cs))
	}
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.stop(StopGrace))
	}
	if n.containerd != nil && !n.containerd.exited() {
		errs = append(errs, n.removeContainers(ctx))
	}
	if n.containerd != nil {
		errs = append(errs, n.containerd.stop(StopGrace))
	}
	if n.api != nil {
		n.api.Close()
		// Every pod is gone, and their connections with them; a
		// connection that lingers is left to end by itself.
		done := make(chan struct{})
		go func() { n.apiConns.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	errs = append(errs, n.killShims(), n.unmountAll(), n.removeBridge(), n.removeCgroups())
	if cs != nil {
		for _, del := range []func() error{
			func() error { return cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}) },
			func() error { return cs.RbacV1().ClusterRoleBindings().Delete(ctx, n.Name, metav1.DeleteOptions{}) },
			func() error {
				return cs.CoreV1().ServiceAccounts("kube-system").Delete(ctx, n.Name, metav1.DeleteOptions{})
			},
		} {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// drain deletes the node's pods and waits until the kubelet has removed
// them, so their sandboxes are stopped and their network torn down by the
// kubelet and containerd themselves.
func (n *Node) drain(ctx context.Context, cs kubernetes.Interface) error {
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()}
	pods, err := cs.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pods, err := cs.CoreV1().Pods("").List(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: %d pods not removed by the kubelet within 30 s", n.Name, len(pods.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The kubelet stops a deleted pod's sandbox just after the pod goes.
	for time.Now().Before(deadline) {
		out, err := n.ctr(ctx, "tasks", "list", "--quiet")
		if err != nil || strings.TrimSpace(string(out)) == "" {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// removeContainers kills and removes every container left in containerd
// (the kubelet stopped before its pods did).
func (n *Node) removeContainers(ctx context.Context) error {
	out, err := n.ctr(ctx, "containers", "list", "--quiet")
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range strings.Fields(string(out)) {
		_, _ = n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
		// A shim whose last task died may exit under the delete
		// ("ttrpc: closed"): the task is gone either way.
		if _, err := n.ctr(ctx, "tasks", "delete", "--force", id); err != nil && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "ttrpc: closed") {
			errs = append(errs, err)
		}
		var err error
		for range 10 {
			if _, err = n.ctr(ctx, "containers", "delete", id); err == nil || strings.Contains(err.Error(), "not found") {
				err = nil
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killShims kills any containerd-shim-runc-v2 still serving the node's
// containerd: shims outlive containerd by design.
func (n *Node) killShims() error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasSuffix(args[0], "containerd-shim-runc-v2") || !slices.Contains(args, n.socket()) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder returns the mount points under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		mp := unescapeMount(fs[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything mounted under the node's folder: the
// containers' root filesystems, the pods' volumes and network namespaces.
func (n *Node) unmountAll() error {
	var errs []error
	for range 3 {
		mounts, err := mountsUnder(n.dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

// gateway is the node's address on its bridge: the first of PodCIDR.
func (n *Node) gateway() string {
	return strings.TrimSuffix(n.PodCIDR, "0/24") + "1"
}

// makeBridge makes the node's CNI bridge with its gateway address before
// the first pod does, so the kubelet can listen there from the start.
func (n *Node) makeBridge() error {
	for _, args := range [][]string{
		{"link", "add", "name", n.bridge, "type", "bridge"},
		{"addr", "add", n.gateway() + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// serveAPI lets the node's pods reach the API server as in a cluster: the
// server's service IP (the kubernetes Service, KUBERNETES_SERVICE_HOST in
// every pod) is an address of the node's bridge, where the test process
// forwards port 443 to the API server on loopback. The serving
// certificate names that IP, so in-cluster clients verify it as usual.
func (n *Node) serveAPI() error {
	if out, err := exec.Command("ip", "addr", "add", n.srv.serviceIP+"/32", "dev", n.bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr add %s: %w: %s", n.srv.serviceIP, err, out)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(n.srv.serviceIP, "443"))
	if err != nil {
		return fmt.Errorf("serve the API server to pods: %w", err)
	}
	n.api = l
	target := strings.TrimPrefix(n.srv.URL, "https://")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.apiConns.Add(1)
			go func() {
				defer n.apiConns.Done()
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return nil
}

// removeBridge deletes the node's CNI bridge; the pods' veths went with
// their network namespaces.
func (n *Node) removeBridge() error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.bridge)); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", n.bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("delete bridge %s: %w: %s", n.bridge, err, out)
	}
	return nil
}

// removeCgroups removes the node's cgroup root, deepest first, in every
// hierarchy.
func (n *Node) removeCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, n.cgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// RequireNode returns the node's assets folder (NodeAssets), or skips the
// test, or fails it in CI, as NewNode does: a test calls it first to skip
// before it starts a server for the node.
func RequireNode(t testing.TB) string {
	t.Helper()
	assets, err := NodeAssets()
	if errors.Is(err, ErrNoNode) && os.Getenv("NUON_KUBE_NODE_ASSETS") == "" {
		t.Skipf("%v (the node is not part of make test yet)", err)
	}
	if errors.Is(err, ErrNoNode) {
		testenv.Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return assets
}

// NewNode starts a node registered to srv for the test, stopped when the
// test ends, with its files in a fresh folder. Without the node's binaries,
// root or overlayfs the test is skipped, or fails in CI (internal/testenv)
// once NUON_KUBE_NODE_ASSETS is set: until `make test` builds the node
// (make kube-node) and exports that variable, a missing node only skips.
func NewNode(t testing.TB, srv *Server, o NodeOptions) *Node {
	t.Helper()
	assets := RequireNode(t)
	// Short: containerd's sockets live under it.
	dir, err := os.MkdirTemp("", "kn-")
	if err != nil {
		t.Fatal(err)
	}
	n, err := StartNode(context.Background(), srv, assets, dir, o)
	if errors.Is(err, ErrNoNode) && os.Getenv("NUON_KUBE_NODE_ASSETS") == "" {
		os.RemoveAll(dir)
		t.Skipf("%v (the node is not part of make test yet)", err)
	}
	if errors.Is(err, ErrNoNode) {
		os.RemoveAll(dir)
		testenv.Missing(t, "%v", err)
	}
	if err != nil {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop node %s: %v (its files: %s)", n.Name, err, dir)
			return
		}
		if t.Failed() {
			t.Logf("node %s: its logs are in %s", n.Name, dir)
			return
		}
		os.RemoveAll(dir)
	})
	return n
}
