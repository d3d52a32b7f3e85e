package sandboxes

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/testenv"
)

// localTools returns the terraformrc of the local/random provider mirror
// and the kube assets directory, after checking every tool the local
// sandbox runs. Without them the test skips, unless CI is set, when it
// fails.
func localTools(t *testing.T) (rc, assets string) {
	t.Helper()
	rc, assets = os.Getenv("NUON_TF_CLI_CONFIG"), os.Getenv("NUON_KUBE_ASSETS")
	var missing []string
	if _, err := os.Stat(rc); rc == "" || err != nil {
		missing = append(missing, "NUON_TF_CLI_CONFIG (make tf-providers)")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(assets, b)); assets == "" || err != nil {
			missing = append(missing, b+" in NUON_KUBE_ASSETS (make kube-binaries)")
		}
	}
	for _, b := range []string{"terraform", "docker-registry", "htpasswd", "openssl", "curl", "python3"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (make registry)")
		}
	}
	if len(missing) == 0 {
		return rc, assets
	}
	testenv.Missing(t, "the local sandbox needs %s", strings.Join(missing, ", "))
	return "", ""
}

// TestLocal applies sandboxes/local for real: the outputs contract with
// live values, a second apply that changes nothing, and a destroy that
// leaves no process and no file but the state.
func TestLocal(t *testing.T) {
	rc, assets := localTools(t)
	tmp := t.TempDir()
	mod, run, state := filepath.Join(tmp, "module"), filepath.Join(tmp, "run"), filepath.Join(tmp, "state")
	if err := Extract(Local, mod); err != nil {
		t.Fatal(err)
	}
	vars := []string{"-input=false", "-no-color", "-state=" + filepath.Join(state, "terraform.tfstate"),
		"-var", "install_id=acme", "-var", "dir=" + run, "-var", "kube_assets=" + assets}
	tf := func(args ...string) (string, error) {
		out, _, err := terraform(t, rc, mod, args...)
		return out, err
	}
	if out, err := tf("init", "-input=false", "-no-color"); err != nil {
		t.Fatalf("terraform init: %v\n%s", err, out)
	}
	destroyed := false
	t.Cleanup(func() {
		if destroyed {
			return
		}
		if out, err := tf(append([]string{"destroy", "-auto-approve"}, vars...)...); err != nil {
			t.Errorf("terraform destroy (cleanup): %v\n%s", err, out)
			_ = exec.Command(filepath.Join(mod, "kube-down.sh"), filepath.Join(run, "kube")).Run()
			_ = exec.Command(filepath.Join(mod, "registry.sh"), "down", filepath.Join(run, "registry")).Run()
		}
	})
	if out, err := tf(append([]string{"apply", "-auto-approve"}, vars...)...); err != nil {
		t.Fatalf("terraform apply: %v\n%s", err, out)
	}

	out, err := tf("output", "-json", "-state="+filepath.Join(state, "terraform.tfstate"))
	if err != nil {
		t.Fatalf("terraform output: %v\n%s", err, out)
	}
	var outputs map[string]struct {
		Value map[string]any `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &outputs); err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for name, o := range outputs {
		for k := range o.Value {
			keys[name] = append(keys[name], k)
		}
		sort.Strings(keys[name])
	}
	want := map[string][]string{
		"cluster":  {"arn", "certificate_authority", "endpoint", "kubeconfig", "name"},
		"vpc":      {"id", "private_subnet_ids", "public_subnet_ids"},
		"registry": {"ca_file", "password_file", "region", "repository_prefix", "url", "username"},
		"dns":      {"domain", "private_zone_id", "public_zone_id"},
		"agent":    {"namespace", "role_arn", "service_account"},
	}
	if d := cmp.Diff(want, keys); d != "" {
		t.Errorf("outputs (-want +got):\n%s", d)
	}
	str := func(o, k string) string { s, _ := outputs[o].Value[k].(string); return s }
	for _, c := range []struct{ o, k, want string }{
		{"cluster", "name", "nuon-acme"},
		{"registry", "repository_prefix", "nuon/acme"},
		{"dns", "domain", "acme.nuon.localhost"},
		{"agent", "namespace", "nuon-system"},
		{"agent", "service_account", "nuon-agent"},
	} {
		if got := str(c.o, c.k); got != c.want {
			t.Errorf("%s.%s = %q, want %q", c.o, c.k, got, c.want)
		}
	}

	// The API server answers over TLS with the CA the output gives.
	ca, err := base64.StdEncoding.DecodeString(str("cluster", "certificate_authority"))
	if err != nil {
		t.Fatalf("cluster.certificate_authority: %v", err)
	}
	if code := get(t, ca, str("cluster", "endpoint")+"/readyz", "", ""); code != http.StatusOK {
		t.Errorf("GET %s/readyz: %d, want 200", str("cluster", "endpoint"), code)
	}
	// The registry wants basic auth, over TLS with its own CA.
	regCA, err := os.ReadFile(str("registry", "ca_file"))
	if err != nil {
		t.Fatal(err)
	}
	pw, err := os.ReadFile(str("registry", "password_file"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(str("registry", "password_file")); fi.Mode().Perm() != 0o600 {
		t.Errorf("password file mode %v, want 0600", fi.Mode().Perm())
	}
	reg := "https://" + str("registry", "url") + "/v2/"
	if code := get(t, regCA, reg, "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET %s without credentials: %d, want 401", reg, code)
	}
	if code := get(t, regCA, reg, "nuon", string(pw)); code != http.StatusOK {
		t.Errorf("GET %s with credentials: %d, want 200", reg, code)
	}
	if code := get(t, regCA, reg, "nuon", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("GET %s with a wrong password: %d, want 401", reg, code)
	}
	if strings.Contains(readAll(t, state), strings.TrimSpace(string(pw))) {
		t.Error("the registry password is in the terraform state")
	}

	// Apply twice is a no-op.
	out, err = tf(append([]string{"plan", "-detailed-exitcode"}, vars...)...)
	if err != nil {
		t.Fatalf("terraform plan after apply wants changes (%v):\n%s", err, out)
	}

	pids := map[string]int{}
	for _, f := range []string{"kube/etcd.pid", "kube/kube-apiserver.pid", "registry/pid"} {
		b, err := os.ReadFile(filepath.Join(run, f))
		if err != nil {
			t.Fatal(err)
		}
		pids[f], _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	destroyed = true
	if out, err := tf(append([]string{"destroy", "-auto-approve"}, vars...)...); err != nil {
		t.Fatalf("terraform destroy: %v\n%s", err, out)
	}
	for f, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s: process %d still runs after destroy", f, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("%s is left after destroy (%v)", run, err)
	}
	var left []string
	entries, _ := os.ReadDir(state)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if d := cmp.Diff([]string{"terraform.tfstate", "terraform.tfstate.backup"}, left); d != "" {
		t.Errorf("state directory after destroy (-want +got):\n%s", d)
	}
}

// get returns the status of GET url, trusting only the PEM ca, with basic
// auth when user is set.
func get(t *testing.T, ca []byte, url, user, password string) int {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in the CA for %s", url)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readAll concatenates every file in dir.
func readAll(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		c, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.Write(c)
	}
	return b.String()
}
