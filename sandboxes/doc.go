// Package sandboxes holds the Terraform modules that make an install's
// sandbox, the infrastructure its agent and components run on:
// aws-eks for AWS (VPC, EKS, ECR, the agent's IAM role, Route53 zones)
// and local for development, tests and the demo. Every sandbox has the
// same outputs contract (README.md), which the agent feeds into
// components as ${install.sandbox.outputs.…}.
//
// The modules are embedded: [Extract] writes one out, so that the nuon
// binary carries the sandboxes it creates.
//
// The tests check the modules for real. aws-eks without AWS: `terraform
// validate` and `terraform test` with mock_provider "aws" against the real
// hashicorp/aws 6.25.0 schema, served by the schema-only provider `make
// tf-aws` builds (NUON_TF_AWS_CLI_CONFIG). local by applying it: a real
// etcd, kube-apiserver and kube-controller-manager (NUON_KUBE_ASSETS) and
// docker-registry start, a second apply changes nothing, and destroy leaves
// no process and no file but the state. TestLocalKubeControllers runs the
// sandbox's kube-up.sh alone and shows what the controller manager brings:
// deleted namespaces removed (never left Terminating), dependents
// garbage-collected with their owners, a Job's pod made by the Job
// controller.
package sandboxes
