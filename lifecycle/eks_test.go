package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/ekstest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/stack"
)

const (
	provisionRole = "arn:aws:iam::" + customer + ":role/nuon-acme-provision"
	clusterName   = "nuon-acme"
	ecrHost       = customer + ".dkr.ecr.eu-west-1.amazonaws.com"
)

// eksCloud is the AWS boundary of the agent bootstrap: STS, EKS and a real
// kube-apiserver that authenticates IAM principals through EKS's token
// webhook, as an EKS cluster does.
type eksCloud struct {
	sts  *ststest.Server
	eks  *ekstest.Server
	kube *kubetest.Server
}

func newEKSCloud(t testing.TB) *eksCloud {
	t.Helper()
	c := &eksCloud{sts: ststest.New(t)}
	c.sts.AddCaller(tenantKey, "arn:aws:iam::111111111111:user/tenant")
	c.sts.AddRole(ststest.Role{ARN: provisionRole, TrustedAccount: "111111111111", ExternalID: externalID})
	c.eks = ekstest.New(t, c.sts.URL)
	c.kube = kubetest.New(t, kubetest.WithTokenWebhook(c.eks.WebhookURL(clusterName)))
	ca, err := os.ReadFile(filepath.Join(c.kube.Dir(), "certs", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c.eks.AddCluster(ekstest.Cluster{Name: clusterName, ARN: "arn:aws:eks:eu-west-1:" + customer + ":cluster/" + clusterName,
		Endpoint: c.kube.URL, CA: ca, PublicAccess: true, PublicAccessCIDRs: []string{"203.0.113.7/32"}})
	return c
}

// eksInstall is an install whose keys exist and whose sandbox outputs
// are recorded, as the sandbox phase leaves them on AWS.
func eksInstall(t testing.TB, c *eksCloud) (*Options, *state) {
	t.Helper()
	o := awsOptions(t, c.sts.URL)
	o.AWS.EKSEndpoint = c.eks.URL
	o.AWS.BootstrapCIDRs = []string{"203.0.113.7/32"}
	o.AWS.AccessWait = 10 * time.Second
	o.AWS.KubeTimeout = 5 * time.Second
	o.GitTokenFile = filepath.Join(t.TempDir(), "git-token")
	writeFile(t, o.GitTokenFile, "git-token-for-the-tenant-repo\n")
	if err := o.defaults(true); err != nil {
		t.Fatal(err)
	}
	st := &state{}
	if _, _, err := keys(context.Background(), &o, st); err != nil {
		t.Fatal(err)
	}
	outs := map[string]any{
		"cluster":  map[string]any{"name": clusterName, "endpoint": c.kube.URL, "certificate_authority": "", "arn": "arn:aws:eks:eu-west-1:" + customer + ":cluster/" + clusterName},
		"registry": map[string]any{"url": ecrHost, "repository_prefix": "nuon/acme", "region": "eu-west-1"},
	}
	b, _ := json.Marshal(outs)
	if err := os.MkdirAll(o.path(SandboxDir), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, o.path(OutputsFile), string(b))
	return &o, &state{publicKey: st.publicKey}
}

// provisionCanReach tells whether the provision role, with a fresh EKS
// token, is let into the cluster (false: 401).
func provisionCanReach(t *testing.T, c *eksCloud, o *Options) bool {
	t.Helper()
	creds, err := o.assume(context.Background(), stack.Provision)
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{name: clusterName, endpoint: c.kube.URL}
	cl.ca, _ = os.ReadFile(filepath.Join(c.kube.Dir(), "certs", "apiserver.crt"))
	cs := kubernetes.NewForConfigOrDie(o.eksConfig(cl, creds))
	_, err = cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsUnauthorized(err) {
		t.Fatalf("provision role's request: %v", err)
	}
	return err == nil
}

func ops(calls []ekstest.Call) []string {
	var out []string
	for _, c := range calls {
		s := c.Op
		if c.Code != "" {
			s += " " + c.Code
		}
		out = append(out, s)
	}
	return out
}

// TestAWSAgentBootstrap runs the agent phase on AWS up to the cloud
// boundary: the provision role is refused by the cluster (401) until its
// access entry exists; with it, manifests/ are applied with EKS tokens;
// afterwards the entry is gone and the role is refused again. A run
// killed after CreateAccessEntry leaves an entry that the next run reuses
// and removes.
func TestAWSAgentBootstrap(t *testing.T) {
	c := newEKSCloud(t)
	o, st := eksInstall(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if provisionCanReach(t, c, o) {
		t.Fatal("the provision role reached the cluster without an access entry")
	}
	res, detail, err := startAgent(ctx, o, st)
	if err != nil || res != Done {
		t.Fatalf("agent phase: %s %s %v", res, detail, err)
	}
	issued := c.sts.Issued()
	for _, call := range c.eks.Calls() {
		if !slices.ContainsFunc(issued, func(i ststest.Credentials) bool { return i.AccessKeyID == call.AccessKey }) {
			t.Errorf("EKS %s signed by %q, not by the provision role", call.Op, call.AccessKey)
		}
	}
	if d := cmp.Diff([]string{"DescribeCluster", "CreateAccessEntry", "AssociateAccessPolicy", "DeleteAccessEntry", "ListAccessEntries"}, ops(c.eks.Calls())); d != "" {
		t.Errorf("EKS calls (-want +got):\n%s", d)
	}
	authed := 0
	for _, a := range c.eks.Auths() {
		if a.User != "" {
			authed++
			if a.User != "arn:aws:sts::"+customer+":assumed-role/nuon-acme-provision/nuon-install-acme" {
				t.Errorf("the cluster saw %s", a.User)
			}
		}
	}
	if authed == 0 {
		t.Error("the webhook authenticated nobody: the apply did not go through EKS authentication")
	}

	admin := kubernetes.NewForConfigOrDie(c.kube.Config())
	d, err := admin.AppsV1().Deployments(AgentNamespace).Get(ctx, "nuon-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--registry="+ecrHost) || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--registry-username") }) {
		t.Errorf("agent args: %v", args)
	}
	if mf := d.GetManagedFields(); len(mf) == 0 || mf[0].Manager != FieldManager {
		t.Errorf("managed fields: %+v", mf)
	}
	key, _ := os.ReadFile(o.path(KeyFile))
	s, err := admin.CoreV1().Secrets(AgentNamespace).Get(ctx, "nuon-agent-key", metav1.GetOptions{})
	if err != nil || string(s.Data["agent.key"]) != string(key) {
		t.Errorf("nuon-agent-key: %v", err)
	}
	if s, err := admin.CoreV1().Secrets(AgentNamespace).Get(ctx, "nuon-git", metav1.GetOptions{}); err != nil || string(s.Data["token"]) != "git-token-for-the-tenant-repo" {
		t.Errorf("nuon-git does not hold the repository token (%v)", err)
	}
	if _, err := admin.CoreV1().Secrets(AgentNamespace).Get(ctx, "nuon-registry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a registry password Secret for ECR: %v", err)
	}
	if e := c.eks.AccessEntries(clusterName); len(e) != 0 {
		t.Errorf("access entries left: %+v", e)
	}
	if provisionCanReach(t, c, o) {
		t.Error("the provision role still reaches the cluster after the bootstrap")
	}

	t.Run("killed run's entry is reused and removed", func(t *testing.T) {
		c.eks.PutAccessEntry(clusterName, ekstest.AccessEntry{PrincipalARN: provisionRole, Tags: map[string]string{"nuon.dev/purpose": "agent-bootstrap"}})
		before := len(c.eks.Calls())
		res, detail, err := startAgent(ctx, o, st)
		if err != nil || res != Unchanged {
			t.Fatalf("agent phase again: %s %s %v", res, detail, err)
		}
		if d := cmp.Diff([]string{"DescribeCluster", "CreateAccessEntry ResourceInUseException", "DescribeAccessEntry", "AssociateAccessPolicy", "DeleteAccessEntry", "ListAccessEntries"}, ops(c.eks.Calls()[before:])); d != "" {
			t.Errorf("EKS calls (-want +got):\n%s", d)
		}
		if e := c.eks.AccessEntries(clusterName); len(e) != 0 {
			t.Errorf("access entries left: %+v", e)
		}
	})

	t.Run("a standing entry is refused and left alone", func(t *testing.T) {
		standing := ekstest.AccessEntry{PrincipalARN: provisionRole, Policies: []ekstest.Policy{{ARN: "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy", Scope: "cluster"}}}
		c.eks.PutAccessEntry(clusterName, standing)
		_, _, err := startAgent(ctx, o, st)
		if !errors.Is(err, ErrStandingAccess) {
			t.Errorf("agent phase: %v, want a standing access refusal", err)
		}
		if d := cmp.Diff([]ekstest.AccessEntry{standing}, c.eks.AccessEntries(clusterName)); d != "" {
			t.Errorf("the standing entry changed (-want +got):\n%s", d)
		}
		if !c.eks.DeleteEntry(clusterName, provisionRole) {
			t.Fatal("the standing entry is gone")
		}
	})

	t.Run("waits for the entry to propagate", func(t *testing.T) {
		c.eks.SetPropagation(3 * time.Second)
		defer c.eks.SetPropagation(0)
		start := time.Now()
		if res, detail, err := startAgent(ctx, o, st); err != nil || res != Unchanged {
			t.Fatalf("agent phase: %s %s %v", res, detail, err)
		}
		if d := time.Since(start); d < 3*time.Second {
			t.Errorf("applied after %s, before the entry took effect", d)
		}
		o := *o
		o.AWS.AccessWait = time.Second
		_, _, err := startAgent(ctx, &o, st)
		if err == nil || !strings.Contains(err.Error(), "did not take effect within 1s") {
			t.Errorf("agent phase with a short wait: %v", err)
		}
		if e := c.eks.AccessEntries(clusterName); len(e) != 0 {
			t.Errorf("access entries left: %+v", e)
		}
	})

	t.Run("unreachable endpoint", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		refused := "https://" + l.Addr().String()
		l.Close()
		silent := strings.Replace(ststest.BlackHole(t), "http://", "https://", 1)
		ca, _ := os.ReadFile(filepath.Join(c.kube.Dir(), "certs", "apiserver.crt"))
		defer c.eks.AddCluster(ekstest.Cluster{Name: clusterName, Endpoint: c.kube.URL, CA: ca})
		for _, endpoint := range []string{refused, silent} {
			c.eks.AddCluster(ekstest.Cluster{Name: clusterName, Endpoint: endpoint, CA: ca, PublicAccess: false})
			start := time.Now()
			_, _, err = startAgent(ctx, o, st)
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "--bootstrap-cidr") {
				t.Errorf("%s: agent phase: %v, want unreachable naming --bootstrap-cidr", endpoint, err)
			}
			for _, i := range c.sts.Issued() {
				if err != nil && (strings.Contains(err.Error(), i.SecretAccessKey) || strings.Contains(err.Error(), i.SessionToken)) {
					t.Errorf("%s: the error names the role's credentials", endpoint)
				}
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("%s: took %s with a 5s request timeout", endpoint, d)
			}
			if e := c.eks.AccessEntries(clusterName); len(e) != 0 {
				t.Errorf("%s: a failed bootstrap left access entries: %+v", endpoint, e)
			}
		}
	})

	t.Run("EKS deadline", func(t *testing.T) {
		o := *o
		o.AWS.EKSEndpoint = ststest.BlackHole(t)
		start := time.Now()
		_, _, err := startAgent(ctx, &o, st)
		if !errors.Is(err, stack.ErrTimeout) {
			t.Errorf("agent phase: %v, want a timeout", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("took %s with a 2s deadline", d)
		}
	})
}

