package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// The test binary as a job's pod (`nuon job run --pod`) with the real
// terraform plugin, its modules read from envModules.
const (
	envPod     = "NUON_JOBS_TEST_POD"
	envModules = "NUON_JOBS_TEST_MODULES"
)

// podProcess is what `nuon job run --pod MANIFEST` does, with the real
// terraform plugin, less PodMain's write of the result to
// /dev/termination-log, a path of the whole machine here: the test kubelet
// takes the termination message from the result file instead.
//
// A job of a vendor's plugin (its manifest has grants) runs the plugin its
// manifest pins from what the agent staged, as `nuon job run
// --plugin-staged DIR [--plugin-shared-network]` does: plugin.Staged,
// with no registry; or, in the image form, reads the plugin's answer
// (--plugin-exchange-in).
func podProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	manifest := os.Args[len(os.Args)-1]
	plugins := map[string]reconciler.Plugin{schemas.TypeTerraform: &terraform.Plugin{}}
	if b, err := os.ReadFile(manifest); err == nil {
		job, err := plugin.DecodeJob(manifest, b)
		switch {
		case err != nil || job.Grants == nil:
		case argAfter("--plugin-exchange-in") != "":
			if q, err := plugin.Exchanged(argAfter("--plugin-exchange-in"), argAfter("--plugin-exchange-out")); err != nil {
				plugins[job.Plugin] = refused{err}
			} else {
				plugins[job.Plugin] = q
			}
		case argAfter("--plugin-staged") != "":
			dir, err := os.MkdirTemp("", "nuon-plugins-")
			if err != nil {
				fmt.Fprintln(os.Stderr, "nuon:", err)
				return 1
			}
			defer os.RemoveAll(dir)
			p, err := plugin.Staged(ctx, job, argAfter("--plugin-staged"), filepath.Join(dir, "plugin"))
			if err != nil {
				plugins[job.Plugin] = refused{err}
				break
			}
			p.Runner.SharedNetwork = slices.Contains(os.Args, "--plugin-shared-network")
			plugins[job.Plugin] = p
		default:
			fmt.Fprintln(os.Stderr, "nuon: a vendor's plugin's job without --plugin-staged or --plugin-exchange-in")
			return 1
		}
	}
	if err := jobrun.Main(ctx, manifest, plugins, dirModules(os.Getenv(envModules)), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nuon:", err)
		return 1
	}
	return 0
}

// refused fails every operation with why, as `nuon job run` does for a
// plugin it will not run.
type refused struct{ err error }

func (r refused) Apply(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	return nil, r.err
}

func (r refused) Destroy(context.Context, *schemas.Job, reconciler.Env) error { return r.err }

// dirModules serves each artifact from the folder of dirModules named as
// the last element of its repository.
type dirModules string

func (d dirModules) Extract(_ context.Context, a schemas.Artifact, dir string) error {
	repo, _, _ := strings.Cut(a.Local, "@")
	return os.CopyFS(dir, os.DirFS(filepath.Join(string(d), path.Base(repo))))
}

// kubelet plays the kubelet for the pods of one namespace, which the test
// API server has none of: it runs each new pod's command as a local
// process, with the pod's volumes mapped to temporary folders (the
// manifest's paths rewritten to match), its environment, and a kubeconfig
// holding a token of the pod's service account (TokenRequest, as the
// kubelet mounts one) in KUBECONFIG instead of the in-cluster files; it
// writes the pod's status as it starts and ends. The controllers
// (kubetest.WithControllerManager) do the rest: the Job controller creates
// the pods and finishes the Jobs from their status.
type kubelet struct {
	t       testing.TB
	cs      kubernetes.Interface
	srv     *kubetest.Server
	ns      string
	env     []string // added to every pod's environment
	root    string
	mu      sync.Mutex
	started map[string]*podRun // by pod name
	stop    context.CancelFunc
	done    chan struct{}
}

// podRun is one pod's containers, run one after the other: its init
// containers, then its container.
type podRun struct {
	mu  sync.Mutex
	cmd *exec.Cmd // the container running now
	log string
	// exit is closed when the pod's last container ended.
	exit chan struct{}
	// started is when the first container started, ended when the last
	// one exited.
	started, ended time.Time
}

// stop kills the container running now, as a node that dies would.
func (p *podRun) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

func startKubelet(t testing.TB, srv *kubetest.Server, ns string, env []string) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{t: t, cs: srv.Clientset(t), srv: srv, ns: ns, env: env, root: t.TempDir(),
		started: map[string]*podRun{}, stop: cancel, done: make(chan struct{})}
	go k.loop(ctx)
	t.Cleanup(func() {
		cancel()
		<-k.done
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, p := range k.started {
			p.stop()
			<-p.exit
		}
	})
	return k
}

