package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/terraform-exec/tfexec"

	"nuon.dev/nuon/internal/ststest"
)

const (
	tenantKey    = "AKIATENANT0000000001"
	tenantSecret = "tenant-secret-not-for-logs"
	tenantARN    = "arn:aws:iam::111111111111:user/tenant"
	roleARN      = "arn:aws:iam::222222222222:role/nuon-acme-provision"
	externalID   = "nuon-test-external-id-0000000001"
)

// sts serves a stand-in STS that knows the tenant and the install's
// provision role.
func stsServer(t *testing.T) *ststest.Server {
	s := ststest.New(t)
	s.AddCaller(tenantKey, tenantARN)
	s.AddRole(ststest.Role{ARN: roleARN, TrustedAccount: "111111111111", ExternalID: externalID})
	return s
}

// tenantConfig is the tenant's SDK configuration: static keys, no
// metadata service, no shared files.
func tenantConfig() aws.Config {
	return aws.Config{
		Region:      "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider(tenantKey, tenantSecret, ""),
	}
}

func TestAssumeRole(t *testing.T) {
	s := stsServer(t)
	creds, err := AssumeRole(context.Background(), tenantConfig(), roleARN, externalID, WithEndpoint(s.URL), WithSessionName("nuon-install-acme"))
	if err != nil {
		t.Fatal(err)
	}
	issued := s.Issued()
	if len(issued) != 1 {
		t.Fatalf("%d credentials issued, want 1", len(issued))
	}
	want := &Credentials{RoleARN: roleARN, AccessKeyID: issued[0].AccessKeyID, SecretAccessKey: issued[0].SecretAccessKey,
		SessionToken: issued[0].SessionToken, Region: "eu-west-1", Expires: issued[0].Expiration}
	if diff := cmp.Diff(want, creds, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	calls := s.Calls()
	if diff := cmp.Diff([]ststest.Call{{Action: "AssumeRole", RoleARN: roleARN, RoleSessionName: "nuon-install-acme", ExternalID: externalID, Caller: tenantARN}}, calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	env := creds.Env()
	if env["AWS_ACCESS_KEY_ID"] != issued[0].AccessKeyID || env["AWS_SECRET_ACCESS_KEY"] != issued[0].SecretAccessKey || env["AWS_SESSION_TOKEN"] != issued[0].SessionToken || env["AWS_REGION"] != "eu-west-1" {
		t.Errorf("Env() = %v, not the issued credentials", env)
	}
	// Printing or logging the credentials never shows the secrets.
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("assumed", "creds", creds)
	for _, shown := range []string{fmt.Sprint(creds), fmt.Sprintf("%v %+v %#v %s", creds, creds, creds, creds), logs.String()} {
		for _, secret := range []string{creds.SecretAccessKey, creds.SessionToken} {
			if strings.Contains(shown, secret) {
				t.Errorf("credentials shown with a secret: %s", shown)
			}
		}
	}
}

func TestAssumeRoleRefused(t *testing.T) {
	s := stsServer(t)
	tests := []struct {
		name       string
		cfg        aws.Config
		role, exID string
	}{
		{"wrong external id", tenantConfig(), roleARN, "nuon-someone-elses-external-id"},
		{"unknown role", tenantConfig(), "arn:aws:iam::222222222222:role/nuon-other-provision", externalID},
		{"unknown caller", aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKIASTRANGER00000001", "x", "")}, roleARN, externalID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AssumeRole(context.Background(), tt.cfg, tt.role, tt.exID, WithEndpoint(s.URL))
			if !errors.Is(err, ErrAccessDenied) {
				t.Fatalf("AssumeRole = %v, want ErrAccessDenied", err)
			}
			if !strings.Contains(err.Error(), tt.role) {
				t.Errorf("error %q does not name the role", err)
			}
		})
	}
	if _, err := AssumeRole(context.Background(), tenantConfig(), roleARN, "", WithEndpoint(s.URL)); err == nil || !strings.Contains(err.Error(), "no external id") {
		t.Errorf("AssumeRole without an external id = %v", err)
	}
	for _, c := range s.Calls() {
		if c.Code == "" {
			t.Errorf("a refused call succeeded at STS: %+v", c)
		}
	}
}

// TestAssumeRoleDeadline checks that an endpoint that accepts connections
// and never answers fails within the deadline instead of hanging.
func TestAssumeRoleDeadline(t *testing.T) {
	url := ststest.BlackHole(t)
	start := time.Now()
	_, err := AssumeRole(context.Background(), tenantConfig(), roleARN, externalID, WithEndpoint(url), WithTimeout(500*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AssumeRole = %v, want ErrTimeout and context.DeadlineExceeded", err)
	}
	if took > 5*time.Second {
		t.Errorf("AssumeRole took %s with a 500ms deadline", took)
	}
	// The caller's own deadline holds as well.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := AssumeRole(ctx, tenantConfig(), roleARN, externalID, WithEndpoint(url)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AssumeRole = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("AssumeRole took %s with the caller's 300ms deadline", took)
	}
}

// TestCredentialsReachTerraform hands assumed credentials to a real
// terraform run through terraform-exec's SetEnv: a local-exec provisioner
// proves the process got them (it writes only their hashes), and neither
// terraform's output nor its TRACE log contain them.
func TestCredentialsReachTerraform(t *testing.T) {
	bin, err := exec.LookPath("terraform")
	if err != nil {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("terraform is not installed (CI=%s)", ci)
		}
		t.Skip("terraform is not installed")
	}
	s := stsServer(t)
	creds, err := AssumeRole(context.Background(), tenantConfig(), roleARN, externalID, WithEndpoint(s.URL))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	module := `resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command = "printf %s \"$AWS_ACCESS_KEY_ID\" | sha256sum > key.sha; printf %s \"$AWS_SECRET_ACCESS_KEY\" | sha256sum > secret.sha; printf %s \"$AWS_SESSION_TOKEN\" | sha256sum > token.sha"
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(module), 0o644); err != nil {
		t.Fatal(err)
	}
	tf, err := tfexec.NewTerraform(dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	env := creds.Env()
	env["CHECKPOINT_DISABLE"] = "1"
	if err := tf.SetEnv(env); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "trace.log")
	if err := tf.SetLog("TRACE"); err != nil {
		t.Fatal(err)
	}
	if err := tf.SetLogPath(logPath); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tf.SetStdout(&out)
	tf.SetStderr(&out)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tf.Init(ctx); err != nil {
		t.Fatalf("terraform init: %v\n%s", err, out.String())
	}
	if err := tf.Apply(ctx); err != nil {
		t.Fatalf("terraform apply: %v\n%s", err, out.String())
	}
	for file, value := range map[string]string{"key.sha": creds.AccessKeyID, "secret.sha": creds.SecretAccessKey, "token.sha": creds.SessionToken} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(value))
		if got := strings.Fields(string(b)); len(got) == 0 || got[0] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: terraform's process did not get the credential", file)
		}
	}
	trace, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(trace) == 0 {
		t.Fatal("no TRACE log written: the check below would prove nothing")
	}
	for name, text := range map[string]string{"output": out.String(), "TRACE log": string(trace)} {
		for _, secret := range []string{creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken} {
			if strings.Contains(text, secret) {
				t.Errorf("terraform's %s contains a credential", name)
			}
		}
	}
}
