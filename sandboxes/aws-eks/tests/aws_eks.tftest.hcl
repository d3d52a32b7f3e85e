# terraform test against the real aws 6.25.0 schema (tools/tfaws) with a
# mock provider: what a regulated customer's reviewer checks first.

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = { account_id = "111122223333" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws", dns_suffix = "amazonaws.com" }
  }
  mock_resource "aws_eks_cluster" {
    defaults = {
      arn                   = "arn:aws:eks:eu-west-1:111122223333:cluster/nuon-acme"
      certificate_authority = [{ data = "Q0E=" }]
    }
  }
  mock_resource "aws_iam_role" {
    defaults = { arn = "arn:aws:iam::111122223333:role/mock" }
  }
  mock_resource "aws_kms_key" {
    defaults = { arn = "arn:aws:kms:eu-west-1:111122223333:key/00000000-0000-0000-0000-000000000001" }
  }
}

variables {
  install_id           = "acme"
  region               = "eu-west-1"
  availability_zones   = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
  domain               = "acme.example.com"
  maintenance_role_arn = "arn:aws:iam::111122223333:role/nuon-acme-maintenance"
  repositories         = ["shop/api", "shop/web"]
  tags                 = { team = "payments", cost-center = "42" }
  access_entries = [
    { principal_arn = "arn:aws:iam::111122223333:role/platform-admins", policy = "AmazonEKSClusterAdminPolicy" },
    { principal_arn = "arn:aws:iam::111122223333:role/oncall", namespaces = ["shop"] },
  ]
}

run "secure_by_default" {
  command = apply

  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].endpoint_public_access == false && aws_eks_cluster.this.vpc_config[0].endpoint_private_access == true
    error_message = "the cluster API must be private only"
  }
  assert {
    condition     = contains(aws_eks_cluster.this.encryption_config[0].resources, "secrets")
    error_message = "Kubernetes secrets must be encrypted with KMS"
  }
  assert {
    condition     = length(aws_kms_key.this) == 1 && aws_kms_key.this[0].enable_key_rotation == true
    error_message = "without a customer key the sandbox makes one, with rotation"
  }
  assert {
    condition     = aws_eks_cluster.this.encryption_config[0].provider[0].key_arn == aws_kms_key.this[0].arn
    error_message = "secrets must be encrypted with the sandbox's key"
  }
  assert {
    condition     = aws_eks_cluster.this.access_config[0].authentication_mode == "API" && aws_eks_cluster.this.access_config[0].bootstrap_cluster_creator_admin_permissions == false
    error_message = "cluster access must come from access entries only"
  }
  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.this : r.cidr_ipv4 != "0.0.0.0/0" && r.cidr_ipv6 != "::/0"])
    error_message = "no security group may accept ingress from the internet"
  }
  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.this : contains([aws_security_group.node.id, aws_security_group.cluster.id], r.security_group_id)])
    error_message = "ingress rules belong to the node and cluster security groups"
  }
  assert {
    condition     = length(aws_default_security_group.this.ingress) == 0 && length(aws_default_security_group.this.egress) == 0
    error_message = "the default security group must allow nothing"
  }
  assert {
    condition     = alltrue([for s in aws_subnet.private : s.map_public_ip_on_launch != true]) && alltrue([for s in aws_subnet.public : s.map_public_ip_on_launch == false])
    error_message = "no subnet hands out public addresses"
  }
  assert {
    condition     = length(aws_subnet.public) == 3 && length(aws_subnet.private) == 3 && length(aws_nat_gateway.this) == 3
    error_message = "one public and one private subnet and a NAT gateway per zone"
  }
  assert {
    condition     = toset(aws_eks_node_group.this.subnet_ids) == toset([for s in aws_subnet.private : s.id])
    error_message = "nodes run in the private subnets"
  }
  assert {
    condition     = aws_launch_template.node.metadata_options[0].http_tokens == "required" && aws_launch_template.node.metadata_options[0].http_put_response_hop_limit == 1
    error_message = "nodes require IMDSv2 with one hop"
  }
}

