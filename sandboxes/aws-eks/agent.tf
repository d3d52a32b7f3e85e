# ---- The agent's identity ------------------------------------------------------

# The agent's pods get this role through EKS Pod Identity.
resource "aws_iam_role" "agent" {
  name = "${local.name}-agent"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "pods.eks.amazonaws.com" }
      Action    = ["sts:AssumeRole", "sts:TagSession"]
      Condition = {
        StringEquals = {
          "aws:SourceAccount" = local.account_id
        }
        ArnEquals = {
          "aws:SourceArn" = aws_eks_cluster.this.arn
        }
      }
    }]
  })
}

locals {
  # Least privilege: no wildcard actions, every resource named except
  # where AWS allows none (ecr:GetAuthorizationToken takes no resource).
  agent_policy = {
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "RegistryLogin"
        Effect   = "Allow"
        Action   = ["ecr:GetAuthorizationToken"]
        Resource = "*"
      },
      {
        Sid      = "InstallRepositories"
        Effect   = "Allow"
        Action   = concat(local.ecr_pull, local.ecr_push, ["ecr:CreateRepository", "ecr:DescribeImages", "ecr:DescribeRepositories", "ecr:ListImages"])
        Resource = ["${local.repository_arn}/*"]
      },
      {
        Sid      = "InstallZones"
        Effect   = "Allow"
        Action   = ["route53:ChangeResourceRecordSets", "route53:GetHostedZone", "route53:ListResourceRecordSets"]
        Resource = [aws_route53_zone.public.arn, aws_route53_zone.private.arn]
      },
      {
        Sid      = "ZoneChanges"
        Effect   = "Allow"
        Action   = ["route53:GetChange"]
        Resource = ["arn:${local.partition}:route53:::change/*"]
      },
      {
        Sid      = "Cluster"
        Effect   = "Allow"
        Action   = ["eks:DescribeCluster"]
        Resource = [aws_eks_cluster.this.arn]
      },
      {
        Sid      = "SandboxUpgrades"
        Effect   = "Allow"
        Action   = ["sts:AssumeRole"]
        Resource = [var.maintenance_role_arn]
      },
    ]
  }
}

resource "aws_iam_role_policy" "agent" {
  name   = "${local.name}-agent"
  role   = aws_iam_role.agent.id
  policy = jsonencode(local.agent_policy)
}

resource "aws_eks_pod_identity_association" "agent" {
  cluster_name    = aws_eks_cluster.this.name
  namespace       = var.agent_namespace
  service_account = var.agent_service_account
  role_arn        = aws_iam_role.agent.arn
  depends_on      = [aws_eks_addon.pod_identity]
}

# ---- DNS -----------------------------------------------------------------------

resource "aws_route53_zone" "public" {
  name          = var.domain
  comment       = "${local.name} public zone"
  force_destroy = true
}

resource "aws_route53_zone" "private" {
  name          = "internal.${var.domain}"
  comment       = "${local.name} private zone"
  force_destroy = true
  vpc {
    vpc_id = aws_vpc.this.id
  }
}
