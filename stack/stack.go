package stack

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Phase is what a role is for; each phase has its own role.
type Phase string

// The phases. BreakGlass exists only when the customer enables it.
const (
	Provision   Phase = "provision"
	Maintenance Phase = "maintenance"
	Deprovision Phase = "deprovision"
	BreakGlass  Phase = "break-glass"
)

// Phases lists every phase in the order the roles are written.
var Phases = []Phase{Provision, Maintenance, Deprovision, BreakGlass}

// ErrInvalid is wrapped by every error of Options.Validate: the input is
// wrong, retrying will not help.
var ErrInvalid = errors.New("invalid stack options")

// Options say whose stack it is.
type Options struct {
	// InstallID names the install: roles are nuon-<id>-<phase>.
	InstallID string
	// TenantAccount is the tenant's 12-digit AWS account: the only
	// account the roles trust.
	TenantAccount string
	// ExternalID must be presented by the tenant on every AssumeRole;
	// see NewExternalID.
	ExternalID string
	// SessionSeconds is how long an assumed role's credentials last;
	// default 3600 (DefaultSessionSeconds).
	SessionSeconds int
}

// DefaultSessionSeconds is the default MaxSessionDuration of the roles.
const DefaultSessionSeconds = 3600

var (
	installRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$`)
	accountRe    = regexp.MustCompile(`^[0-9]{12}$`)
	externalIDRe = regexp.MustCompile(`^[A-Za-z0-9+=,.@:/-]+$`)
)

// Validate checks the options and fills in defaults.
func (o *Options) Validate() error {
	if !installRe.MatchString(o.InstallID) {
		return fmt.Errorf("%w: install id %q: want 3-32 of [a-z0-9-], not starting or ending with -", ErrInvalid, o.InstallID)
	}
	if !accountRe.MatchString(o.TenantAccount) {
		return fmt.Errorf("%w: tenant account %q: want 12 digits", ErrInvalid, o.TenantAccount)
	}
	if n := len(o.ExternalID); n < 16 || n > 1224 || !externalIDRe.MatchString(o.ExternalID) {
		return fmt.Errorf("%w: external id: want 16-1224 of [A-Za-z0-9+=,.@:/-] (make one with NewExternalID)", ErrInvalid)
	}
	if o.SessionSeconds == 0 {
		o.SessionSeconds = DefaultSessionSeconds
	}
	if o.SessionSeconds < 900 || o.SessionSeconds > 43200 {
		return fmt.Errorf("%w: session seconds %d: want 900-43200", ErrInvalid, o.SessionSeconds)
	}
	return nil
}

// NewExternalID makes an unguessable ExternalId: 160 random bits. It is
// not a secret (the customer sees it in the stack), but nobody can guess
// it, so no one else the tenant works for can make the tenant assume
// this customer's roles (the confused deputy).
func NewExternalID() (string, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("external id: %w", err)
	}
	return "nuon-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// RoleName is the name of an install's role for a phase.
func RoleName(installID string, p Phase) string { return "nuon-" + installID + "-" + string(p) }

// Placeholders in policy strings, replaced by each output format.
const (
	account   = "{{ACCOUNT}}"
	partition = "{{PARTITION}}"
	region    = "{{REGION}}"
	bucket    = "{{BUCKET}}"
)

type obj = map[string]any

// trust is the trust policy of a phase's role: the tenant's account, with
// the install's ExternalId. The maintenance role also trusts the install's
// own agent role (sandboxes/aws-eks's nuon-<id>-agent), which applies
// sandbox upgrades from inside: named by aws:PrincipalArn, since IAM
// refuses a principal that does not exist yet and the sandbox makes the
// agent's role later.
func trust(o Options, p Phase) obj {
	st := []any{obj{
		"Effect":    "Allow",
		"Principal": obj{"AWS": "arn:" + partition + ":iam::" + o.TenantAccount + ":root"},
		"Action":    "sts:AssumeRole",
		"Condition": obj{"StringEquals": obj{"sts:ExternalId": o.ExternalID}},
	}}
	if p == Maintenance {
		st = append(st, obj{
			"Effect":    "Allow",
			"Principal": obj{"AWS": "arn:" + partition + ":iam::" + account + ":root"},
			"Action":    "sts:AssumeRole",
			"Condition": obj{"ArnEquals": obj{"aws:PrincipalArn": "arn:" + partition + ":iam::" + account + ":role/nuon-" + o.InstallID + "-agent"}},
		})
	}
	return obj{"Version": "2012-10-17", "Statement": st}
}

func stmt(sid string, actions []string, resources ...string) obj {
	var res any = resources
	if len(resources) == 1 {
		res = resources[0]
	}
	return obj{"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": res}
}

// SandboxRoles are the roles sandboxes/aws-eks makes (nuon-<id>-<name>):
// the only roles the provision and maintenance roles may create or change,
// so neither can touch the stack's own roles or any other.
var SandboxRoles = []string{"cluster", "node", "agent"}

// sandboxManagedPolicies are the only AWS managed policies the sandbox
// attaches.
var sandboxManagedPolicies = []string{"AmazonEKSClusterPolicy", "AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryPullOnly"}

// installRoles are the ARNs of the sandbox's roles.
func installRoles(o Options) []string {
	var out []string
	for _, r := range SandboxRoles {
		out = append(out, "arn:"+partition+":iam::"+account+":role/nuon-"+o.InstallID+"-"+r)
	}
	return out
}

func stateBucket() []string {
	return []string{"arn:" + partition + ":s3:::" + bucket, "arn:" + partition + ":s3:::" + bucket + "/*"}
}

// stateAccess lets a role read and write the install's Terraform state
// and its lock file (use_lockfile).
func stateAccess() obj {
	return stmt("TerraformState", []string{"s3:DeleteObject", "s3:GetObject", "s3:ListBucket", "s3:PutObject"}, stateBucket()...)
}

// build is what making and changing the sandbox (sandboxes/aws-eks)
// needs: the cluster, registry and logs by their install-scoped names;
// KMS key management without using keys (no Decrypt, no GenerateDataKey);
// grants only for AWS services; EC2 networking and Route53 zones, which
// AWS cannot scope by name at creation.
func build(o Options) []any {
	n := "nuon-" + o.InstallID
	region := "arn:" + partition + ":%s:*:" + account + ":%s"
	managed := make([]string, len(sandboxManagedPolicies))
	for i, m := range sandboxManagedPolicies {
		managed[i] = "arn:" + partition + ":iam::aws:policy/" + m
	}
	return []any{
		stmt("Network", []string{"ec2:*"}, "*"),
		stmt("Cluster", []string{"eks:*"},
			fmt.Sprintf(region, "eks", "cluster/"+n), fmt.Sprintf(region, "eks", "nodegroup/"+n+"/*"),
			fmt.Sprintf(region, "eks", "addon/"+n+"/*"), fmt.Sprintf(region, "eks", "access-entry/"+n+"/*"),
			fmt.Sprintf(region, "eks", "podidentityassociation/"+n+"/*")),
		stmt("ClusterPolicies", []string{"eks:DescribeAccessPolicies", "eks:DescribeAddonVersions", "eks:ListClusters"}, "*"),
		stmt("Registry", []string{
			"ecr:CreateRepository", "ecr:DeleteRepository", "ecr:DeleteRepositoryPolicy", "ecr:DescribeRepositories", "ecr:GetRepositoryPolicy",
			"ecr:ListTagsForResource", "ecr:PutImageScanningConfiguration", "ecr:PutImageTagMutability", "ecr:SetRepositoryPolicy",
			"ecr:TagResource", "ecr:UntagResource",
		}, fmt.Sprintf(region, "ecr", "repository/nuon/"+o.InstallID+"/*")),
		stmt("Logs", []string{
			"logs:CreateLogGroup", "logs:DeleteLogGroup", "logs:ListTagsForResource", "logs:ListTagsLogGroup", "logs:PutRetentionPolicy",
			"logs:TagLogGroup", "logs:TagResource", "logs:UntagLogGroup", "logs:UntagResource",
		}, fmt.Sprintf(region, "logs", "log-group:/aws/eks/"+n+"/*")),
		stmt("Describe", []string{"autoscaling:Describe*", "elasticloadbalancing:Describe*", "logs:DescribeLogGroups"}, "*"),
		stmt("Keys", []string{
			"kms:CreateAlias", "kms:CreateKey", "kms:DeleteAlias", "kms:DescribeKey", "kms:EnableKeyRotation", "kms:GetKeyPolicy",
			"kms:GetKeyRotationStatus", "kms:ListAliases", "kms:ListResourceTags", "kms:PutKeyPolicy", "kms:ScheduleKeyDeletion",
			"kms:TagResource", "kms:UntagResource", "kms:UpdateKeyDescription",
		}, "*"),
		obj{
			"Sid": "KeyGrantsForServices", "Effect": "Allow", "Action": []string{"kms:CreateGrant"}, "Resource": "*",
			"Condition": obj{"Bool": obj{"kms:GrantIsForAWSResource": "true"}},
		},
		stmt("Zones", []string{"route53:*"}, "*"),
		stmt("SandboxRoles", []string{
			"iam:CreateRole", "iam:DeleteRole", "iam:DeleteRolePolicy", "iam:DetachRolePolicy",
			"iam:GetRole", "iam:GetRolePolicy", "iam:ListAttachedRolePolicies", "iam:ListInstanceProfilesForRole",
			"iam:ListRolePolicies", "iam:PassRole", "iam:PutRolePolicy", "iam:TagRole", "iam:UntagRole", "iam:UpdateAssumeRolePolicy",
		}, installRoles(o)...),
		obj{
			// Only the managed policies the sandbox uses.
			"Sid": "SandboxManagedPolicies", "Effect": "Allow", "Action": []string{"iam:AttachRolePolicy"},
			"Resource":  installRoles(o),
			"Condition": obj{"ArnEquals": obj{"iam:PolicyARN": managed}},
		},
		obj{
			"Sid": "ServiceLinkedRoles", "Effect": "Allow", "Action": []string{"iam:CreateServiceLinkedRole"},
			"Resource":  "arn:" + partition + ":iam::" + account + ":role/aws-service-role/*",
			"Condition": obj{"StringEquals": obj{"iam:AWSServiceName": []string{"eks.amazonaws.com", "eks-nodegroup.amazonaws.com", "autoscaling.amazonaws.com", "elasticloadbalancing.amazonaws.com"}}},
		},
		stateAccess(),
	}
}

// policy is a phase's permissions policy.
func policy(o Options, p Phase) obj {
	var st []any
	switch p {
	case Provision, Maintenance:
		st = append(st, build(o)...)
		if p == Maintenance {
			// Upgrades change the sandbox; they never tear it down.
			st = append(st, obj{
				"Sid": "NoTeardown", "Effect": "Deny",
				"Action":   []string{"ec2:DeleteVpc", "eks:DeleteCluster", "kms:ScheduleKeyDeletion", "route53:DeleteHostedZone", "ecr:DeleteRepository"},
				"Resource": "*",
			})
		}
	case Deprovision:
		st = append(st,
			stmt("Describe", []string{
				"autoscaling:Describe*", "ec2:Describe*", "ecr:Describe*", "ecr:List*", "eks:Describe*", "eks:List*",
				"elasticloadbalancing:Describe*", "kms:Describe*", "kms:GetKeyPolicy", "kms:GetKeyRotationStatus", "kms:List*",
				"logs:Describe*", "logs:ListTagsForResource", "route53:Get*", "route53:List*",
			}, "*"),
			stmt("Delete", []string{
				"ec2:DeleteInternetGateway", "ec2:DeleteLaunchTemplate", "ec2:DeleteNatGateway", "ec2:DeleteRoute", "ec2:DeleteRouteTable",
				"ec2:DeleteSecurityGroup", "ec2:DeleteSubnet", "ec2:DeleteVpc", "ec2:DetachInternetGateway", "ec2:DisassociateAddress",
				"ec2:DisassociateRouteTable", "ec2:ReleaseAddress", "ec2:RevokeSecurityGroupEgress", "ec2:RevokeSecurityGroupIngress",
				"ecr:BatchDeleteImage", "ecr:DeleteRepository", "ecr:DeleteRepositoryPolicy",
				"eks:DeleteAccessEntry", "eks:DeleteAddon", "eks:DeleteCluster", "eks:DeleteNodegroup", "eks:DeletePodIdentityAssociation", "eks:DisassociateAccessPolicy",
				"kms:DeleteAlias", "kms:ScheduleKeyDeletion", "logs:DeleteLogGroup", "route53:DeleteHostedZone",
			}, "*"),
			obj{
				// Emptying a zone before deleting it: deletions only.
				"Sid": "EmptyZones", "Effect": "Allow", "Action": []string{"route53:ChangeResourceRecordSets"}, "Resource": "*",
				"Condition": obj{"ForAllValues:StringEquals": obj{"route53:ChangeResourceRecordSetsActions": []string{"DELETE"}}},
			},
			stmt("SandboxRoles", []string{
				"iam:DeleteRole", "iam:DeleteRolePolicy", "iam:DetachRolePolicy", "iam:GetRole", "iam:GetRolePolicy",
				"iam:ListAttachedRolePolicies", "iam:ListInstanceProfilesForRole", "iam:ListRolePolicies",
			}, installRoles(o)...),
			// Destroy records its progress in the state.
			stateAccess(),
		)
	}
	return obj{"Version": "2012-10-17", "Statement": st}
}

// bucketPolicy refuses every request to the state bucket that is not
// over TLS.
func bucketPolicy() obj {
	return obj{
		"Version": "2012-10-17",
		"Statement": []any{obj{
			"Sid": "TLSOnly", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
			"Resource":  stateBucket(),
			"Condition": obj{"Bool": obj{"aws:SecureTransport": "false"}},
		}},
	}
}

// description is the text the stack and module open with.
func description(o Options) string {
	return fmt.Sprintf("nuon install %s: roles the tenant (account %s) may assume with this install's ExternalId, one per phase, and the install's Terraform state bucket. Delete this stack to revoke all access.", o.InstallID, o.TenantAccount)
}

// Allows reports whether the role of phase p may call action
// ("elasticloadbalancing:DescribeTags"): some statement of its policy
// allows it and none denies it. Resources and conditions are not
// evaluated; it answers "is this action in the role's policy at all",
// which tests use to keep the policy in step with the calls made with
// the role. Action names compare case-insensitively, with IAM's * and ?.
func Allows(o Options, p Phase, action string) bool {
	match := func(s obj) bool {
		var patterns []string
		switch a := s["Action"].(type) {
		case string:
			patterns = []string{a}
		case []string:
			patterns = a
		}
		for _, pat := range patterns {
			if ok, _ := path.Match(strings.ToLower(pat), strings.ToLower(action)); ok {
				return true
			}
		}
		return false
	}
	allowed := false
	for _, st := range policy(o, p)["Statement"].([]any) {
		s := st.(obj)
		if !match(s) {
			continue
		}
		if s["Effect"] == "Deny" {
			return false
		}
		allowed = true
	}
	return allowed
}