run "agent_least_privilege" {
  command = apply

  assert {
    condition     = alltrue(flatten([for s in jsondecode(aws_iam_role_policy.agent.policy).Statement : [for a in flatten([s.Action]) : !strcontains(a, "*")]]))
    error_message = "the agent policy must not use wildcard actions"
  }
  assert {
    condition = toset(flatten([for s in jsondecode(aws_iam_role_policy.agent.policy).Statement : s.Action])) == toset([
      "ecr:GetAuthorizationToken",
      "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer",
      "ecr:CompleteLayerUpload", "ecr:InitiateLayerUpload", "ecr:PutImage", "ecr:UploadLayerPart",
      "ecr:CreateRepository", "ecr:DescribeImages", "ecr:DescribeRepositories", "ecr:ListImages",
      "route53:ChangeResourceRecordSets", "route53:GetHostedZone", "route53:ListResourceRecordSets", "route53:GetChange",
      "eks:DescribeCluster",
      "sts:AssumeRole",
    ])
    error_message = "the agent policy grants exactly the expected actions"
  }
  assert {
    condition     = alltrue([for s in jsondecode(aws_iam_role_policy.agent.policy).Statement : s.Resource != "*" || s.Action == ["ecr:GetAuthorizationToken"]])
    error_message = "only ecr:GetAuthorizationToken (which takes no resource) may apply to every resource"
  }
  assert {
    condition     = one([for s in jsondecode(aws_iam_role_policy.agent.policy).Statement : s.Resource if s.Sid == "SandboxUpgrades"]) == [var.maintenance_role_arn]
    error_message = "the agent may assume only the install's maintenance role"
  }
  assert {
    condition     = one([for s in jsondecode(aws_iam_role_policy.agent.policy).Statement : s.Resource if s.Sid == "InstallRepositories"]) == ["arn:aws:ecr:eu-west-1:111122223333:repository/nuon/acme/*"]
    error_message = "the agent's registry rights are scoped to the install's prefix"
  }
  assert {
    condition     = jsondecode(aws_iam_role.agent.assume_role_policy).Statement[0].Principal.Service == "pods.eks.amazonaws.com"
    error_message = "the agent's role is for EKS Pod Identity"
  }
  assert {
    condition     = aws_eks_pod_identity_association.agent.namespace == "nuon-system" && aws_eks_pod_identity_association.agent.service_account == "nuon-agent"
    error_message = "the role is bound to the agent's service account from manifests/"
  }
  assert {
    condition     = alltrue([for p in aws_ecr_repository_policy.this : contains([for s in jsondecode(p.policy).Statement : s.Sid if s.Effect == "Deny"], "OnlyTheAgentPushes")])
    error_message = "every repository denies pushes to anyone but the agent"
  }
  assert {
    condition     = alltrue([for r in aws_ecr_repository.this : r.image_tag_mutability == "IMMUTABLE" && r.force_delete == true && r.image_scanning_configuration[0].scan_on_push])
    error_message = "repositories: immutable tags, scan on push, deletable when not empty"
  }
  assert {
    condition     = toset([for r in aws_ecr_repository.this : r.name]) == toset(["nuon/acme/shop/api", "nuon/acme/shop/web"])
    error_message = "repositories live under the install prefix"
  }
  assert {
    condition     = length(aws_eks_access_entry.this) == 2 && aws_eks_access_policy_association.this["arn:aws:iam::111122223333:role/oncall"].access_scope[0].type == "namespace"
    error_message = "one access entry and policy association per principal, scoped as asked"
  }
  assert {
    condition     = aws_route53_zone.public.force_destroy && aws_route53_zone.private.force_destroy
    error_message = "zones are deletable when they still hold records"
  }
}

