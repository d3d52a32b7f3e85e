// Package sandboxes holds the Terraform modules that make an install's
// sandbox, the infrastructure its agent and components run on:
// aws-eks for AWS (VPC, EKS, ECR, the agent's IAM role, Route53 zones)
// and local for development, tests and the demo. Every sandbox has the
// same outputs contract (README.md), which the agent feeds into
// components as ${install.sandbox.outputs.…}.
//
// The Go code here is only the tests that check the modules for real,
// without AWS: `terraform validate` and `terraform test` with
// mock_provider "aws" against the real hashicorp/aws 6.25.0 schema, served
// by the schema-only provider `make tf-aws` builds (NUON_TF_AWS_CLI_CONFIG).
package sandboxes
