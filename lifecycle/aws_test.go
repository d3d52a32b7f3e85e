package lifecycle

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/stack"
)

const (
	tenantKey    = "AKIATENANT0000000001"
	tenantSecret = "tenant-secret-not-for-logs"
	customer     = "222222222222"
	externalID   = "nuon-test-external-id-0000000001"
)

// boundary stands in for the first AWS endpoints terraform's S3 backend
// calls (STS GetCallerIdentity, S3): it records the access key each
// request is signed with and refuses it, as AWS would a key it does not
// know. It is where the test stops: real AWS is not reachable.
type boundary struct {
	mu   sync.Mutex
	keys []string
	URL  string
}

var credentialRe = regexp.MustCompile(`Credential=([A-Z0-9]+)/`)

func newBoundary(t *testing.T) *boundary {
	b := &boundary{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := credentialRe.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
			b.mu.Lock()
			b.keys = append(b.keys, m[1])
			b.mu.Unlock()
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`<ErrorResponse><Error><Type>Sender</Type><Code>InvalidClientTokenId</Code><Message>The security token included in the request is invalid.</Message></Error><RequestId>1</RequestId></ErrorResponse>`))
	}))
	t.Cleanup(srv.Close)
	b.URL = srv.URL
	return b
}

func (b *boundary) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.keys...)
}

func awsOptions(t testing.TB, sts string) Options {
	t.Helper()
	render := t.TempDir() + "/render.pub"
	writeFile(t, render, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv render\n")
	return Options{
		ID: "acme", Repo: t.TempDir(), Dir: t.TempDir(), Cloud: CloudAWS, Channel: "stable", RenderKey: render,
		AWS: AWSOptions{
			Account: customer, ExternalID: externalID, Region: "eu-west-1",
			AvailabilityZones: []string{"eu-west-1a", "eu-west-1b"}, Domain: "acme.example.com",
			StateBucket: "nuon-acme-state-x", STSEndpoint: sts, Timeout: 2 * time.Second,
			Tenant: aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider(tenantKey, tenantSecret, "")},
		},
	}
}

// TestCreateAWSUpToTheBoundary runs Create --cloud aws against the STS
// stand-in: the provision role is assumed with the install's ExternalId,
// and terraform's S3 backend signs its first requests with the assumed
// role's key (never the tenant's), where the test stops. A wrong
// ExternalId is refused before terraform runs; an STS that never answers
// fails within the deadline.
func TestCreateAWSUpToTheBoundary(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	sts := ststest.New(t)
	sts.AddCaller(tenantKey, "arn:aws:iam::111111111111:user/tenant")
	sts.AddRole(ststest.Role{ARN: "arn:aws:iam::" + customer + ":role/nuon-acme-provision", TrustedAccount: "111111111111", ExternalID: externalID})

	t.Run("credentials reach terraform", func(t *testing.T) {
		edge := newBoundary(t)
		t.Setenv("AWS_ENDPOINT_URL_STS", edge.URL)
		t.Setenv("AWS_ENDPOINT_URL_S3", edge.URL)
		t.Setenv("AWS_ACCESS_KEY_ID", tenantKey) // the tenant's own, which terraform must not get
		t.Setenv("AWS_SECRET_ACCESS_KEY", tenantSecret)
		o := awsOptions(t, sts.URL)
		var phases []string
		o.Progress = func(e Event) { phases = append(phases, e.Phase) }
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := Create(ctx, o)
		if err == nil || !strings.Contains(err.Error(), "terraform init") {
			t.Fatalf("Create: %v, want a terraform init error at the boundary", err)
		}
		if d := cmp.Diff([]string{"keys"}, phases); d != "" {
			t.Errorf("phases (-want +got):\n%s", d)
		}
		calls := sts.Calls()
		if len(calls) != 1 || calls[0].ExternalID != externalID || calls[0].RoleSessionName != "nuon-install-acme" || calls[0].Code != "" {
			t.Fatalf("STS calls: %+v", calls)
		}
		issued := sts.Issued()
		seen := edge.seen()
		if len(seen) == 0 {
			t.Fatal("terraform made no signed request at the boundary")
		}
		for _, k := range seen {
			if k != issued[0].AccessKeyID {
				t.Errorf("terraform signed with %s, want the assumed role's %s", k, issued[0].AccessKeyID)
			}
		}
		for _, secret := range []string{issued[0].SecretAccessKey, issued[0].SessionToken, tenantSecret} {
			if strings.Contains(err.Error(), secret) {
				t.Error("the error names a secret")
			}
		}
	})

	t.Run("wrong external id", func(t *testing.T) {
		edge := newBoundary(t)
		t.Setenv("AWS_ENDPOINT_URL_STS", edge.URL)
		t.Setenv("AWS_ENDPOINT_URL_S3", edge.URL)
		o := awsOptions(t, sts.URL)
		o.AWS.ExternalID = "nuon-guessed"
		err := Create(context.Background(), o)
		if !errors.Is(err, stack.ErrAccessDenied) {
			t.Fatalf("Create: %v, want access denied", err)
		}
		if len(edge.seen()) != 0 {
			t.Error("terraform ran after a refused AssumeRole")
		}
	})

	t.Run("deadline", func(t *testing.T) {
		o := awsOptions(t, ststest.BlackHole(t))
		start := time.Now()
		err := Create(context.Background(), o)
		if !errors.Is(err, stack.ErrTimeout) {
			t.Fatalf("Create: %v, want a timeout", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("took %s with a 2s deadline", d)
		}
	})
}