run "outputs_contract" {
  command = apply

  assert {
    condition     = lookup(output.tags, "nuon.dev/install", "") == "acme" && lookup(output.tags, "team", "") == "payments"
    error_message = "default tags carry the install id and the customer's tags"
  }
  assert {
    condition     = alltrue([for k in ["name", "endpoint", "certificate_authority", "arn"] : output.cluster[k] != null && output.cluster[k] != ""])
    error_message = "cluster output: name, endpoint, certificate_authority, arn"
  }
  assert {
    condition     = output.vpc.id != null && length(output.vpc.public_subnet_ids) == 3 && length(output.vpc.private_subnet_ids) == 3
    error_message = "vpc output: id, public_subnet_ids, private_subnet_ids"
  }
  assert {
    condition     = output.registry.url == "111122223333.dkr.ecr.eu-west-1.amazonaws.com" && output.registry.repository_prefix == "nuon/acme" && output.registry.region == "eu-west-1"
    error_message = "registry output: url, repository_prefix, region"
  }
  assert {
    condition     = output.dns.domain == "acme.example.com" && output.dns.public_zone_id != null && output.dns.private_zone_id != null
    error_message = "dns output: domain, public_zone_id, private_zone_id"
  }
  assert {
    condition     = output.agent.role_arn != null && output.agent.namespace == "nuon-system" && output.agent.service_account == "nuon-agent"
    error_message = "agent output: role_arn, namespace, service_account"
  }
}

run "customer_key" {
  command = apply
  variables {
    kms_key_arn = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition     = length(aws_kms_key.this) == 0
    error_message = "with a customer key the sandbox makes none"
  }
  assert {
    condition     = aws_eks_cluster.this.encryption_config[0].provider[0].key_arn == var.kms_key_arn
    error_message = "secrets are encrypted with the customer's key"
  }
  assert {
    condition     = alltrue([for r in aws_ecr_repository.this : r.encryption_configuration[0].kms_key == var.kms_key_arn])
    error_message = "the registry is encrypted with the customer's key"
  }
}

run "single_nat" {
  command = plan
  variables {
    single_nat_gateway = true
  }
  assert {
    condition     = length(aws_nat_gateway.this) == 1
    error_message = "single_nat_gateway makes one NAT gateway"
  }
}

run "bootstrap_endpoint" {
  command = plan
  variables {
    public_access_cidrs = ["203.0.113.7/32", "198.51.100.0/28"]
  }
  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].endpoint_public_access == true && aws_eks_cluster.this.vpc_config[0].endpoint_private_access == true
    error_message = "during the bootstrap the endpoint is public as well as private"
  }
  assert {
    condition     = toset(aws_eks_cluster.this.vpc_config[0].public_access_cidrs) == toset(["203.0.113.7/32", "198.51.100.0/28"])
    error_message = "the public endpoint is open to the tenant's egress CIDRs only"
  }
}

run "closed_after_bootstrap" {
  command = plan
  variables {
    public_access_cidrs = []
  }
  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].endpoint_public_access == false
    error_message = "without public_access_cidrs the endpoint is private only"
  }
}

run "rejects_open_endpoint" {
  command = plan
  variables {
    public_access_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.public_access_cidrs]
}

run "rejects_ipv6_or_garbage_cidr" {
  command = plan
  variables {
    public_access_cidrs = ["203.0.113.7"]
  }
  expect_failures = [var.public_access_cidrs]
}

run "rejects_bad_install_id" {
  command = plan
  variables {
    install_id = "Acme_Corp"
  }
  expect_failures = [var.install_id]
}

run "rejects_one_zone" {
  command = plan
  variables {
    availability_zones = ["eu-west-1a"]
  }
  expect_failures = [var.availability_zones]
}

run "rejects_key_alias" {
  command = plan
  variables {
    kms_key_arn = "alias/my-key"
  }
  expect_failures = [var.kms_key_arn]
}

run "rejects_bad_principal" {
  command = plan
  variables {
    access_entries = [{ principal_arn = "arn:aws:iam::111122223333:root" }]
  }
  expect_failures = [var.access_entries]
}

run "rejects_unknown_access_policy" {
  command = plan
  variables {
    access_entries = [{ principal_arn = "arn:aws:iam::111122223333:role/x", policy = "AdministratorAccess" }]
  }
  expect_failures = [var.access_entries]
}

run "rejects_tag_override" {
  command = plan
  variables {
    tags = { "nuon.dev/install" = "other" }
  }
  expect_failures = [var.tags]
}

run "rejects_large_vpc" {
  command = plan
  variables {
    vpc_cidr = "10.0.0.0/8"
  }
  expect_failures = [var.vpc_cidr]
}
