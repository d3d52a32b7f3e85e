// Package stack writes what a customer applies, once, with their own
// credentials, before an install can be created in their AWS account, and
// assumes the roles it makes.
//
// # The stack
//
// CloudFormation (a template, JSON) and Terraform (the same as one
// main.tf) create:
//
//   - one IAM role per phase of the install's life, nuon-<id>-<phase>:
//     provision (makes the sandbox), maintenance (the agent upgrades the
//     sandbox; it may not tear it down), deprovision (may only describe and
//     delete, and write the Terraform state) and break-glass
//     (AdministratorAccess for emergencies, created only when the
//     customer sets EnableBreakGlass / enable_break_glass);
//   - each trusting only the tenant's AWS account, and only with the
//     install's ExternalId (NewExternalID: 160 random bits, not a secret
//     but unguessable, so no other customer of the tenant can point the
//     tenant at these roles); the maintenance role also trusts the
//     install's own agent role, which applies sandbox upgrades from inside;
//   - provision and maintenance may create and change only the sandbox's
//     own roles (nuon-<id>-cluster, -node, -agent, never the stack's),
//     attach only the managed policies the sandbox uses, manage KMS keys
//     without using them, and reach the cluster, registry and logs by their
//     install-scoped names (EC2 networking and Route53 zones cannot be
//     scoped by name at creation; a permissions boundary would be the next
//     step);
//   - the S3 bucket for the install's Terraform state: versioned,
//     encrypted (SSE-KMS with a bucket key), public access blocked, owner
//     enforced, TLS-only by bucket policy; Terraform >= 1.10 locks it with
//     `use_lockfile`, so no DynamoDB table. The bucket is kept when the
//     stack is deleted.
//
// Deleting the stack is the customer's kill switch: every role goes.
//
// # Assuming a role
//
// AssumeRole assumes one of the roles with aws-sdk-go-v2's STS client and
// the ExternalId, with a deadline on every call, and returns Credentials
// whose Env hands them to Terraform (terraform-exec SetEnv), never on a
// command line and never in a log.
package stack
