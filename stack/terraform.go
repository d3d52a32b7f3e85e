package stack

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Terraform returns the customer's stack as a Terraform module (one
// main.tf), the same roles and bucket as CloudFormation returns. Variable
// enable_break_glass (false by default) creates the break-glass role.
func Terraform(o Options) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# %s\n", description(o))
	w("# Written by `nuon install stack %s --format terraform`.\n\n", o.InstallID)
	w(`terraform {
  required_version = ">= 1.10"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.25.0, < 7.0.0"
    }
  }
}

variable "enable_break_glass" {
  description = "Create the break-glass role (AdministratorAccess for the tenant, for emergencies). Off by default."
  type        = bool
  default     = false
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  install_id  = %s
  external_id = %s
  account_id  = data.aws_caller_identity.current.account_id
  partition   = data.aws_partition.current.partition
  tags        = { "nuon.dev/install" = local.install_id }
}

`, strconv.Quote(o.InstallID), strconv.Quote(o.ExternalID))
	for _, p := range Phases {
		name := tfName(p)
		w("resource \"aws_iam_role\" %q {\n", name)
		if p == BreakGlass {
			w("  count                = var.enable_break_glass ? 1 : 0\n")
		}
		w("  name                 = %q\n", RoleName(o.InstallID, p))
		w("  description          = %q\n", "nuon install "+o.InstallID+": "+string(p)+" role for the tenant")
		w("  max_session_duration = %d\n", o.SessionSeconds)
		w("  tags                 = merge(local.tags, { \"nuon.dev/phase\" = %q })\n", string(p))
		w("  assume_role_policy = jsonencode(%s)\n}\n\n", hcl(trust(o, p), 1))
		if p == BreakGlass {
			w(`resource "aws_iam_role_policy_attachment" "break_glass" {
  count      = var.enable_break_glass ? 1 : 0
  role       = aws_iam_role.break_glass[0].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AdministratorAccess"
}

`)
			continue
		}
		w("resource \"aws_iam_role_policy\" %q {\n", name)
		w("  name = %q\n", RoleName(o.InstallID, p))
		w("  role = aws_iam_role.%s.id\n", name)
		w("  policy = jsonencode(%s)\n}\n\n", hcl(policy(o, p), 1))
	}
	w(`# The state outlives the roles: terraform destroy deletes the roles first
# (they name the bucket), then stops at the bucket while it holds state (no
# force_destroy), so revoking access never deletes the install's history.
resource "aws_s3_bucket" "state" {
  bucket_prefix = "nuon-${local.install_id}-state-"
  tags          = local.tags
}

resource "aws_s3_bucket_versioning" "state" {
  bucket = aws_s3_bucket.state.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "state" {
  bucket = aws_s3_bucket.state.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "aws:kms"
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_public_access_block" "state" {
  bucket                  = aws_s3_bucket.state.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "state" {
  bucket = aws_s3_bucket.state.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_policy" "state" {
  bucket     = aws_s3_bucket.state.id
  depends_on = [aws_s3_bucket_public_access_block.state]
  policy = jsonencode(`)
	b.WriteString(hcl(bucketPolicy(), 1))
	w(`)
}

output "provision_role_arn" {
  value = aws_iam_role.provision.arn
}

output "maintenance_role_arn" {
  value = aws_iam_role.maintenance.arn
}

output "deprovision_role_arn" {
  value = aws_iam_role.deprovision.arn
}

output "break_glass_role_arn" {
  value = one(aws_iam_role.break_glass[*].arn)
}

output "state_bucket" {
  description = "The install's Terraform state bucket (backend \"s3\" with use_lockfile)."
  value       = aws_s3_bucket.state.bucket
}

output "external_id" {
  description = "The ExternalId the tenant presents."
  value       = local.external_id
}
`)
	return b.Bytes(), nil
}

func tfName(p Phase) string { return strings.ReplaceAll(string(p), "-", "_") }

// hcl writes v as an HCL expression (for jsonencode) that starts on a
// line indented by indent levels, laid out as terraform fmt does, with the
// placeholders as interpolations of the module's locals.
func hcl(v any, indent int) string {
	pad := strings.Repeat("  ", indent)
	switch v := v.(type) {
	case obj:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		vals := make([]string, len(keys))
		for i, k := range keys {
			vals[i] = hcl(v[k], indent+1)
		}
		var b strings.Builder
		b.WriteString("{\n")
		// terraform fmt aligns the = of consecutive one-line items; a
		// multi-line item stands alone.
		for i := 0; i < len(keys); {
			j := i
			width := 0
			for j < len(keys) && !strings.Contains(vals[j], "\n") {
				width = max(width, len(strconv.Quote(keys[j])))
				j++
			}
			if j == i {
				fmt.Fprintf(&b, "%s  %s = %s\n", pad, strconv.Quote(keys[i]), vals[i])
				i++
				continue
			}
			for ; i < j; i++ {
				fmt.Fprintf(&b, "%s  %-*s = %s\n", pad, width, strconv.Quote(keys[i]), vals[i])
			}
		}
		b.WriteString(pad + "}")
		return b.String()
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = hcl(e, indent+1)
		}
		return list(parts, pad)
	case []string:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = hcl(e, indent+1)
		}
		return list(parts, pad)
	case string:
		s := strconv.Quote(v)
		// HCL reads ${ and %{ as templates: escape them, then put the
		// placeholders in.
		s = strings.ReplaceAll(s, "${", "$${")
		s = strings.ReplaceAll(s, "%{", "%%{")
		r := strings.NewReplacer(account, "${local.account_id}", partition, "${local.partition}", region, "${data.aws_region.current.region}", bucket, "${aws_s3_bucket.state.bucket}")
		return r.Replace(s)
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	default:
		return strconv.Quote(fmt.Sprint(v))
	}
}

func list(parts []string, pad string) string {
	if len(parts) == 0 {
		return "[]"
	}
	return "[\n" + pad + "  " + strings.Join(parts, ",\n"+pad+"  ") + ",\n" + pad + "]"
}