func (k *kubelet) loop(ctx context.Context) {
	defer close(k.done)
	for ctx.Err() == nil {
		pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				k.mu.Lock()
				_, seen := k.started[p.Name]
				k.mu.Unlock()
				if !seen && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodPending {
					if err := k.run(ctx, p); err != nil {
						k.t.Errorf("kubelet: pod %s: %v", p.Name, err)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run prepares pod p's volumes, starts its containers one after the other
// and marks the pod running.
func (k *kubelet) run(ctx context.Context, p *corev1.Pod) error {
	dir := filepath.Join(k.root, p.Name)
	vols := map[string]string{} // volume name → host folder
	for _, v := range p.Spec.Volumes {
		if host := k.hostPathClaim(ctx, v); host != "" {
			// A claim bound to a hostPath volume is that folder.
			vols[v.Name] = host
			continue
		}
		host := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(host, 0o777); err != nil {
			return err
		}
		// An emptyDir is anyone's to write, as the kubelet makes it.
		if err := os.Chmod(host, 0o777); err != nil {
			return err
		}
		vols[v.Name] = host
	}
	main := &p.Spec.Containers[0]
	hostPath := k.hostPaths(main, vols)
	for _, v := range p.Spec.Volumes {
		if v.Secret != nil {
			// A Secret volume holds its keys as files.
			sec, err := k.cs.CoreV1().Secrets(k.ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for key, val := range sec.Data {
				if err := os.WriteFile(filepath.Join(vols[v.Name], key), val, 0o644); err != nil {
					return err
				}
			}
		}
		if v.ConfigMap == nil {
			continue
		}
		cm, err := k.cs.CoreV1().ConfigMaps(k.ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for key, val := range cm.Data {
			if key == ManifestFile {
				var m map[string]any
				if err := json.Unmarshal([]byte(val), &m); err != nil {
					return err
				}
				for _, f := range []string{"resultFile", "stateDir"} {
					if s, ok := m[f].(string); ok {
						m[f] = hostPath(s)
					}
				}
				b, _ := json.Marshal(m)
				val = string(b)
			}
			if err := os.WriteFile(filepath.Join(vols[v.Name], key), []byte(val), 0o644); err != nil {
				return err
			}
		}
	}
	logFile := filepath.Join(dir, "log")
	f, err := os.Create(logFile)
	if err != nil {
		return err
	}
	pr := &podRun{log: logFile, exit: make(chan struct{}), started: time.Now()}
	k.mu.Lock()
	k.started[p.Name] = pr
	k.mu.Unlock()
	now := metav1.Now()
	k.setStatus(p.Name, func(st *corev1.PodStatus) {
		st.Phase, st.StartTime = corev1.PodRunning, &now
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: main.Name, Image: main.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
	go func() {
		defer close(pr.exit)
		defer f.Close()
		containers := append(slices.Clone(p.Spec.InitContainers), *main)
		var inits []corev1.ContainerStatus
		for i := range containers {
			c := &containers[i]
			fmt.Fprintf(f, "--- container %s (%s)\n", c.Name, c.Image)
			code, err := k.runContainer(ctx, p, c, dir, vols, f, pr)
			if err != nil {
				fmt.Fprintf(f, "kubelet: container %s: %v\n", c.Name, err)
				code = 128
			}
			end := metav1.Now()
			term := &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: end}
			if i < len(p.Spec.InitContainers) {
				inits = append(inits, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{Terminated: term}})
				if code == 0 {
					continue
				}
			} else {
				// The result file stands in for /dev/termination-log.
				msg, _ := os.ReadFile(hostPath(PodResultFile))
				term.Message = string(msg)
			}
			k.mu.Lock()
			pr.ended = time.Now()
			k.mu.Unlock()
			phase := corev1.PodSucceeded
			if code != 0 {
				phase = corev1.PodFailed
			}
			k.setStatus(p.Name, func(st *corev1.PodStatus) {
				st.Phase = phase
				st.InitContainerStatuses = inits
				st.ContainerStatuses = []corev1.ContainerStatus{{Name: main.Name, Image: main.Image, Started: ptr.To(false),
					State: corev1.ContainerState{Terminated: term}}}
			})
			return
		}
	}()
	return nil
}

// hostPathClaim is the folder of the hostPath PersistentVolume that
// volume v's claim is bound to, or "".
func (k *kubelet) hostPathClaim(ctx context.Context, v corev1.Volume) string {
	if v.PersistentVolumeClaim == nil {
		return ""
	}
	pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		return ""
	}
	pv, err := k.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		return ""
	}
	return pv.Spec.HostPath.Path
}

// hostPaths maps the paths container c sees to the host folders of its
// volumes (vols), through its mounts; a path outside them is the host's.
func (k *kubelet) hostPaths(c *corev1.Container, vols map[string]string) func(string) string {
	mounts := map[string]string{} // mount path → host folder
	for _, m := range c.VolumeMounts {
		host := vols[m.Name]
		if m.SubPath != "" {
			host = filepath.Join(host, m.SubPath)
			_ = os.MkdirAll(host, 0o777)
		}
		mounts[path.Clean(m.MountPath)] = host
	}
	return func(s string) string {
		// The longest mount path that holds s.
		for _, mp := range slices.SortedFunc(maps.Keys(mounts), func(a, b string) int { return len(b) - len(a) }) {
			if s == mp || strings.HasPrefix(s, mp+"/") {
				return mounts[mp] + strings.TrimPrefix(s, mp)
			}
		}
		return s
	}
}

// runContainer runs container c of pod p to its end and returns its exit
// code: nuon's image as a process of this test binary on the host, its
// paths rewritten to its volumes' folders; any other image (a reference
// by digest) pulled from its registry, unpacked, and run in a root of its
// own (runImage).
func (k *kubelet) runContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, dir string, vols map[string]string, log *os.File, pr *podRun) (int32, error) {
	env, err := k.containerEnv(ctx, p, c, dir)
	if err != nil {
		return 0, err
	}
	var cmd *exec.Cmd
	if strings.Contains(c.Image, "@sha256:") {
		if cmd, err = k.imageCommand(ctx, p, c, dir, vols, env); err != nil {
			return 0, err
		}
	} else {
		hostPath := k.hostPaths(c, vols)
		env = append(append(os.Environ(), k.env...), env...)
		env = append(env, envPod+"=1", "GORACE=atexit_sleep_ms=0", "TMPDIR="+hostPath("/tmp"))
		argv := slices.Clone(c.Command)
		for i, a := range argv {
			if strings.HasPrefix(a, "/") {
				argv[i] = hostPath(a)
			}
		}
		exe := os.Args[0]
		if path.Base(argv[0]) == jobrun.ExecutorName {
			// nuon's image holds the executor beside nuon.
			exe = os.Getenv(envExecutor)
		}
		cmd = exec.Command(exe, argv[1:]...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pr.mu.Lock()
	pr.cmd = cmd
	pr.mu.Unlock()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		code := int32(ee.ExitCode())
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int32(ws.Signal())
		}
		return code, nil
	}
	return 0, err
}

// containerEnv is container c's environment as the pod spec gives it: its
// env, its envFrom Secrets, and a service account kubeconfig when the pod
// mounts a token.
func (k *kubelet) containerEnv(ctx context.Context, p *corev1.Pod, c *corev1.Container, dir string) ([]string, error) {
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			continue
		}
		s, err := k.cs.CoreV1().Secrets(k.ns).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ptr.Deref(ef.SecretRef.Optional, false) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for key, val := range s.Data {
			env = append(env, ef.Prefix+key+"="+string(val))
		}
	}
	if ptr.Deref(p.Spec.AutomountServiceAccountToken, true) {
		kubeconfig, err := k.serviceAccountKubeconfig(ctx, p, dir)
		if err != nil {
			return nil, err
		}
		env = append(env, "KUBECONFIG="+kubeconfig)
	} else if !strings.Contains(c.Image, "@sha256:") {
		// No token: no kubeconfig, and none of the test's either.
		env = append(env, "KUBECONFIG="+filepath.Join(dir, "no-kubeconfig"))
	}
	return env, nil
}

// kill kills the process of the pod whose name starts with prefix, as a
// node that dies would: SIGKILL to its whole process group, no cleanup.
func (k *kubelet) kill(prefix string) {
	k.t.Helper()
	k.mu.Lock()
	var pr *podRun
	for name, p := range k.started {
		if strings.HasPrefix(name, prefix) {
			pr = p
		}
	}
	k.mu.Unlock()
	if pr == nil {
		k.t.Fatalf("no pod %s… runs", prefix)
	}
	pr.stop()
	<-pr.exit
}

// startedAt is when the process of the pod whose name starts with prefix
// started, and when it ended (zero while it runs).
func (k *kubelet) startedAt(prefix string) (started, ended time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, p := range k.started {
		if strings.HasPrefix(name, prefix) {
			return p.started, p.ended
		}
	}
	return time.Time{}, time.Time{}
}

// log returns the output of the pod whose name starts with prefix.
func (k *kubelet) log(prefix string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	for name, p := range k.started {
		if strings.HasPrefix(name, prefix) {
			out, _ := os.ReadFile(p.log)
			fmt.Fprintf(&b, "--- pod %s\n%s", name, out)
		}
	}
	return b.String()
}

// setStatus writes the pod's status, retrying on conflicts.
func (k *kubelet) setStatus(name string, set func(*corev1.PodStatus)) {
	for range 50 {
		p, err := k.cs.CoreV1().Pods(k.ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err == nil {
			set(&p.Status)
			if _, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.t.Errorf("kubelet: could not write the status of pod %s", name)
}

// serviceAccountKubeconfig writes a kubeconfig holding a token of the pod's
// service account bound to the pod, as the kubelet projects one.
func (k *kubelet) serviceAccountKubeconfig(ctx context.Context, p *corev1.Pod, dir string) (string, error) {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}
	tok, err := k.cs.CoreV1().ServiceAccounts(k.ns).CreateToken(ctx, p.Spec.ServiceAccountName, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of service account %s: %w", p.Spec.ServiceAccountName, err)
	}
	cfg := k.srv.Config()
	ca, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["pod"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["pod"] = &clientcmdapi.Context{Cluster: "pod", AuthInfo: "pod", Namespace: k.ns}
	kc.CurrentContext = "pod"
	file := filepath.Join(dir, "serviceaccount.kubeconfig")
	return file, clientcmd.WriteToFile(*kc, file)
}
