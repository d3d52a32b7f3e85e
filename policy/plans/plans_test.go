package plans_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/policy/plans"
)

// fixturePolicies are the example policies of the fixture tenant.
func fixturePolicies(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../fixtures/tenant/policies/*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixture policies: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out["policies/"+filepath.Base(f)] = string(b)
	}
	return out
}

func change(typ, addr string, after map[string]any, actions ...string) map[string]any {
	acts := make([]any, len(actions))
	for i, a := range actions {
		acts[i] = a
	}
	return map[string]any{"address": addr, "type": typ, "mode": "managed", "change": map[string]any{"actions": acts, "after": after}}
}

func planInput(changes ...map[string]any) map[string]any {
	rcs := make([]any, len(changes))
	for i, c := range changes {
		rcs[i] = c
	}
	return map[string]any{"install": "acme", "component": "db", "type": "terraform", "plan": map[string]any{"resource_changes": rcs}}
}

func TestPlanPolicies(t *testing.T) {
	set, err := plans.Compile(fixturePolicies(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		input      map[string]any
		deny, warn []string
	}{
		{"create a database", planInput(change("aws_db_instance", "aws_db_instance.main", nil, "create")), nil, nil},
		{"delete a database", planInput(change("aws_db_instance", "aws_db_instance.main", nil, "delete")),
			[]string{"db: delete would destroy aws_db_instance.main (no-data-loss.rego)"}, nil},
		{"replace a PVC", planInput(change("kubernetes_persistent_volume_claim_v1", "kubernetes_persistent_volume_claim_v1.data", nil, "delete", "create")),
			[]string{"db: delete/create would destroy kubernetes_persistent_volume_claim_v1.data (no-data-loss.rego)"}, nil},
		{"delete a file", planInput(change("local_file", "local_file.config", nil, "delete")), nil, []string{"db: local_file.config would be destroyed"}},
		{"public bucket", planInput(change("aws_s3_bucket_acl", "aws_s3_bucket_acl.logs", map[string]any{"acl": "public-read"}, "update")),
			[]string{"db: aws_s3_bucket_acl.logs would be public (acl public-read; no-public-bucket.rego)"}, nil},
		{"private bucket", planInput(change("aws_s3_bucket_acl", "aws_s3_bucket_acl.logs", map[string]any{"acl": "private"}, "update")), nil, nil},
		{"public access let through", planInput(change("aws_s3_bucket_public_access_block", "aws_s3_bucket_public_access_block.b",
			map[string]any{"block_public_acls": true, "block_public_policy": false}, "create")),
			[]string{"db: aws_s3_bucket_public_access_block.b sets block_public_policy to false (no-public-bucket.rego)"}, nil},
		{"no changes", planInput(), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := set.Evaluate(context.Background(), tt.input)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(j.Deny, tt.deny) || !slices.Equal(j.Warn, tt.warn) {
				t.Errorf("deny %q warn %q, want %q %q", j.Deny, j.Warn, tt.deny, tt.warn)
			}
		})
	}
}

func TestPlanPolicyProblems(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string
	}{
		{"syntax", "package p\n\nimport rego.v1\n\ndeny contains msg if {\n  msg := \n}\n", "policies/bad.rego:7:1: unexpected } token"},
		{"unknown function", "package p\n\nimport rego.v1\n\ndeny contains msg if {\n  msg := no_such_fn(1)\n}\n", "policies/bad.rego:6:"},
		{"unsafe variable", "package p\n\nimport rego.v1\n\ndeny contains msg if {\n  x > 1\n  msg := \"m\"\n}\n", "policies/bad.rego:6:"},
		{"network", "package p\n\nimport rego.v1\n\ndeny contains msg if {\n  r := http.send({\"method\": \"get\", \"url\": \"http://x\"})\n  msg := r.body\n}\n", "policies/bad.rego:6:"},
		{"environment", "package p\n\nimport rego.v1\n\ndeny contains msg if {\n  msg := opa.runtime().env.HOME\n}\n", "policies/bad.rego:6:"},
		{"v0 syntax", "package p\n\ndeny[msg] { msg := \"m\" }\n", "policies/bad.rego:3:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plans.Compile(map[string]string{"policies/bad.rego": tt.file})
			if !errors.Is(err, plans.ErrPolicy) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestPlanPolicyRunsLong: a policy that would run for minutes is stopped
// at the evaluation bound and the change is blocked, not let through.
func TestPlanPolicyRunsLong(t *testing.T) {
	set, err := plans.Compile(map[string]string{"policies/slow.rego": `package slow

import rego.v1

deny contains msg if {
	n := count([x | some x in numbers.range(1, 100000000); x % 7 == 3])
	n < 0
	msg := "never"
}
`})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = set.WithTimeout(200*time.Millisecond).Evaluate(context.Background(), planInput())
	if !errors.Is(err, plans.ErrPolicy) || !strings.Contains(err.Error(), "ran past") {
		t.Fatalf("error %v, want the evaluation bound", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the bound of 200ms stopped the policy after %s", d)
	}
}

// BenchmarkPlanPolicies evaluates the fixture policies on a plan of 1,000
// resource changes.
//
//	go test -run '^$' -bench BenchmarkPlanPolicies -benchtime=100x ./policy/
func BenchmarkPlanPolicies(b *testing.B) {
	set, err := plans.Compile(fixturePolicies(b))
	if err != nil {
		b.Fatal(err)
	}
	var cs []map[string]any
	for i := range 1000 {
		typ, acts := "terraform_data", []string{"create"}
		switch i % 10 {
		case 0:
			typ = "aws_s3_bucket_acl"
		case 1:
			acts = []string{"delete", "create"}
		}
		cs = append(cs, change(typ, typ+".r"+strings.Repeat("x", i%5), map[string]any{"acl": "private", "input": map[string]any{"index": i}}, acts...))
	}
	input := planInput(cs...)
	for b.Loop() {
		j, err := set.Evaluate(context.Background(), input)
		if err != nil || len(j.Warn) == 0 {
			b.Fatalf("%v %v", j, err)
		}
	}
}
