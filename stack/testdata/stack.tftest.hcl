# terraform test of the stack's Terraform variant against the real aws
# 6.25.0 schema (tools/tfaws) with a mock provider.

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = { account_id = "210987654321" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_resource "aws_s3_bucket" {
    defaults = { bucket = "nuon-acme-state-0001" }
  }
}

run "defaults" {
  command = apply

  assert {
    condition     = length(aws_iam_role.break_glass) == 0 && output.break_glass_role_arn == null
    error_message = "the break-glass role is off by default"
  }
  assert {
    condition = alltrue([for r in [aws_iam_role.provision, aws_iam_role.maintenance, aws_iam_role.deprovision] :
      jsondecode(r.assume_role_policy).Statement[0].Condition.StringEquals["sts:ExternalId"] == "nuon-golden-external-id-0000000000" &&
    jsondecode(r.assume_role_policy).Statement[0].Principal.AWS == "arn:aws:iam::123456789012:root"])
    error_message = "every role trusts only the tenant's account, with the ExternalId"
  }
  assert {
    condition     = aws_s3_bucket_versioning.state.versioning_configuration[0].status == "Enabled"
    error_message = "the state bucket is versioned"
  }
  assert {
    condition     = one(aws_s3_bucket_server_side_encryption_configuration.state.rule).apply_server_side_encryption_by_default[0].sse_algorithm == "aws:kms"
    error_message = "the state bucket is encrypted"
  }
  assert {
    condition     = aws_s3_bucket_public_access_block.state.block_public_acls && aws_s3_bucket_public_access_block.state.block_public_policy && aws_s3_bucket_public_access_block.state.ignore_public_acls && aws_s3_bucket_public_access_block.state.restrict_public_buckets
    error_message = "the state bucket blocks public access"
  }
  assert {
    condition     = jsondecode(aws_s3_bucket_policy.state.policy).Statement[0].Condition.Bool["aws:SecureTransport"] == "false" && jsondecode(aws_s3_bucket_policy.state.policy).Statement[0].Effect == "Deny"
    error_message = "the state bucket refuses requests without TLS"
  }
  assert {
    condition     = contains(jsondecode(aws_iam_role_policy.deprovision.policy).Statement[4].Resource, "arn:aws:s3:::nuon-acme-state-0001/*")
    error_message = "the deprovision role reaches the state bucket"
  }
  assert {
    condition     = output.external_id == "nuon-golden-external-id-0000000000"
    error_message = "the ExternalId is an output"
  }
}

run "break_glass_enabled" {
  command = apply
  variables {
    enable_break_glass = true
  }
  assert {
    condition     = length(aws_iam_role.break_glass) == 1 && output.break_glass_role_arn != null
    error_message = "enable_break_glass creates the break-glass role"
  }
}
