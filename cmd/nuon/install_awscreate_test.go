package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nuon.dev/nuon/internal/ekstest"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/ststest"
)

// TestInstallCreateAWSAgent runs `nuon install create --cloud aws` through
// the agent phase against the AWS boundary: STS and EKS stand-ins
// speaking the SDK's wire protocols and a real kube-apiserver that
// authenticates EKS tokens through the EKS stand-in's webhook. Terraform
// cannot reach AWS here, so the install starts from recorded sandbox
// outputs (sandbox/outputs.json, as the sandbox phase leaves them) and
// runs the keys and agent phases (--phase). The agent's manifests land in
// the cluster, the provision role's access entry is gone afterwards, the
// tenant's secret is never printed, and a second run changes nothing. A
// run killed with its access entry made leaves it; the next removes it.
func TestInstallCreateAWSAgent(t *testing.T) {
	const (
		customer   = "222222222222"
		externalID = "nuon-test-external-id-0000000001"
		tenantKey  = "AKIATENANT0000000001"
		secret     = "tenant-secret-not-for-output"
		cluster    = "nuon-acme"
		ecr        = customer + ".dkr.ecr.eu-west-1.amazonaws.com"
	)
	role := "arn:aws:iam::" + customer + ":role/nuon-acme-provision"
	sts := ststest.New(t)
	sts.AddCaller(tenantKey, "arn:aws:iam::111111111111:user/tenant")
	sts.AddRole(ststest.Role{ARN: role, TrustedAccount: "111111111111", ExternalID: externalID})
	eks := ekstest.New(t, sts.URL)
	kube := kubetest.New(t, kubetest.WithTokenWebhook(eks.WebhookURL(cluster)))
	ca, err := os.ReadFile(filepath.Join(kube.Dir(), "certs", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	eks.AddCluster(ekstest.Cluster{Name: cluster, ARN: "arn:aws:eks:eu-west-1:" + customer + ":cluster/" + cluster,
		Endpoint: kube.URL, CA: ca, PublicAccess: true, PublicAccessCIDRs: []string{"203.0.113.7/32"}})

	bare := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, bare)
	dir := filepath.Join(t.TempDir(), "acme")
	outs, _ := json.Marshal(map[string]any{
		"cluster":  map[string]any{"name": cluster, "endpoint": kube.URL, "arn": "arn:aws:eks:eu-west-1:" + customer + ":cluster/" + cluster},
		"registry": map[string]any{"url": ecr, "repository_prefix": "nuon/acme", "region": "eu-west-1"},
	})
	if err := os.MkdirAll(filepath.Join(dir, "sandbox"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sandbox", "outputs.json"), outs, 0o644); err != nil {
		t.Fatal(err)
	}

	env := []string{"AWS_ACCESS_KEY_ID=" + tenantKey, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
	args := []string{"install", "create", "acme", "--cloud", "aws", "--repo", bare, "--dir", dir,
		"--channel", "stable", "--render-key", filepath.Join(repoRoot(), "fixtures", "keys", "render.pub"),
		"--account", customer, "--external-id", externalID, "--region", "eu-west-1",
		"--availability-zones", "eu-west-1a,eu-west-1b", "--domain", "acme.example.com", "--state-bucket", "nuon-acme-state-x",
		"--sts-endpoint", sts.URL, "--eks-endpoint", eks.URL, "--bootstrap-cidr", "203.0.113.7/32", "--aws-timeout", "5s",
		"--phase", "keys", "--phase", "agent", "-o", "json"}

	out := nuon(t, env, 0, args...)
	var got []string
	for _, e := range installEvents(t, out) {
		got = append(got, e.Phase+" "+e.Result)
	}
	if d := cmp.Diff([]string{"keys done", "agent done"}, got); d != "" {
		t.Fatalf("phases (-want +got):\n%s\n%s", d, out)
	}
	if strings.Contains(out, secret) {
		t.Error("the tenant's secret was printed")
	}
	ctx := context.Background()
	cs := kube.Clientset(t)
	d, err := cs.AppsV1().Deployments("nuon-system").Get(ctx, "nuon-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--registry="+ecr) {
		t.Errorf("agent args: %v", c.Args)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "agent.key"))
	s, err := cs.CoreV1().Secrets("nuon-system").Get(ctx, "nuon-agent-key", metav1.GetOptions{})
	if err != nil || len(key) == 0 || string(s.Data["agent.key"]) != string(key) {
		t.Errorf("nuon-agent-key does not hold the install's key (%v)", err)
	}
	if e := eks.AccessEntries(cluster); len(e) != 0 {
		t.Errorf("access entries left: %+v", e)
	}
	for _, a := range eks.Auths() {
		if a.User != "" && !strings.Contains(a.User, ":assumed-role/nuon-acme-provision/") {
			t.Errorf("the cluster let in %s", a.User)
		}
	}

	out = nuon(t, env, 0, args...)
	got = nil
	for _, e := range installEvents(t, out) {
		got = append(got, e.Phase+" "+e.Result)
	}
	if d := cmp.Diff([]string{"keys unchanged", "agent unchanged"}, got); d != "" {
		t.Errorf("second run (-want +got):\n%s", d)
	}

	// Killed while it waits for its access entry to take effect: the
	// entry stays; the next run reuses it and removes it.
	eks.SetPropagation(time.Hour)
	cmd := exec.Command(nuonBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(eks.AccessEntries(cluster)) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if e := eks.AccessEntries(cluster); len(e) != 1 || e[0].PrincipalARN != role {
		t.Fatalf("after the kill, access entries %+v, want the provision role's", e)
	}
	eks.SetPropagation(0)
	before := len(eks.Calls())
	out = nuon(t, env, 0, args...)
	if e := eks.AccessEntries(cluster); len(e) != 0 {
		t.Errorf("the run after the kill left access entries: %+v", e)
	}
	if !slices.ContainsFunc(eks.Calls()[before:], func(c ekstest.Call) bool { return c.Op == "CreateAccessEntry" && c.Code == "ResourceInUseException" }) {
		t.Errorf("the run after the kill did not find the entry it left: %+v", eks.Calls()[before:])
	}

	// A phase that does not exist is refused.
	nuon(t, env, 1, append(args[:len(args)-2:len(args)-2], "--phase", "agnet")...)
}
