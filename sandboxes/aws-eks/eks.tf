# ---- Cluster -------------------------------------------------------------------

resource "aws_iam_role" "cluster" {
  name = "${local.name}-cluster"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "eks.amazonaws.com" }
      Action    = ["sts:AssumeRole", "sts:TagSession"]
    }]
  })
}

resource "aws_iam_role_policy_attachment" "cluster" {
  role       = aws_iam_role.cluster.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonEKSClusterPolicy"
}

# Extra security group of the control plane's network interfaces: the
# private endpoint answers only inside the VPC.
resource "aws_security_group" "cluster" {
  name        = "${local.name}-cluster"
  description = "EKS control plane of ${local.name}: API from inside the VPC only"
  vpc_id      = aws_vpc.this.id
  tags        = { Name = "${local.name}-cluster" }
}

# Nodes' own security group, beside the cluster security group EKS makes.
resource "aws_security_group" "node" {
  name        = "${local.name}-node"
  description = "EKS nodes of ${local.name}: no ingress from outside the VPC"
  vpc_id      = aws_vpc.this.id
  tags        = { Name = "${local.name}-node" }
}

# Every ingress rule of the sandbox, by name. None is open to the
# internet: the tests check it.
locals {
  ingress = {
    cluster_api_from_vpc       = { sg = aws_security_group.cluster.id, port = 443, proto = "tcp", cidr = var.vpc_cidr, from_sg = null, what = "Kubernetes API from inside the VPC" }
    cluster_api_from_nodes     = { sg = aws_security_group.cluster.id, port = 443, proto = "tcp", cidr = null, from_sg = aws_security_group.node.id, what = "Kubernetes API from nodes" }
    node_from_node             = { sg = aws_security_group.node.id, port = null, proto = "-1", cidr = null, from_sg = aws_security_group.node.id, what = "node to node" }
    node_kubelet_from_cluster  = { sg = aws_security_group.node.id, port = 10250, proto = "tcp", cidr = null, from_sg = aws_security_group.cluster.id, what = "kubelet from the control plane" }
    node_webhooks_from_cluster = { sg = aws_security_group.node.id, port = 443, proto = "tcp", cidr = null, from_sg = aws_security_group.cluster.id, what = "admission webhooks from the control plane" }
  }
}

resource "aws_vpc_security_group_ingress_rule" "this" {
  for_each                     = local.ingress
  security_group_id            = each.value.sg
  description                  = each.value.what
  ip_protocol                  = each.value.proto
  from_port                    = each.value.port
  to_port                      = each.value.port
  cidr_ipv4                    = each.value.cidr
  referenced_security_group_id = each.value.from_sg
}

# Nodes reach the registry, AWS APIs and the vendor's git host through the
# NAT gateways.
resource "aws_vpc_security_group_egress_rule" "node" {
  security_group_id = aws_security_group.node.id
  description       = "outbound through NAT"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "cluster" {
  security_group_id = aws_security_group.cluster.id
  description       = "control plane to nodes"
  ip_protocol       = "-1"
  cidr_ipv4         = var.vpc_cidr
}

resource "aws_cloudwatch_log_group" "cluster" {
  # EKS writes control-plane logs here; made first so its retention holds.
  name              = "/aws/eks/${local.name}/cluster"
  retention_in_days = 90
}

resource "aws_eks_cluster" "this" {
  name     = local.name
  role_arn = aws_iam_role.cluster.arn
  version  = var.kubernetes_version

  access_config {
    authentication_mode                         = "API"
    bootstrap_cluster_creator_admin_permissions = false
  }

  vpc_config {
    subnet_ids              = [for s in aws_subnet.private : s.id]
    security_group_ids      = [aws_security_group.cluster.id]
    endpoint_private_access = true
    # Public only while nuon install create bootstraps the agent, and only
    # from the tenant's egress CIDRs; then applied again without them.
    endpoint_public_access = length(var.public_access_cidrs) > 0
    public_access_cidrs    = length(var.public_access_cidrs) > 0 ? var.public_access_cidrs : null
  }

  encryption_config {
    resources = ["secrets"]
    provider {
      key_arn = local.kms_key_arn
    }
  }

  enabled_cluster_log_types = ["api", "audit", "authenticator"]

  depends_on = [aws_iam_role_policy_attachment.cluster, aws_cloudwatch_log_group.cluster]
}

resource "aws_eks_access_entry" "this" {
  for_each      = { for e in var.access_entries : e.principal_arn => e }
  cluster_name  = aws_eks_cluster.this.name
  principal_arn = each.key
  type          = "STANDARD"
}

resource "aws_eks_access_policy_association" "this" {
  for_each      = { for e in var.access_entries : e.principal_arn => e }
  cluster_name  = aws_eks_cluster.this.name
  principal_arn = aws_eks_access_entry.this[each.key].principal_arn
  policy_arn    = "arn:${local.partition}:eks::aws:cluster-access-policy/${each.value.policy}"
  access_scope {
    type       = length(each.value.namespaces) == 0 ? "cluster" : "namespace"
    namespaces = length(each.value.namespaces) == 0 ? null : each.value.namespaces
  }
}

# Pod Identity gives the agent its role without OIDC providers or node
# credentials.
resource "aws_eks_addon" "pod_identity" {
  cluster_name = aws_eks_cluster.this.name
  addon_name   = "eks-pod-identity-agent"
}

# ---- Nodes ---------------------------------------------------------------------

resource "aws_iam_role" "node" {
  name = "${local.name}-node"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each   = toset(["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryPullOnly"])
  role       = aws_iam_role.node.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/${each.key}"
}

resource "aws_launch_template" "node" {
  name_prefix            = "${local.name}-node-"
  vpc_security_group_ids = [aws_eks_cluster.this.vpc_config[0].cluster_security_group_id, aws_security_group.node.id]
  # IMDSv2 only, one hop: pods cannot reach the node's credentials.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size = 50
      volume_type = "gp3"
      # The account's EBS key: a customer key would need grants for the
      # Auto Scaling service-linked role in its key policy.
      encrypted = true
    }
  }
  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${local.name}-node" })
  }
}

resource "aws_eks_node_group" "this" {
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "${local.name}-default"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = [for s in aws_subnet.private : s.id]
  instance_types  = var.node_instance_types
  ami_type        = "AL2023_x86_64_STANDARD"

  scaling_config {
    min_size     = var.node_scaling.min
    desired_size = var.node_scaling.desired
    max_size     = var.node_scaling.max
  }

  launch_template {
    id      = aws_launch_template.node.id
    version = aws_launch_template.node.latest_version
  }

  update_config {
    max_unavailable = 1
  }

  depends_on = [aws_iam_role_policy_attachment.node, aws_route.private_nat, aws_route_table_association.private]
}
