package stack

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// opts are fixed options, so the outputs are byte-for-byte stable.
func opts() Options {
	return Options{InstallID: "acme", TenantAccount: "123456789012", ExternalID: "nuon-golden-external-id-0000000000"}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func TestGolden(t *testing.T) {
	cfn, err := CloudFormation(opts())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cloudformation.golden.json", cfn)
	tf, err := Terraform(opts())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "terraform.golden.tf", tf)
}

func TestValidate(t *testing.T) {
	good := opts()
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"ok", func(*Options) {}, ""},
		{"upper-case id", func(o *Options) { o.InstallID = "Acme" }, "install id"},
		{"short account", func(o *Options) { o.TenantAccount = "1234" }, "tenant account"},
		{"no external id", func(o *Options) { o.ExternalID = "" }, "external id"},
		{"short external id", func(o *Options) { o.ExternalID = "guessable" }, "external id"},
		{"external id with a space", func(o *Options) { o.ExternalID = "nuon-aaaaaaaaaaaa bbbb" }, "external id"},
		{"long session", func(o *Options) { o.SessionSeconds = 86400 }, "session seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.change(&o)
			err := o.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.SessionSeconds != DefaultSessionSeconds {
					t.Errorf("SessionSeconds = %d, want the default %d", o.SessionSeconds, DefaultSessionSeconds)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want ErrInvalid about %s", err, tt.want)
			}
			if _, err := CloudFormation(o); err == nil {
				t.Error("CloudFormation accepted invalid options")
			}
			if _, err := Terraform(o); err == nil {
				t.Error("Terraform accepted invalid options")
			}
		})
	}
}

func TestNewExternalID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, err := NewExternalID()
		if err != nil {
			t.Fatal(err)
		}
		o := opts()
		o.ExternalID = id
		if err := o.Validate(); err != nil {
			t.Fatalf("NewExternalID made an id Validate refuses: %v", err)
		}
		if seen[id] {
			t.Fatalf("NewExternalID repeated %s", id)
		}
		seen[id] = true
	}
}

