package lifecycle

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/ecrtest"
	"nuon.dev/nuon/internal/elbtest"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/stack"
)

// tenantMain makes a bare tenant repository whose main has
// installs/acme.yaml, never rendered.
func tenantMain(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "installs", "acme.yaml"), "channel: stable\ncloud: aws\n")
	gittest.CommitDir(t, dir, "main", src, "acme")
	return dir
}

// TestDeleteAWSUpToTheBoundary runs Delete --cloud aws against the STS,
// ELB and ECR stand-ins, up to terraform destroy, which stops at the
// boundary as Create's apply does (real AWS is not reachable): the
// deprovision role is assumed with the install's ExternalId (a wrong one
// is refused before anything else); load balancers that controllers made
// make it wait, then fail naming each, and a re-run once they are gone
// continues; the install's ECR repositories are deleted, images and all,
// and no other's; every call is signed with the deprovision role's key,
// is one its policy allows, and terraform gets that key and no other; an
// endpoint that never answers fails within the deadline.
func TestDeleteAWSUpToTheBoundary(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	sts := ststest.New(t)
	sts.AddCaller(tenantKey, "arn:aws:iam::111111111111:user/tenant")
	sts.AddRole(ststest.Role{ARN: "arn:aws:iam::" + customer + ":role/nuon-acme-deprovision", TrustedAccount: "111111111111", ExternalID: externalID})
	elb := elbtest.New(t, elbtest.WithPageSize(2))
	elb.AccountID = customer
	registry := ecrtest.New(t, ocitest.Start(t, ocitest.Options{TLS: true, Username: "nuon", Password: "install-secret"}))
	registry.AccountID = customer
	repo := tenantMain(t)
	dir := t.TempDir()
	options := func(t *testing.T) (Options, *[]Event) {
		o := awsOptions(t, sts.URL)
		o.Repo, o.Dir = repo, dir
		o.AWS.ELBEndpoint, o.AWS.ECREndpoint = elb.URL, registry.Endpoint
		o.AWS.LoadBalancerWait = time.Second
		var events []Event
		o.Progress = func(e Event) { events = append(events, e) }
		return o, &events
	}
	phases := func(events []Event) []string {
		var out []string
		for _, e := range events {
			out = append(out, e.Phase+" "+e.Result)
		}
		return out
	}
	// The boundary for terraform's S3 backend.
	edge := newBoundary(t)
	t.Setenv("AWS_ENDPOINT_URL_STS", edge.URL)
	t.Setenv("AWS_ENDPOINT_URL_S3", edge.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", tenantKey) // the tenant's own, which terraform must not get
	t.Setenv("AWS_SECRET_ACCESS_KEY", tenantSecret)

	t.Run("wrong external id", func(t *testing.T) {
		o, events := options(t)
		o.AWS.ExternalID = "nuon-guessed-external-id-000001"
		err := Delete(context.Background(), o, nil)
		if !errors.Is(err, stack.ErrAccessDenied) {
			t.Fatalf("Delete: %v, want access denied", err)
		}
		if d := cmp.Diff([]string{"mark-deleted done", "components unchanged"}, phases(*events)); d != "" {
			t.Errorf("phases (-want +got):\n%s", d)
		}
		if n := len(elb.Calls()); n != 0 {
			t.Errorf("%d ELB calls after a refused AssumeRole", n)
		}
		if !strings.Contains(gittest.Git(t, repo, "show", "main:installs/acme.yaml"), "deleted: true") {
			t.Error("installs/acme.yaml on main is not marked deleted")
		}
	})

	// What controllers made for the shop's Ingress and Service, and a load
	// balancer of someone else's.
	elb.Add(elbtest.LoadBalancer{Name: "k8s-shop-api-1a2b3c", Type: elbtest.Application, VPC: "vpc-0acme", Tags: map[string]string{"elbv2.k8s.aws/cluster": "nuon-acme"}})
	elb.Add(elbtest.LoadBalancer{Name: "a0b1c2d3e4", Type: elbtest.Classic, VPC: "vpc-0acme", Tags: map[string]string{"kubernetes.io/cluster/nuon-acme": "owned"}})
	elb.Add(elbtest.LoadBalancer{Name: "billing", Type: elbtest.Network, VPC: "vpc-0other"})
	elb.Add(elbtest.LoadBalancer{Name: "reports", Type: elbtest.Application, VPC: "vpc-0other", Tags: map[string]string{"elbv2.k8s.aws/cluster": "nuon-other"}})
	for _, n := range []string{"nuon/acme/shop/api", "nuon/acme/shop/charts/api", "nuon/acme/shop/network", "nuon/other/shop/api"} {
		createRepository(t, registry, n)
	}
	registry.PutImage(t, "nuon/acme/shop/api", "2.4.0")

	t.Run("load balancers left", func(t *testing.T) {
		o, events := options(t)
		start := time.Now()
		err := Delete(context.Background(), o, nil)
		left, ok := errors.AsType[*LoadBalancersLeftError](err)
		if !ok {
			t.Fatalf("Delete: %v, want a *LoadBalancersLeftError", err)
		}
		var names []string
		for _, lb := range left.LoadBalancers {
			names = append(names, lb.Name)
			if !strings.Contains(err.Error(), lb.Name) {
				t.Errorf("the error does not name %s: %v", lb.Name, err)
			}
		}
		if d := cmp.Diff([]string{"k8s-shop-api-1a2b3c", "a0b1c2d3e4"}, names); d != "" {
			t.Errorf("load balancers named (-want +got):\n%s", d)
		}
		if d := time.Since(start); d < time.Second || d > 20*time.Second {
			t.Errorf("failed after %s, want after the 1s wait", d)
		}
		if d := cmp.Diff([]string{"mark-deleted unchanged", "components unchanged", "deprovision-role done"}, phases(*events)); d != "" {
			t.Errorf("phases (-want +got):\n%s", d)
		}
		if n := registry.Calls()["DeleteRepository"]; n != 0 {
			t.Errorf("%d repositories deleted with load balancers left", n)
		}
	})

	t.Run("re-run after they go", func(t *testing.T) {
		o, events := options(t)
		o.AWS.LoadBalancerWait = time.Minute
		// The controllers finish deleting them while Delete waits.
		go func() {
			time.Sleep(500 * time.Millisecond)
			elb.Remove("k8s-shop-api-1a2b3c")
			elb.Remove("a0b1c2d3e4")
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := Delete(ctx, o, nil)
		if err == nil || !strings.Contains(err.Error(), "terraform init") {
			t.Fatalf("Delete: %v, want a terraform init error at the boundary", err)
		}
		if d := cmp.Diff([]string{"mark-deleted unchanged", "components unchanged", "deprovision-role done", "load-balancers done", "registry done"}, phases(*events)); d != "" {
			t.Errorf("phases (-want +got):\n%s", d)
		}
		left := registry.Repositories()
		slices.Sort(left)
		if d := cmp.Diff([]string{"nuon/other/shop/api"}, left); d != "" {
			t.Errorf("repositories left (-want +got):\n%s", d)
		}

		issued := sts.Issued()
		key := issued[len(issued)-1].AccessKeyID
		if got := registry.Signers("DeleteRepository"); !slices.Equal(got, []string{key}) {
			t.Errorf("DeleteRepository signed by %v, want the deprovision role's %s", got, key)
		}
		seen := edge.seen()
		if len(seen) == 0 {
			t.Fatal("terraform made no signed request at the boundary")
		}
		for _, k := range seen {
			if k != key {
				t.Errorf("terraform signed with %s, want the deprovision role's %s", k, key)
			}
		}
		for _, secret := range []string{issued[len(issued)-1].SecretAccessKey, issued[len(issued)-1].SessionToken, tenantSecret} {
			if strings.Contains(err.Error(), secret) {
				t.Error("the error names a secret")
			}
		}

		// Every call made with the role is one its policy allows.
		so := stack.Options{InstallID: "acme", TenantAccount: "111111111111", ExternalID: externalID}
		deprovision := map[string]bool{}
		for _, c := range issued {
			deprovision[c.AccessKeyID] = true
		}
		actions := map[string]bool{}
		for _, c := range elb.Calls() {
			if !deprovision[c.AccessKeyID] {
				t.Errorf("ELB %s signed by %s, not a deprovision key", c.Action, c.AccessKeyID)
			}
			actions["elasticloadbalancing:"+c.Action] = true
		}
		for op := range registry.Calls() {
			for _, k := range registry.Signers(op) {
				if deprovision[k] {
					actions["ecr:"+op] = true
				}
			}
		}
		for a := range actions {
			if !stack.Allows(so, stack.Deprovision, a) {
				t.Errorf("the deprovision role's policy does not allow %s, which delete calls", a)
			}
		}
		if !actions["elasticloadbalancing:DescribeTags"] || !actions["ecr:DeleteRepository"] {
			t.Errorf("actions %v", actions)
		}

		// Again: nothing left to wait for or delete.
		o, events = options(t)
		err = Delete(ctx, o, nil)
		if err == nil || !strings.Contains(err.Error(), "terraform init") {
			t.Fatalf("Delete again: %v, want a terraform init error at the boundary", err)
		}
		if d := cmp.Diff([]string{"mark-deleted unchanged", "components unchanged", "deprovision-role done", "load-balancers unchanged", "registry unchanged"}, phases(*events)); d != "" {
			t.Errorf("phases again (-want +got):\n%s", d)
		}
	})

	// terraform destroy cannot succeed here; it leaves DestroyedFile when
	// it does. A re-run then goes straight to the archive, even once the
	// customer deleted the stack (no role to assume any more).
	t.Run("after the sandbox is gone", func(t *testing.T) {
		o, events := options(t)
		o.Dir = t.TempDir()
		o.AWS.ExternalID = "nuon-stack-deleted-external-id-01"
		if err := os.MkdirAll(filepath.Join(o.Dir, "sandbox"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(o.Dir, DestroyedFile), "2026-11-23T23:00:00Z\n")
		calls := len(sts.Calls())
		if err := Delete(context.Background(), o, nil); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]string{"mark-deleted unchanged", "components unchanged", "deprovision-role unchanged", "load-balancers unchanged",
			"registry unchanged", "sandbox unchanged", "archive done"}, phases(*events)); d != "" {
			t.Errorf("phases (-want +got):\n%s", d)
		}
		if n := len(sts.Calls()); n != calls {
			t.Errorf("%d STS calls after the sandbox was destroyed", n-calls)
		}
		if _, err := gittest.Run(repo, nil, "cat-file", "-e", "main:installs/acme.yaml"); err == nil {
			t.Error("installs/acme.yaml is still on main")
		}
	})

	t.Run("deadline", func(t *testing.T) {
		o, _ := options(t)
		o.AWS.ELBEndpoint = ststest.BlackHole(t)
		start := time.Now()
		err := Delete(context.Background(), o, nil)
		if !errors.Is(err, stack.ErrTimeout) {
			t.Fatalf("Delete: %v, want a timeout", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("took %s with a 2s deadline", d)
		}
	})
}

// createRepository creates a repository as the agent does when it first
// copies an artifact in.
func createRepository(t *testing.T, registry *ecrtest.Server, name string) {
	t.Helper()
	api := ecr.New(ecr.Options{
		Region:       registry.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("ASIAAGENT", "agent-secret", "token"),
		BaseEndpoint: aws.String(registry.Endpoint),
	})
	if _, err := api.CreateRepository(context.Background(), &ecr.CreateRepositoryInput{RepositoryName: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
}
