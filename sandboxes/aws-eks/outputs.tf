# The outputs contract: sandboxes/local has the same outputs. See
# ../README.md.

output "cluster" {
  description = "The Kubernetes cluster: name, API endpoint (private), base64 CA certificate, ARN."
  value = {
    name                  = aws_eks_cluster.this.name
    endpoint              = aws_eks_cluster.this.endpoint
    certificate_authority = aws_eks_cluster.this.certificate_authority[0].data
    arn                   = aws_eks_cluster.this.arn
  }
}

output "vpc" {
  description = "The network: VPC id, public and private subnet ids (in zone order)."
  value = {
    id                 = aws_vpc.this.id
    public_subnet_ids  = [for az in local.azs : aws_subnet.public[az].id]
    private_subnet_ids = [for az in local.azs : aws_subnet.private[az].id]
  }
}

output "registry" {
  description = "The install's registry: host, repository prefix and region."
  value = {
    url               = local.registry_host
    repository_prefix = local.repository_prefix
    region            = var.region
  }
}

output "dns" {
  description = "The install's domain and its public and private zones."
  value = {
    domain          = var.domain
    public_zone_id  = aws_route53_zone.public.zone_id
    private_zone_id = aws_route53_zone.private.zone_id
  }
}

output "agent" {
  description = "The agent's identity: IAM role and the service account it is bound to."
  value = {
    role_arn        = aws_iam_role.agent.arn
    namespace       = var.agent_namespace
    service_account = var.agent_service_account
  }
}

output "tags" {
  description = "The tags every resource carries (provider default_tags)."
  value       = local.tags
}
