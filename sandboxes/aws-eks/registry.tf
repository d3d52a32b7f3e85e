# ---- Registry ------------------------------------------------------------------

locals {
  repository_prefix = "nuon/${var.install_id}"
  registry_host     = "${local.account_id}.dkr.ecr.${var.region}.${data.aws_partition.current.dns_suffix}"
  repository_arn    = "arn:${local.partition}:ecr:${var.region}:${local.account_id}:repository/${local.repository_prefix}"

  ecr_pull = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
  ecr_push = ["ecr:CompleteLayerUpload", "ecr:InitiateLayerUpload", "ecr:PutImage", "ecr:UploadLayerPart"]
}

resource "aws_ecr_repository" "this" {
  for_each             = toset(var.repositories)
  name                 = "${local.repository_prefix}/${each.key}"
  image_tag_mutability = "IMMUTABLE"
  # Teardown deletes repositories that still hold images.
  force_delete = true
  image_scanning_configuration {
    scan_on_push = true
  }
  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = local.kms_key_arn
  }
}

# Push and pull for the agent, pull for the nodes, and a deny of pushes
# for every other principal, whatever its IAM policies say.
resource "aws_ecr_repository_policy" "this" {
  for_each   = aws_ecr_repository.this
  repository = each.value.name
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AgentPushPull"
        Effect    = "Allow"
        Principal = { AWS = aws_iam_role.agent.arn }
        Action    = concat(local.ecr_pull, local.ecr_push)
      },
      {
        Sid       = "NodesPull"
        Effect    = "Allow"
        Principal = { AWS = aws_iam_role.node.arn }
        Action    = local.ecr_pull
      },
      {
        Sid       = "OnlyTheAgentPushes"
        Effect    = "Deny"
        Principal = { AWS = "*" }
        Action    = local.ecr_push
        Condition = { ArnNotEquals = { "aws:PrincipalArn" = aws_iam_role.agent.arn } }
      },
    ]
  })
}