// TestAWSVarsEndpoint checks what terraform gets for the endpoint: the
// bootstrap CIDRs in the sandbox phase, none in the endpoint phase.
func TestAWSVarsEndpoint(t *testing.T) {
	o := awsOptions(t, "http://127.0.0.1:1")
	for _, tt := range []struct {
		name string
		open []string
		want string
	}{
		{"closed", nil, "public_access_cidrs=[]"},
		{"open", []string{"203.0.113.7/32", "198.51.100.0/28"}, `public_access_cidrs=["203.0.113.7/32","198.51.100.0/28"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vars := o.awsVars(tt.open)
			if !slices.Contains(vars, tt.want) {
				t.Errorf("vars %v lack %s", vars, tt.want)
			}
		})
	}
	// Without bootstrap CIDRs nothing was opened: the endpoint phase has
	// nothing to close and assumes no role.
	if res, _, err := closeEndpoint(context.Background(), &o, &state{}); err != nil || res != Unchanged {
		t.Errorf("endpoint phase without CIDRs: %s %v", res, err)
	}
}

// BenchmarkAWSAgentBootstrap is one agent phase on AWS with nothing to
// change in the cluster: AssumeRole, DescribeCluster, the access entry
// made, waited for, the apply (unchanged) with EKS tokens, the entry
// deleted and checked gone.
func BenchmarkAWSAgentBootstrap(b *testing.B) {
	c := newEKSCloud(b)
	o, st := eksInstall(b, c)
	ctx := context.Background()
	if _, _, err := startAgent(ctx, o, st); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := startAgent(ctx, o, st); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCloseEndpointUpToTheBoundary runs the endpoint phase with bootstrap
// CIDRs: it assumes the provision role and runs terraform with only its
// credentials, up to the AWS boundary (terraform's S3 backend).
func TestCloseEndpointUpToTheBoundary(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	sts := ststest.New(t)
	sts.AddCaller(tenantKey, "arn:aws:iam::111111111111:user/tenant")
	sts.AddRole(ststest.Role{ARN: provisionRole, TrustedAccount: "111111111111", ExternalID: externalID})
	edge := newBoundary(t)
	t.Setenv("AWS_ENDPOINT_URL_STS", edge.URL)
	t.Setenv("AWS_ENDPOINT_URL_S3", edge.URL)
	o := awsOptions(t, sts.URL)
	o.AWS.BootstrapCIDRs = []string{"203.0.113.7/32"}
	if err := o.defaults(true); err != nil {
		t.Fatal(err)
	}
	_, _, err := closeEndpoint(context.Background(), &o, &state{})
	if err == nil || !strings.Contains(err.Error(), "terraform init") {
		t.Fatalf("endpoint phase: %v, want a terraform init error at the boundary", err)
	}
	calls := sts.Calls()
	if len(calls) != 1 || calls[0].RoleARN != provisionRole || calls[0].Code != "" {
		t.Fatalf("STS calls: %+v", calls)
	}
	seen := edge.seen()
	if len(seen) == 0 || slices.ContainsFunc(seen, func(k string) bool { return k != sts.Issued()[0].AccessKeyID }) {
		t.Errorf("terraform signed with %v, want only the provision role's %s", seen, sts.Issued()[0].AccessKeyID)
	}
}

// TestTokenTransport checks that requests carry an EKS token made again
// before the presigned URL's 60 s expiry, and only then.
func TestTokenTransport(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	now := time.Unix(1_800_000_000, 0)
	made := 0
	tr := &tokenTransport{next: http.DefaultTransport, now: func() time.Time { return now },
		make: func(context.Context) (string, error) { made++; return fmt.Sprintf("k8s-aws-v1.token%d", made), nil }}
	client := &http.Client{Transport: tr}
	for _, step := range []time.Duration{0, 30 * time.Second, 20 * time.Second, 10 * time.Second} {
		now = now.Add(step)
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := []string{"Bearer k8s-aws-v1.token1", "Bearer k8s-aws-v1.token1", "Bearer k8s-aws-v1.token2", "Bearer k8s-aws-v1.token2"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Authorization headers (-want +got):\n%s", d)
	}
}

// TestAgentProcessGitToken checks that the agent process gets the
// repository token in its environment, never on its command line.
func TestAgentProcessGitToken(t *testing.T) {
	dir := t.TempDir()
	o := Options{ID: "globex", Repo: "https://git.vendor.example/tenant.git", Dir: dir, Channel: "beta", KubeAssets: "unused",
		RenderKey: filepath.Join(dir, "render.pub"), GitTokenFile: filepath.Join(dir, "git-token"),
		Agent: filepath.Join(dir, "fake-agent")}
	writeFile(t, o.RenderKey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv render\n")
	writeFile(t, o.GitTokenFile, "git-token-of-the-tenant\n")
	writeFile(t, filepath.Join(dir, "password"), "registry-password\n")
	// It records its environment and arguments and waits, as an agent would.
	writeFile(t, o.Agent, "#!/bin/sh\nenv > \""+dir+"/agent-env\"\necho \"$@\" > \""+dir+"/agent-args\"\nsleep 30\n")
	if err := os.Chmod(o.Agent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := o.defaults(true); err != nil {
		t.Fatal(err)
	}
	st := &state{outputs: &Outputs{}}
	st.outputs.Registry.URL, st.outputs.Registry.PasswordFile = "127.0.0.1:5000", filepath.Join(dir, "password")
	if _, _, err := keys(context.Background(), &o, st); err != nil {
		t.Fatal(err)
	}
	if _, _, err := startAgent(context.Background(), &o, st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = stopAgent(context.Background(), &o, 5*time.Second) })
	env, _ := os.ReadFile(filepath.Join(dir, "agent-env"))
	args, _ := os.ReadFile(filepath.Join(dir, "agent-args"))
	if !strings.Contains(string(env), "NUON_GIT_TOKEN=git-token-of-the-tenant\n") {
		t.Errorf("the agent's environment lacks the token")
	}
	if strings.Contains(string(args), "git-token-of-the-tenant") {
		t.Errorf("the token is on the agent's command line: %s", args)
	}
}
