package stack

import (
	"encoding/json"
	"strings"
)

// CloudFormation logical ids, stable across versions so a stack update
// changes resources in place.
var cfnRole = map[Phase]string{
	Provision:   "ProvisionRole",
	Maintenance: "MaintenanceRole",
	Deprovision: "DeprovisionRole",
	BreakGlass:  "BreakGlassRole",
}

// CloudFormation returns the customer's stack as a CloudFormation template
// (JSON). Parameter EnableBreakGlass ("false" by default) creates the
// break-glass role.
func CloudFormation(o Options) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	resources := obj{}
	outputs := obj{}
	for _, p := range Phases {
		props := obj{
			"RoleName":                 RoleName(o.InstallID, p),
			"Description":              "nuon install " + o.InstallID + ": " + string(p) + " role for the tenant",
			"MaxSessionDuration":       o.SessionSeconds,
			"AssumeRolePolicyDocument": cfnSub(trust(o, p)),
			"Tags":                     []any{obj{"Key": "nuon.dev/install", "Value": o.InstallID}, obj{"Key": "nuon.dev/phase", "Value": string(p)}},
		}
		if p == BreakGlass {
			// Emergency access, off unless the customer turns it on.
			props["ManagedPolicyArns"] = []any{obj{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AdministratorAccess"}}
		} else {
			props["Policies"] = []any{obj{"PolicyName": RoleName(o.InstallID, p), "PolicyDocument": cfnSub(policy(o, p))}}
		}
		r := obj{"Type": "AWS::IAM::Role", "Properties": props}
		out := obj{"Description": "ARN of the " + string(p) + " role", "Value": obj{"Fn::GetAtt": []any{cfnRole[p], "Arn"}}}
		if p == BreakGlass {
			r["Condition"] = "BreakGlassEnabled"
			out["Condition"] = "BreakGlassEnabled"
		}
		resources[cfnRole[p]] = r
		outputs[cfnRole[p]+"Arn"] = out
	}
	resources["StateBucket"] = obj{
		"Type": "AWS::S3::Bucket",
		// The state outlives the stack: deleting the stack revokes access,
		// it does not destroy the install's history.
		"DeletionPolicy":      "Retain",
		"UpdateReplacePolicy": "Retain",
		"Properties": obj{
			"VersioningConfiguration": obj{"Status": "Enabled"},
			"BucketEncryption": obj{"ServerSideEncryptionConfiguration": []any{obj{
				"ServerSideEncryptionByDefault": obj{"SSEAlgorithm": "aws:kms"},
				"BucketKeyEnabled":              true,
			}}},
			"PublicAccessBlockConfiguration": obj{
				"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
			},
			"OwnershipControls": obj{"Rules": []any{obj{"ObjectOwnership": "BucketOwnerEnforced"}}},
			"Tags":              []any{obj{"Key": "nuon.dev/install", "Value": o.InstallID}},
		},
	}
	resources["StateBucketPolicy"] = obj{
		"Type": "AWS::S3::BucketPolicy",
		"Properties": obj{
			"Bucket":         obj{"Ref": "StateBucket"},
			"PolicyDocument": cfnSub(bucketPolicy()),
		},
	}
	outputs["StateBucketName"] = obj{"Description": "The install's Terraform state bucket (backend \"s3\" with use_lockfile)", "Value": obj{"Ref": "StateBucket"}}
	outputs["ExternalId"] = obj{"Description": "The ExternalId the tenant presents", "Value": o.ExternalID}
	tmpl := obj{
		"AWSTemplateFormatVersion": "2010-09-09",
		"Description":              description(o),
		"Parameters": obj{
			"EnableBreakGlass": obj{
				"Type":          "String",
				"Default":       "false",
				"AllowedValues": []any{"true", "false"},
				"Description":   "Create the break-glass role (AdministratorAccess for the tenant, for emergencies). Off by default.",
			},
		},
		"Conditions": obj{"BreakGlassEnabled": obj{"Fn::Equals": []any{obj{"Ref": "EnableBreakGlass"}, "true"}}},
		"Resources":  resources,
		"Outputs":    outputs,
	}
	b, err := json.MarshalIndent(tmpl, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// cfnSub replaces the placeholders in a policy: strings holding one become
// {"Fn::Sub": ...}.
func cfnSub(v any) any {
	switch v := v.(type) {
	case obj:
		out := obj{}
		for k, e := range v {
			out[k] = cfnSub(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cfnSub(e)
		}
		return out
	case []string:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cfnSub(e)
		}
		return out
	case string:
		if !strings.Contains(v, "{{") {
			return v
		}
		r := strings.NewReplacer(account, "${AWS::AccountId}", partition, "${AWS::Partition}", region, "${AWS::Region}", bucket, "${StateBucket}")
		return obj{"Fn::Sub": r.Replace(v)}
	default:
		return v
	}
}
