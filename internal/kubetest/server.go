package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Version is the Kubernetes version of the binaries `make kube-binaries`
// builds; it names their cache folder.
const Version = "v1.37.1"

// Defaults of the Server's timings.
const (
	// StartTimeout bounds how long the API server may take to become
	// ready (~4 s on an idle two-core machine; much more under load).
	StartTimeout = 90 * time.Second
	// StopGrace is how long each process gets after SIGTERM before SIGKILL.
	StopGrace = 10 * time.Second
)

// ErrNoBinaries reports that kube-apiserver or etcd (or, when asked for,
// kube-controller-manager) was not found.
var ErrNoBinaries = errors.New("kube-apiserver and etcd not found")

// ControllerManagerUser is the user kube-controller-manager authenticates
// as, with its own token: the user the API server's bootstrap RBAC policy
// binds the system:kube-controller-manager role to. With
// --use-service-account-credentials each controller then acts as its own
// service account in kube-system (system:controller:NAME roles).
const ControllerManagerUser = "system:kube-controller-manager"

// Option changes how Start starts the control plane.
type Option func(*options)

type options struct {
	controllerManager bool
	tokenWebhook      string
}

// WithTokenWebhook makes the API server authenticate bearer tokens it does
// not know (everything but the admin token) by asking url, a webhook token
// authenticator that answers TokenReview v1
// (--authentication-token-webhook-config-file), as EKS authenticates IAM
// principals. Answers are not cached
// (--authentication-token-webhook-cache-ttl=0), so a principal whose
// access is revoked is refused on its next request. Default: no webhook.
func WithTokenWebhook(url string) Option { return func(o *options) { o.tokenWebhook = url } }

// WithControllerManager also starts kube-controller-manager (from the same
// assets folder) with every default controller: the service account and
// token controllers, the namespace controller (a deleted namespace is
// emptied and goes), the garbage collector (owner references), and the
// Job, Deployment and ReplicaSet controllers (they create Pods, which stay
// Pending: there is no scheduler or kubelet). Start returns once the
// controllers run (the default ServiceAccount of the default namespace
// exists). Without it nothing plays the controllers: tests that need them
// write the objects and statuses themselves.
func WithControllerManager() Option {
	return func(o *options) { o.controllerManager = true }
}

// Server is a running etcd and kube-apiserver on loopback.
type Server struct {
	// Kubeconfig is a kubeconfig file for the admin user
	// (system:masters), usable by kubectl and clientcmd.
	Kubeconfig string
	// URL is the API server's https URL.
	URL string

	config *rest.Config
	// serviceIP is the kubernetes Service's ClusterIP, the first of the
	// server's service range: a node serves the API server there to its
	// pods.
	serviceIP         string
	dir               string
	etcd              *process
	apiserver         *process
	controllerManager *process
}

// Config returns a copy of the admin client configuration, without
// client-side rate limiting.
func (s *Server) Config() *rest.Config {
	return rest.CopyConfig(s.config)
}

// Dir is the server's working folder (certificates, logs, etcd data).
func (s *Server) Dir() string { return s.dir }

