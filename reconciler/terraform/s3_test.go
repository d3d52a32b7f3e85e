package terraform

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/s3test"
	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

const (
	testAccount   = "222222222222"
	testRole      = "arn:aws:iam::222222222222:role/nuon-acme-maintenance"
	testExternal  = "acme-external-id"
	testBucket    = "nuon-acme-state"
	testStateKey  = "sandbox/terraform.tfstate"
	testAgentKey  = "AKIAAGENT0000000"
	testAgentUser = "arn:aws:iam::111111111111:role/nuon-acme-agent"
)

// s3Env is the AWS side of an install for the s3 backend: STS with the
// maintenance role, S3 with the state bucket, and the role's credentials
// as a sandbox job gets them.
type s3Env struct {
	sts   *ststest.Server
	s3    *s3test.Server
	creds *stack.Credentials
}

// newS3Env assumes the maintenance role as the agent does and puts the
// credentials, and the stand-ins' endpoints, in the environment terraform
// inherits. Nothing is read from this machine's AWS configuration.
func newS3Env(t *testing.T) s3Env {
	t.Helper()
	sts := ststest.New(t)
	sts.AddCaller(testAgentKey, testAgentUser)
	sts.AddRole(ststest.Role{ARN: testRole, TrustedAccount: "111111111111", ExternalID: testExternal})
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(testAgentKey, "agent-secret", "")}
	creds, err := stack.AssumeRole(t.Context(), cfg, testRole, testExternal, stack.WithEndpoint(sts.URL))
	if err != nil {
		t.Fatal(err)
	}
	s3 := s3test.New(t, sts.Secret, testBucket)
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		EnvS3Endpoint: s3.URL, EnvSTSEndpoint: sts.URL,
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_PROFILE": "", "AWS_DEFAULT_REGION": "",
	} {
		t.Setenv(k, v)
	}
	for k, v := range creds.Env() {
		t.Setenv(k, v)
	}
	return s3Env{sts: sts, s3: s3, creds: creds}
}

func s3Job(id string) *schemas.Job {
	job := newJob(schemas.SandboxComponent, testModule("s3state"), map[string]any{"name": "acme"})
	job.ID = id
	job.State = &schemas.S3State{Bucket: testBucket, Key: testStateKey, Region: "us-east-1"}
	return job
}

// TestS3State applies a module with the real terraform's s3 backend
// against the S3 stand-in, with an assumed role's credentials: two jobs
// in two state directories (create's and the agent's) share the one state
// object, so the second adopts what the first made and changes nothing;
// every command takes and releases the lock file; the object is written
// encrypted; no credential reaches the backend block; and credentials
// with another secret are refused.
func TestS3State(t *testing.T) {
	p := realPlugin(t, nil)
	p.LookupEnv = nil // the environment, as in a job
	e := newS3Env(t)

	first, second := t.TempDir(), t.TempDir()
	env := newEnv(first)
	res, err := p.Apply(t.Context(), s3Job("sandbox-g1-create"), env.Env)
	if err != nil {
		t.Fatalf("first Apply: %v\n%s", err, env.log.String())
	}
	cluster, _ := res.Outputs["cluster"].(string)
	if !res.Changed || !strings.HasPrefix(cluster, "acme-") {
		t.Fatalf("first Apply: changed %v, cluster %q", res.Changed, cluster)
	}
	env2 := newEnv(second)
	res2, err := p.Apply(t.Context(), s3Job("sandbox-g2-update"), env2.Env)
	if err != nil {
		t.Fatalf("second Apply: %v\n%s", err, env2.log.String())
	}
	if res2.Changed || res2.Outputs["cluster"] != cluster {
		t.Errorf("second Apply in another directory: changed %v, cluster %v; want unchanged, %s (the state adopted)\n%s", res2.Changed, res2.Outputs["cluster"], cluster, env2.log.String())
	}

	// One state, in S3 only, encrypted; no lock file left behind.
	if d := cmp.Diff([]string{testStateKey}, e.s3.Keys(testBucket)); d != "" {
		t.Errorf("bucket keys (-want +got):\n%s", d)
	}
	if o, _ := e.s3.Object(testBucket, testStateKey); o.SSE != "AES256" || !strings.Contains(string(o.Body), cluster) {
		t.Errorf("state object: SSE %q, holds the cluster %v", o.SSE, strings.Contains(string(o.Body), cluster))
	}
	for _, dir := range []string{first, second} {
		if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
			t.Errorf("a local state file in %s", dir)
		}
	}

	// Each apply (plan and apply) took the lock with a conditional put
	// and removed it; every call was signed by the role's credentials.
	lock := testStateKey + ".tflock"
	var puts, deletes int
	for _, c := range e.s3.Calls() {
		if c.AccessKey != e.creds.AccessKeyID || c.Code != "" && c.Op != "GetObject" && c.Op != "HeadObject" {
			t.Errorf("call %+v", c)
		}
		if c.Key != lock {
			continue
		}
		switch c.Op {
		case "PutObject":
			puts++
			if c.IfNoneMatch != "*" {
				t.Errorf("lock put without If-None-Match: *: %+v", c)
			}
		case "DeleteObject":
			deletes++
		}
	}
	if puts < 2 || puts != deletes {
		t.Errorf("lock file put %d times, deleted %d times; want ≥2 and the same", puts, deletes)
	}

	// The backend block names the object, not the credentials.
	override, err := os.ReadFile(filepath.Join(second, moduleDir, overrideFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{e.creds.AccessKeyID, e.creds.SecretAccessKey, e.creds.SessionToken} {
		if strings.Contains(string(override), secret) {
			t.Errorf("the backend block holds a credential:\n%s", override)
		}
	}
	if !strings.Contains(string(override), `"use_lockfile": true`) || !strings.Contains(string(override), `"s3"`) {
		t.Errorf("backend block:\n%s", override)
	}

	// Another secret for the same key: S3 refuses, nothing is written.
	before := e.s3.Calls()
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	env3 := newEnv(t.TempDir())
	if _, err := p.Apply(t.Context(), s3Job("sandbox-g3-update"), env3.Env); err == nil {
		t.Fatalf("Apply with a wrong secret succeeded\n%s", env3.log.String())
	}
	after := e.s3.Calls()[len(before):]
	if !slices.ContainsFunc(after, func(c s3test.Call) bool { return c.Code == "SignatureDoesNotMatch" }) ||
		slices.ContainsFunc(after, func(c s3test.Call) bool { return c.Code == "" }) {
		t.Errorf("calls with a wrong secret: %+v", after)
	}
}