// template is the CloudFormation template, decoded.
func template(t *testing.T) map[string]any {
	t.Helper()
	b, err := CloudFormation(opts())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTrust checks every role of the template trusts only the tenant's
// account, with the ExternalId, and that break-glass is conditional.
func TestTrust(t *testing.T) {
	res := template(t)["Resources"].(map[string]any)
	roles := 0
	for id, r := range res {
		r := r.(map[string]any)
		if r["Type"] != "AWS::IAM::Role" {
			continue
		}
		roles++
		doc := r["Properties"].(map[string]any)["AssumeRolePolicyDocument"]
		b, _ := json.Marshal(doc)
		s := string(b)
		for _, want := range []string{`:iam::123456789012:root`, `"sts:ExternalId":"nuon-golden-external-id-0000000000"`, `"Action":"sts:AssumeRole"`} {
			if !strings.Contains(s, want) {
				t.Errorf("%s trust policy lacks %s: %s", id, want, s)
			}
		}
		want := 1
		if id == "MaintenanceRole" {
			// and the install's agent, from inside the account
			want = 2
			if !strings.Contains(s, `"aws:PrincipalArn":{"Fn::Sub":"arn:${AWS::Partition}:iam::${AWS::AccountId}:role/nuon-acme-agent"}`) {
				t.Errorf("the maintenance role does not trust the install's agent: %s", s)
			}
		}
		if n := strings.Count(s, `"Effect"`); n != want {
			t.Errorf("%s trust policy has %d statements, want %d: %s", id, n, want, s)
		}
		_, conditional := r["Condition"]
		if conditional != (id == "BreakGlassRole") {
			t.Errorf("%s: conditional = %v; only the break-glass role is", id, conditional)
		}
	}
	if roles != 4 {
		t.Errorf("%d roles, want 4", roles)
	}
	if d := template(t)["Parameters"].(map[string]any)["EnableBreakGlass"].(map[string]any)["Default"]; d != "false" {
		t.Errorf("EnableBreakGlass defaults to %v, want false", d)
	}
}

// TestDeprovisionOnlyDeletes checks that the deprovision role may only
// describe, list, get and delete, besides writing the Terraform state.
func TestDeprovisionOnlyDeletes(t *testing.T) {
	allowed := []string{"Delete", "Describe", "List", "Get", "Detach", "Disassociate", "Release", "Revoke", "BatchDelete", "ScheduleKeyDeletion", "ChangeResourceRecordSets"}
	for _, s := range policy(opts(), Deprovision)["Statement"].([]any) {
		s := s.(obj)
		for _, a := range s["Action"].([]string) {
			verb := a[strings.Index(a, ":")+1:]
			if s["Sid"] == "TerraformState" {
				continue
			}
			ok := false
			for _, p := range allowed {
				ok = ok || strings.HasPrefix(verb, p)
			}
			if !ok || strings.HasSuffix(verb, "*") && !strings.HasPrefix(verb, "Describe") && !strings.HasPrefix(verb, "List") && !strings.HasPrefix(verb, "Get") {
				t.Errorf("deprovision role may %s", a)
			}
		}
	}
}

// TestNoEscalation checks that no phase's role can change the stack's own
// roles (or any role but the sandbox's), attach other managed policies, or
// use the customer's keys.
func TestNoEscalation(t *testing.T) {
	for _, p := range []Phase{Provision, Maintenance, Deprovision} {
		for _, s := range policy(opts(), p)["Statement"].([]any) {
			s := s.(obj)
			if s["Effect"] != "Allow" {
				continue
			}
			b, _ := json.Marshal(s)
			for _, a := range s["Action"].([]string) {
				if strings.HasPrefix(a, "iam:") && a != "iam:CreateServiceLinkedRole" {
					for _, r := range s["Resource"].([]string) {
						if !strings.HasSuffix(r, ":role/nuon-acme-cluster") && !strings.HasSuffix(r, ":role/nuon-acme-node") && !strings.HasSuffix(r, ":role/nuon-acme-agent") {
							t.Errorf("%s: %s on %s", p, a, r)
						}
					}
				}
				if a == "iam:AttachRolePolicy" && !strings.Contains(string(b), "iam:PolicyARN") {
					t.Errorf("%s: iam:AttachRolePolicy of any policy", p)
				}
				if a == "kms:*" || a == "kms:Decrypt" || strings.HasPrefix(a, "kms:GenerateDataKey") || a == "kms:ReEncrypt*" {
					t.Errorf("%s may use keys: %s", p, a)
				}
				if a == "kms:CreateGrant" && !strings.Contains(string(b), "kms:GrantIsForAWSResource") {
					t.Errorf("%s: kms:CreateGrant for anyone", p)
				}
				if a == "*" || a == "iam:*" || a == "sts:*" || a == "s3:*" {
					t.Errorf("%s: %s", p, a)
				}
			}
		}
	}
}

func TestAllows(t *testing.T) {
	for _, tt := range []struct {
		p      Phase
		action string
		want   bool
	}{
		{Deprovision, "elasticloadbalancing:DescribeLoadBalancers", true},
		{Deprovision, "ElasticLoadBalancing:describetags", true},
		{Deprovision, "ecr:DeleteRepository", true},
		{Deprovision, "elasticloadbalancing:DeleteLoadBalancer", false},
		{Deprovision, "ecr:CreateRepository", false},
		{Maintenance, "ecr:DeleteRepository", false}, // allowed, then denied
		{Provision, "ecr:DeleteRepository", true},
		{Provision, "ec2:CreateVpc", true},
	} {
		if got := Allows(opts(), tt.p, tt.action); got != tt.want {
			t.Errorf("Allows(%s, %s) = %v, want %v", tt.p, tt.action, got, tt.want)
		}
	}
}
