package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/testenv"
)

// The package's shared server, started by the first Shared call.
var shared struct {
	once sync.Once
	srv  *Server
	dir  string
	err  error
}

// Main runs the package's tests and then stops the shared server, if a
// test started one. Call it from TestMain; it does not return.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with its own cleanup after the tests: it
// returns the code to exit with.
func Run(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "kubetest:", err)
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// Shared returns the package's API server, starting it on first use. The
// package's TestMain must call Main, which stops it. Without the binaries
// the test is skipped, or fails in CI (see internal/testenv).
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		assets, err := Assets()
		if err != nil {
			shared.err = err
			return
		}
		dir, err := os.MkdirTemp("", "kubetest-")
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = dir
		began := time.Now()
		shared.srv, shared.err = Start(context.Background(), assets, dir)
		if shared.err == nil && testing.Verbose() {
			fmt.Fprintf(os.Stderr, "kubetest: kube-apiserver %s ready at %s in %s\n", Version, shared.srv.URL, time.Since(began).Round(time.Millisecond))
		}
	})
	if errors.Is(shared.err, ErrNoBinaries) {
		testenv.Missing(t, "%v", shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// Clientset returns a typed client for the admin user.
func (s *Server) Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace creates a namespace with a unique name derived from the test's
// and returns the name. It is deleted when the test ends; without a
// controller manager it then stays Terminating, which keeps names unique.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := dnsLabel(t.Name(), 50) + "-" + hex.EncodeToString(b)
	cs := s.Clientset(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// dnsLabel turns s into a DNS label of at most n characters.
func dnsLabel(s string, n int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= n {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "test"
	}
	return out
}

// New starts a server of the test's own, stopped when the test ends. Use it
// where a package's TestMain cannot call Main, or with options the shared
// server lacks (WithControllerManager); prefer Shared otherwise. It skips
// or fails without the binaries as Shared does.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	assets, err := Assets()
	if errors.Is(err, ErrNoBinaries) {
		testenv.Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(context.Background(), assets, dir, opts...)
	if errors.Is(err, ErrNoBinaries) {
		os.RemoveAll(dir)
		testenv.Missing(t, "%v", err)
	}
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
	})
	return srv
}

// Kubectl returns the kubectl of the API server's version (Version) that
// `make kube-binaries` builds beside kube-apiserver, for tests and
// benchmarks that compare with it. A kubectl found elsewhere is not used:
// its version would differ from the server's. Without it the test is
// skipped, or fails in CI (see internal/testenv).
func Kubectl(t testing.TB) string {
	t.Helper()
	assets, err := Assets()
	if err != nil {
		testenv.Missing(t, "no kubectl: %v", err)
		return ""
	}
	kubectl := filepath.Join(assets, "kubectl")
	out, err := exec.Command(kubectl, "version", "--client", "-o", "json").Output()
	if err != nil {
		testenv.Missing(t, "no kubectl %s in %s (%v): run `make kube-binaries`", Version, assets, err)
		return ""
	}
	var v struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.ClientVersion.GitVersion != Version {
		testenv.Missing(t, "%s is kubectl %q, not %s (%v): run `make kube-binaries`", kubectl, v.ClientVersion.GitVersion, Version, err)
		return ""
	}
	return kubectl
}