// Assets returns the folder holding the kube-apiserver and etcd binaries:
// NUON_KUBE_ASSETS, KUBEBUILDER_ASSETS, or the user cache folder that
// `make kube-binaries` fills. The error wraps ErrNoBinaries when none
// holds them.
func Assets() (string, error) {
	var tried []string
	for _, env := range []string{"NUON_KUBE_ASSETS", "KUBEBUILDER_ASSETS"} {
		if dir := os.Getenv(env); dir != "" {
			if hasBinaries(dir) {
				return dir, nil
			}
			tried = append(tried, env+"="+dir)
		}
	}
	if cache, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(cache, "nuon", "kube", Version)
		if hasBinaries(dir) {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	return "", fmt.Errorf("%w in %s: run `make kube-binaries`", ErrNoBinaries, strings.Join(tried, ", "))
}

func hasBinaries(dir string) bool {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if !executable(filepath.Join(dir, b)) {
			return false
		}
	}
	return true
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// adminToken is the bearer token of the admin user; the server listens on
// loopback only.
func adminToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start starts etcd and kube-apiserver from the binaries in assets, with
// their files in dir, and waits until the API server is ready; with
// WithControllerManager, kube-controller-manager too. Stop them with Stop.
func Start(ctx context.Context, assets, dir string, opts ...Option) (s *Server, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.controllerManager && !executable(filepath.Join(assets, "kube-controller-manager")) {
		return nil, fmt.Errorf("%w: no kube-controller-manager in %s: run `make kube-binaries`", ErrNoBinaries, assets)
	}
	s = &Server{dir: dir}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s.etcd, err = startProcess(filepath.Join(assets, "etcd"), filepath.Join(dir, "etcd.log"),
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=error",
	)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}

	token, kcmToken := adminToken(), adminToken()
	tokens := filepath.Join(dir, "tokens.csv")
	lines := token + ",admin,admin,system:masters\n" + kcmToken + "," + ControllerManagerUser + "," + ControllerManagerUser + "\n"
	if err := os.WriteFile(tokens, []byte(lines), 0o600); err != nil {
		return nil, err
	}
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeRSAKeyPair(saKey, saPub); err != nil {
		return nil, err
	}
	// The API server's client certificate to kubelets (logs, exec), from
	// a CA of this server's own: a node's kubelet trusts nothing else.
	kubeletClient := filepath.Join(dir, "kubelet-client")
	if err := writeClientCA(kubeletClient, "kube-apiserver-kubelet-client"); err != nil {
		return nil, err
	}
	port := ports[2]
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	// A service range of this server's own (10.96.0.0/11, a /24 of it at
	// random): its first address, in the serving certificate, is where a
	// node's pods reach this server, and two servers' nodes on one machine
	// must not both claim it.
	r := make([]byte, 2)
	_, _ = rand.Read(r)
	serviceNet := fmt.Sprintf("10.%d.%d.", 96+int(r[0])%32, r[1])
	s.serviceIP = serviceNet + "1"
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-cluster-ip-range=" + serviceNet + "0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--authorization-mode=RBAC",
		"--token-auth-file=" + tokens,
		"--kubelet-client-certificate=" + kubeletClient + ".crt",
		"--kubelet-client-key=" + kubeletClient + ".key",
		// A node's name (kubetest-HEX) resolves nowhere: reach its kubelet
		// by the address it reports.
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false",
		"--v=0",
	}
	if o.tokenWebhook != "" {
		file := filepath.Join(dir, "token-webhook.kubeconfig")
		if err := writeWebhookConfig(file, o.tokenWebhook); err != nil {
			return nil, err
		}
		args = append(args, "--authentication-token-webhook-config-file="+file,
			"--authentication-token-webhook-version=v1",
			"--authentication-token-webhook-cache-ttl=0s")
	}
	s.apiserver, err = startProcess(filepath.Join(assets, "kube-apiserver"), filepath.Join(dir, "apiserver.log"), args...)
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	if err := s.waitReady(ctx, token); err != nil {
		return nil, err
	}
	s.config = &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "certs", "apiserver.crt")},
		QPS:             -1, // no client-side rate limiting
	}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(s.Kubeconfig, s.config); err != nil {
		return nil, err
	}
	if o.controllerManager {
		if err := s.startControllerManager(ctx, assets, kcmToken, saKey); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// startControllerManager starts kube-controller-manager with a kubeconfig
// of its own (ControllerManagerUser), each controller acting as its own
// service account, and waits until the controllers run.
func (s *Server) startControllerManager(ctx context.Context, assets, token, saKey string) error {
	kubeconfig := filepath.Join(s.dir, "controller-manager.kubeconfig")
	cfg := s.Config()
	cfg.BearerToken = token
	if err := writeKubeconfig(kubeconfig, cfg); err != nil {
		return err
	}
	var err error
	s.controllerManager, err = startProcess(filepath.Join(assets, "kube-controller-manager"), filepath.Join(s.dir, "controller-manager.log"),
		"--kubeconfig="+kubeconfig,
		// No serving port: nothing scrapes it, and no port to collide.
		"--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+saKey,
		"--root-ca-file="+filepath.Join(s.dir, "certs", "apiserver.crt"),
		"--controllers=*",
		"--profiling=false",
		"--v=0",
	)
	if err != nil {
		return fmt.Errorf("start kube-controller-manager: %w", err)
	}
	return s.waitControllers(ctx)
}

// waitControllers waits until the service account controller made the
// default namespace's ServiceAccount: the controllers run.
func (s *Server) waitControllers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		return err
	}
	var last error
	for {
		_, last = cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if last == nil {
			return nil
		}
		if s.controllerManager.exited() {
			return fmt.Errorf("kube-controller-manager exited: %s", s.controllerManager.tail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager: controllers not running after %s (%v); its log: %s", StartTimeout, last, s.controllerManager.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady polls /readyz until the API server answers ok, one of the
// processes exits, or StartTimeout passes.
func (s *Server) waitReady(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	// The serving certificate is self-signed and written at start: its
	// file may not exist yet.
	hc := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer hc.CloseIdleConnections()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if _, err := os.Stat(filepath.Join(s.dir, "certs", "apiserver.crt")); err == nil {
					return nil
				}
			}
			last = fmt.Sprintf("%s: %s", resp.Status, lastLine(string(b)))
		} else {
			last = err.Error()
		}
		for _, p := range []*process{s.etcd, s.apiserver} {
			if p.exited() {
				return fmt.Errorf("%s exited before the API server was ready: %s", p.name, p.tail())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s (%s); its log: %s", StartTimeout, last, s.apiserver.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops kube-controller-manager (if it runs), then kube-apiserver,
// then etcd, and waits for each.
func (s *Server) Stop() error {
	var errs []error
	for _, p := range []*process{s.controllerManager, s.apiserver, s.etcd} {
		if p != nil {
			errs = append(errs, p.stop(StopGrace))
		}
	}
	return errors.Join(errs...)
}

// process is one child process with its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(bin, logFile string, args ...string) (*process, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that signals to the test's group (^C)
	// reach it only through Stop, in order; and killed if the test binary
	// dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{name: filepath.Base(bin), cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.name, grace)
}

// tail returns the end of the process's log.
func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeRSAKeyPair writes a new RSA key (PKCS#1) and its public key (PKIX)
// as PEM files: the service account signing keys.
func writeRSAKeyPair(keyFile, pubFile string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// writeKubeconfig writes cfg as a kubeconfig file with one context,
// "kubetest".
func writeKubeconfig(path string, cfg *rest.Config) error {
	ca, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*kc, path)
}

// writeWebhookConfig writes the kubeconfig the API server reads to reach a
// webhook token authenticator at url.
func writeWebhookConfig(path, url string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["webhook"] = &clientcmdapi.Cluster{Server: url}
	kc.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "webhook", AuthInfo: "apiserver"}
	kc.CurrentContext = "webhook"
	return clientcmd.WriteToFile(*kc, path)
}

// writeClientCA writes a CA (PREFIX-ca.crt) and a client certificate of
// user cn signed by it (PREFIX.crt, PREFIX.key), valid for a day.
func writeClientCA(prefix, cn string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest kubelet client CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for file, b := range map[string]*pem.Block{
		prefix + "-ca.crt": {Type: "CERTIFICATE", Bytes: caDER},
		prefix + ".crt":    {Type: "CERTIFICATE", Bytes: der},
		prefix + ".key":    {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(b), 0o600); err != nil {
			return err
		}
	}
	return nil
}
