# nuon install acme: roles the tenant (account 123456789012) may assume with this install's ExternalId, one per phase, and the install's Terraform state bucket. Delete this stack to revoke all access.
# Written by `nuon install stack acme --format terraform`.

terraform {
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
  install_id  = "acme"
  external_id = "nuon-golden-external-id-0000000000"
  account_id  = data.aws_caller_identity.current.account_id
  partition   = data.aws_partition.current.partition
  tags        = { "nuon.dev/install" = local.install_id }
}

resource "aws_iam_role" "provision" {
  name                 = "nuon-acme-provision"
  description          = "nuon install acme: provision role for the tenant"
  max_session_duration = 3600
  tags                 = merge(local.tags, { "nuon.dev/phase" = "provision" })
  assume_role_policy = jsonencode({
    "Statement" = [
      {
        "Action" = "sts:AssumeRole"
        "Condition" = {
          "StringEquals" = {
            "sts:ExternalId" = "nuon-golden-external-id-0000000000"
          }
        }
        "Effect" = "Allow"
        "Principal" = {
          "AWS" = "arn:${local.partition}:iam::123456789012:root"
        }
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role_policy" "provision" {
  name = "nuon-acme-provision"
  role = aws_iam_role.provision.id
  policy = jsonencode({
    "Statement" = [
      {
        "Action" = [
          "ec2:*",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Network"
      },
      {
        "Action" = [
          "eks:*",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:eks:*:${local.account_id}:cluster/nuon-acme",
          "arn:${local.partition}:eks:*:${local.account_id}:nodegroup/nuon-acme/*",
          "arn:${local.partition}:eks:*:${local.account_id}:addon/nuon-acme/*",
          "arn:${local.partition}:eks:*:${local.account_id}:access-entry/nuon-acme/*",
          "arn:${local.partition}:eks:*:${local.account_id}:podidentityassociation/nuon-acme/*",
        ]
        "Sid" = "Cluster"
      },
      {
        "Action" = [
          "eks:DescribeAccessPolicies",
          "eks:DescribeAddonVersions",
          "eks:ListClusters",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "ClusterPolicies"
      },
      {
        "Action" = [
          "ecr:CreateRepository",
          "ecr:DeleteRepository",
          "ecr:DeleteRepositoryPolicy",
          "ecr:DescribeRepositories",
          "ecr:GetRepositoryPolicy",
          "ecr:ListTagsForResource",
          "ecr:PutImageScanningConfiguration",
          "ecr:PutImageTagMutability",
          "ecr:SetRepositoryPolicy",
          "ecr:TagResource",
          "ecr:UntagResource",
        ]
        "Effect"   = "Allow"
        "Resource" = "arn:${local.partition}:ecr:*:${local.account_id}:repository/nuon/acme/*"
        "Sid"      = "Registry"
      },
      {
        "Action" = [
          "logs:CreateLogGroup",
          "logs:DeleteLogGroup",
          "logs:ListTagsForResource",
          "logs:ListTagsLogGroup",
          "logs:PutRetentionPolicy",
          "logs:TagLogGroup",
          "logs:TagResource",
          "logs:UntagLogGroup",
          "logs:UntagResource",
        ]
        "Effect"   = "Allow"
        "Resource" = "arn:${local.partition}:logs:*:${local.account_id}:log-group:/aws/eks/nuon-acme/*"
        "Sid"      = "Logs"
      },
      {
        "Action" = [
          "autoscaling:Describe*",
          "elasticloadbalancing:Describe*",
          "logs:DescribeLogGroups",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Describe"
      },
      {
        "Action" = [
          "kms:CreateAlias",
          "kms:CreateKey",
          "kms:DeleteAlias",
          "kms:DescribeKey",
          "kms:EnableKeyRotation",
          "kms:GetKeyPolicy",
          "kms:GetKeyRotationStatus",
          "kms:ListAliases",
          "kms:ListResourceTags",
          "kms:PutKeyPolicy",
          "kms:ScheduleKeyDeletion",
          "kms:TagResource",
          "kms:UntagResource",
          "kms:UpdateKeyDescription",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Keys"
      },
      {
        "Action" = [
          "kms:CreateGrant",
        ]
        "Condition" = {
          "Bool" = {
            "kms:GrantIsForAWSResource" = "true"
          }
        }
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "KeyGrantsForServices"
      },
      {
        "Action" = [
          "route53:*",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Zones"
      },
      {
        "Action" = [
          "iam:CreateRole",
          "iam:DeleteRole",
          "iam:DeleteRolePolicy",
          "iam:DetachRolePolicy",
          "iam:GetRole",
          "iam:GetRolePolicy",
          "iam:ListAttachedRolePolicies",
          "iam:ListInstanceProfilesForRole",
          "iam:ListRolePolicies",
          "iam:PassRole",
          "iam:PutRolePolicy",
          "iam:TagRole",
          "iam:UntagRole",
          "iam:UpdateAssumeRolePolicy",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-cluster",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-node",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-agent",
        ]
        "Sid" = "SandboxRoles"
      },
      {
        "Action" = [
          "iam:AttachRolePolicy",
        ]
        "Condition" = {
          "ArnEquals" = {
            "iam:PolicyARN" = [
              "arn:${local.partition}:iam::aws:policy/AmazonEKSClusterPolicy",
              "arn:${local.partition}:iam::aws:policy/AmazonEKSWorkerNodePolicy",
              "arn:${local.partition}:iam::aws:policy/AmazonEKS_CNI_Policy",
              "arn:${local.partition}:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
            ]
          }
        }
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-cluster",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-node",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-agent",
        ]
        "Sid" = "SandboxManagedPolicies"
      },
      {
        "Action" = [
          "iam:CreateServiceLinkedRole",
        ]
        "Condition" = {
          "StringEquals" = {
            "iam:AWSServiceName" = [
              "eks.amazonaws.com",
              "eks-nodegroup.amazonaws.com",
              "autoscaling.amazonaws.com",
              "elasticloadbalancing.amazonaws.com",
            ]
          }
        }
        "Effect"   = "Allow"
        "Resource" = "arn:${local.partition}:iam::${local.account_id}:role/aws-service-role/*"
        "Sid"      = "ServiceLinkedRoles"
      },
      {
        "Action" = [
          "s3:DeleteObject",
          "s3:GetObject",
          "s3:ListBucket",
          "s3:PutObject",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}",
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}/*",
        ]
        "Sid" = "TerraformState"
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role" "maintenance" {
  name                 = "nuon-acme-maintenance"
  description          = "nuon install acme: maintenance role for the tenant"
  max_session_duration = 3600
  tags                 = merge(local.tags, { "nuon.dev/phase" = "maintenance" })
  assume_role_policy = jsonencode({
    "Statement" = [
      {
        "Action" = "sts:AssumeRole"
        "Condition" = {
          "StringEquals" = {
            "sts:ExternalId" = "nuon-golden-external-id-0000000000"
          }
        }
        "Effect" = "Allow"
        "Principal" = {
          "AWS" = "arn:${local.partition}:iam::123456789012:root"
        }
      },
      {
        "Action" = "sts:AssumeRole"
        "Condition" = {
          "ArnEquals" = {
            "aws:PrincipalArn" = "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-agent"
          }
        }
        "Effect" = "Allow"
        "Principal" = {
          "AWS" = "arn:${local.partition}:iam::${local.account_id}:root"
        }
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role_policy" "maintenance" {
  name = "nuon-acme-maintenance"
  role = aws_iam_role.maintenance.id
  policy = jsonencode({
    "Statement" = [
      {
        "Action" = [
          "ec2:*",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Network"
      },
      {
        "Action" = [
          "eks:*",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:eks:*:${local.account_id}:cluster/nuon-acme",
          "arn:${local.partition}:eks:*:${local.account_id}:nodegroup/nuon-acme/*",
          "arn:${local.partition}:eks:*:${local.account_id}:addon/nuon-acme/*",
          "arn:${local.partition}:eks:*:${local.account_id}:access-entry/nuon-acme/*",
          "arn:${local.partition}:eks:*:${local.account_id}:podidentityassociation/nuon-acme/*",
        ]
        "Sid" = "Cluster"
      },
      {
        "Action" = [
          "eks:DescribeAccessPolicies",
          "eks:DescribeAddonVersions",
          "eks:ListClusters",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "ClusterPolicies"
      },
      {
        "Action" = [
          "ecr:CreateRepository",
          "ecr:DeleteRepository",
          "ecr:DeleteRepositoryPolicy",
          "ecr:DescribeRepositories",
          "ecr:GetRepositoryPolicy",
          "ecr:ListTagsForResource",
          "ecr:PutImageScanningConfiguration",
          "ecr:PutImageTagMutability",
          "ecr:SetRepositoryPolicy",
          "ecr:TagResource",
          "ecr:UntagResource",
        ]
        "Effect"   = "Allow"
        "Resource" = "arn:${local.partition}:ecr:*:${local.account_id}:repository/nuon/acme/*"
        "Sid"      = "Registry"
      },
      {
        "Action" = [
          "logs:CreateLogGroup",
          "logs:DeleteLogGroup",
          "logs:ListTagsForResource",
          "logs:ListTagsLogGroup",
          "logs:PutRetentionPolicy",
          "logs:TagLogGroup",
          "logs:TagResource",
          "logs:UntagLogGroup",
          "logs:UntagResource",
        ]
        "Effect"   = "Allow"
        "Resource" = "arn:${local.partition}:logs:*:${local.account_id}:log-group:/aws/eks/nuon-acme/*"
        "Sid"      = "Logs"
      },
      {
        "Action" = [
          "autoscaling:Describe*",
          "elasticloadbalancing:Describe*",
          "logs:DescribeLogGroups",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Describe"
      },
      {
        "Action" = [
          "kms:CreateAlias",
          "kms:CreateKey",
          "kms:DeleteAlias",
          "kms:DescribeKey",
          "kms:EnableKeyRotation",
          "kms:GetKeyPolicy",
          "kms:GetKeyRotationStatus",
          "kms:ListAliases",
          "kms:ListResourceTags",
          "kms:PutKeyPolicy",
          "kms:ScheduleKeyDeletion",
          "kms:TagResource",
          "kms:UntagResource",
          "kms:UpdateKeyDescription",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Keys"
      },
      {
        "Action" = [
          "kms:CreateGrant",
        ]
        "Condition" = {
          "Bool" = {
            "kms:GrantIsForAWSResource" = "true"
          }
        }
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "KeyGrantsForServices"
      },
      {
        "Action" = [
          "route53:*",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Zones"
      },
      {
        "Action" = [
          "iam:CreateRole",
          "iam:DeleteRole",
          "iam:DeleteRolePolicy",
          "iam:DetachRolePolicy",
          "iam:GetRole",
          "iam:GetRolePolicy",
          "iam:ListAttachedRolePolicies",
          "iam:ListInstanceProfilesForRole",
          "iam:ListRolePolicies",
          "iam:PassRole",
          "iam:PutRolePolicy",
          "iam:TagRole",
          "iam:UntagRole",
          "iam:UpdateAssumeRolePolicy",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-cluster",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-node",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-agent",
        ]
        "Sid" = "SandboxRoles"
      },
      {
        "Action" = [
          "iam:AttachRolePolicy",
        ]
        "Condition" = {
          "ArnEquals" = {
            "iam:PolicyARN" = [
              "arn:${local.partition}:iam::aws:policy/AmazonEKSClusterPolicy",
              "arn:${local.partition}:iam::aws:policy/AmazonEKSWorkerNodePolicy",
              "arn:${local.partition}:iam::aws:policy/AmazonEKS_CNI_Policy",
              "arn:${local.partition}:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
            ]
          }
        }
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-cluster",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-node",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-agent",
        ]
        "Sid" = "SandboxManagedPolicies"
      },
      {
        "Action" = [
          "iam:CreateServiceLinkedRole",
        ]
        "Condition" = {
          "StringEquals" = {
            "iam:AWSServiceName" = [
              "eks.amazonaws.com",
              "eks-nodegroup.amazonaws.com",
              "autoscaling.amazonaws.com",
              "elasticloadbalancing.amazonaws.com",
            ]
          }
        }
        "Effect"   = "Allow"
        "Resource" = "arn:${local.partition}:iam::${local.account_id}:role/aws-service-role/*"
        "Sid"      = "ServiceLinkedRoles"
      },
      {
        "Action" = [
          "s3:DeleteObject",
          "s3:GetObject",
          "s3:ListBucket",
          "s3:PutObject",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}",
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}/*",
        ]
        "Sid" = "TerraformState"
      },
      {
        "Action" = [
          "ec2:DeleteVpc",
          "eks:DeleteCluster",
          "kms:ScheduleKeyDeletion",
          "route53:DeleteHostedZone",
          "ecr:DeleteRepository",
        ]
        "Effect"   = "Deny"
        "Resource" = "*"
        "Sid"      = "NoTeardown"
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role" "deprovision" {
  name                 = "nuon-acme-deprovision"
  description          = "nuon install acme: deprovision role for the tenant"
  max_session_duration = 3600
  tags                 = merge(local.tags, { "nuon.dev/phase" = "deprovision" })
  assume_role_policy = jsonencode({
    "Statement" = [
      {
        "Action" = "sts:AssumeRole"
        "Condition" = {
          "StringEquals" = {
            "sts:ExternalId" = "nuon-golden-external-id-0000000000"
          }
        }
        "Effect" = "Allow"
        "Principal" = {
          "AWS" = "arn:${local.partition}:iam::123456789012:root"
        }
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role_policy" "deprovision" {
  name = "nuon-acme-deprovision"
  role = aws_iam_role.deprovision.id
  policy = jsonencode({
    "Statement" = [
      {
        "Action" = [
          "autoscaling:Describe*",
          "ec2:Describe*",
          "ecr:Describe*",
          "ecr:List*",
          "eks:Describe*",
          "eks:List*",
          "elasticloadbalancing:Describe*",
          "kms:Describe*",
          "kms:GetKeyPolicy",
          "kms:GetKeyRotationStatus",
          "kms:List*",
          "logs:Describe*",
          "logs:ListTagsForResource",
          "route53:Get*",
          "route53:List*",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Describe"
      },
      {
        "Action" = [
          "ec2:DeleteInternetGateway",
          "ec2:DeleteLaunchTemplate",
          "ec2:DeleteNatGateway",
          "ec2:DeleteRoute",
          "ec2:DeleteRouteTable",
          "ec2:DeleteSecurityGroup",
          "ec2:DeleteSubnet",
          "ec2:DeleteVpc",
          "ec2:DetachInternetGateway",
          "ec2:DisassociateAddress",
          "ec2:DisassociateRouteTable",
          "ec2:ReleaseAddress",
          "ec2:RevokeSecurityGroupEgress",
          "ec2:RevokeSecurityGroupIngress",
          "ecr:BatchDeleteImage",
          "ecr:DeleteRepository",
          "ecr:DeleteRepositoryPolicy",
          "eks:DeleteAccessEntry",
          "eks:DeleteAddon",
          "eks:DeleteCluster",
          "eks:DeleteNodegroup",
          "eks:DeletePodIdentityAssociation",
          "eks:DisassociateAccessPolicy",
          "kms:DeleteAlias",
          "kms:ScheduleKeyDeletion",
          "logs:DeleteLogGroup",
          "route53:DeleteHostedZone",
        ]
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "Delete"
      },
      {
        "Action" = [
          "route53:ChangeResourceRecordSets",
        ]
        "Condition" = {
          "ForAllValues:StringEquals" = {
            "route53:ChangeResourceRecordSetsActions" = [
              "DELETE",
            ]
          }
        }
        "Effect"   = "Allow"
        "Resource" = "*"
        "Sid"      = "EmptyZones"
      },
      {
        "Action" = [
          "iam:DeleteRole",
          "iam:DeleteRolePolicy",
          "iam:DetachRolePolicy",
          "iam:GetRole",
          "iam:GetRolePolicy",
          "iam:ListAttachedRolePolicies",
          "iam:ListInstanceProfilesForRole",
          "iam:ListRolePolicies",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-cluster",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-node",
          "arn:${local.partition}:iam::${local.account_id}:role/nuon-acme-agent",
        ]
        "Sid" = "SandboxRoles"
      },
      {
        "Action" = [
          "s3:DeleteObject",
          "s3:GetObject",
          "s3:ListBucket",
          "s3:PutObject",
        ]
        "Effect" = "Allow"
        "Resource" = [
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}",
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}/*",
        ]
        "Sid" = "TerraformState"
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role" "break_glass" {
  count                = var.enable_break_glass ? 1 : 0
  name                 = "nuon-acme-break-glass"
  description          = "nuon install acme: break-glass role for the tenant"
  max_session_duration = 3600
  tags                 = merge(local.tags, { "nuon.dev/phase" = "break-glass" })
  assume_role_policy = jsonencode({
    "Statement" = [
      {
        "Action" = "sts:AssumeRole"
        "Condition" = {
          "StringEquals" = {
            "sts:ExternalId" = "nuon-golden-external-id-0000000000"
          }
        }
        "Effect" = "Allow"
        "Principal" = {
          "AWS" = "arn:${local.partition}:iam::123456789012:root"
        }
      },
    ]
    "Version" = "2012-10-17"
  })
}

resource "aws_iam_role_policy_attachment" "break_glass" {
  count      = var.enable_break_glass ? 1 : 0
  role       = aws_iam_role.break_glass[0].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AdministratorAccess"
}

# The state outlives the roles: terraform destroy deletes the roles first
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
  policy = jsonencode({
    "Statement" = [
      {
        "Action" = "s3:*"
        "Condition" = {
          "Bool" = {
            "aws:SecureTransport" = "false"
          }
        }
        "Effect"    = "Deny"
        "Principal" = "*"
        "Resource" = [
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}",
          "arn:${local.partition}:s3:::${aws_s3_bucket.state.bucket}/*",
        ]
        "Sid" = "TLSOnly"
      },
    ]
    "Version" = "2012-10-17"
  })
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
