package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/elbtest"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/ststest"
)

// TestInstallDeleteAWS checks `nuon install delete --cloud aws`'s flags
// and errors, in process, against the STS and ELB stand-ins: what it
// needs is asked for, a wrong ExternalId is refused, and a load balancer
// that a controller left makes it fail naming it, after the progress of
// the phases it ran (-o json).
func TestInstallDeleteAWS(t *testing.T) {
	const tenantKey, customer, externalID = "AKIATENANT0000000002", "222222222222", "nuon-cmd-test-external-id-000001"
	t.Setenv("AWS_ACCESS_KEY_ID", tenantKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "tenant-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	sts := ststest.New(t)
	sts.AddCaller(tenantKey, "arn:aws:iam::111111111111:user/tenant")
	sts.AddRole(ststest.Role{ARN: "arn:aws:iam::" + customer + ":role/nuon-acme-deprovision", TrustedAccount: "111111111111", ExternalID: externalID})
	elb := elbtest.New(t)
	elb.Add(elbtest.LoadBalancer{Name: "k8s-shop-api-0f1e2d", Type: elbtest.Application, VPC: "vpc-1", Tags: map[string]string{"elbv2.k8s.aws/cluster": "nuon-acme"}})

	repo := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, repo)
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "installs"), 0o755)
	os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), []byte("channel: stable\n"), 0o644)
	gittest.CommitDir(t, repo, "main", src, "acme")

	args := func(drop string, extra ...string) []string {
		base := []string{"install", "delete", "acme", "--cloud", "aws", "--repo", repo, "--dir", t.TempDir(),
			"--account", customer, "--external-id", externalID, "--region", "eu-west-1",
			"--availability-zones", "eu-west-1a,eu-west-1b", "--domain", "acme.example.com", "--state-bucket", "nuon-acme-state-x",
			"--sts-endpoint", sts.URL, "--elb-endpoint", elb.URL, "--ecr-endpoint", "http://127.0.0.1:1", "--aws-timeout", "5s"}
		var out []string
		for i := 0; i < len(base); i++ {
			if base[i] == drop {
				i++
				continue
			}
			out = append(out, base[i])
		}
		return append(out, extra...)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no account", args("--account"), "needs the account, ExternalId, region and state bucket"},
		{"no state bucket", args("--state-bucket"), "needs the account, ExternalId, region and state bucket"},
		{"no zones", args("--availability-zones"), "availability zones"},
		{"no domain", args("--domain"), "availability zones and a domain"},
		{"unknown cloud", args("", "--cloud", "gcp"), `unknown cloud "gcp"`},
		{"bad output", args("", "-o", "yaml"), "--output"},
		{"bad wait", args("", "--load-balancer-wait", "soon"), "load-balancer-wait"},
		{"wrong external id", args("--external-id", "--external-id", "nuon-guessed-external-id-00001"), "access denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runNuon(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}

	t.Run("load balancer left", func(t *testing.T) {
		out, _, err := runNuon(t, args("", "--load-balancer-wait", "200ms", "-o", "json")...)
		if err == nil || !strings.Contains(err.Error(), "k8s-shop-api-0f1e2d") || !strings.Contains(err.Error(), "elbv2.k8s.aws/cluster=nuon-acme") {
			t.Fatalf("err = %v, want one naming the load balancer and its tag", err)
		}
		var phases []string
		for _, e := range installEvents(t, out) {
			phases = append(phases, e.Phase)
		}
		if d := cmp.Diff([]string{"mark-deleted", "components", "deprovision-role"}, phases); d != "" {
			t.Errorf("phases (-want +got):\n%s", d)
		}
		if calls := sts.Calls(); calls[len(calls)-1].ExternalID != externalID || calls[len(calls)-1].RoleARN != "arn:aws:iam::"+customer+":role/nuon-acme-deprovision" {
			t.Errorf("last STS call %+v", calls[len(calls)-1])
		}
	})
}
