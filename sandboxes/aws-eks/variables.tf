variable "install_id" {
  description = "The install's id: names every resource (nuon-<id>) and tags it (nuon.dev/install)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$", var.install_id))
    error_message = "install_id must be 3-32 lower-case letters, digits or dashes, not starting or ending with a dash."
  }
}

variable "region" {
  description = "AWS region of the install."
  type        = string
  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as us-east-1."
  }
}

variable "availability_zones" {
  description = "Two or three availability zones of the region: one public and one private subnet (and one NAT gateway) in each."
  type        = list(string)
  validation {
    condition     = length(var.availability_zones) >= 2 && length(var.availability_zones) <= 3 && length(distinct(var.availability_zones)) == length(var.availability_zones)
    error_message = "availability_zones must list 2 or 3 distinct zones."
  }
}

variable "vpc_cidr" {
  description = "IPv4 range of the VPC, a /16 to /20; subnets are carved from it."
  type        = string
  default     = "10.0.0.0/16"
  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) >= 16 && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be an IPv4 CIDR between /16 and /20."
  }
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all zones (cheaper, not zone-redundant) instead of one per zone."
  type        = bool
  default     = false
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version."
  type        = string
  default     = "1.33"
  validation {
    condition     = can(regex("^1\\.[0-9]+$", var.kubernetes_version))
    error_message = "kubernetes_version must look like 1.33."
  }
}

variable "kms_key_arn" {
  description = "A customer-managed KMS key to encrypt Kubernetes secrets and the registry with. Null (the default) creates a key for the install, with yearly rotation."
  type        = string
  default     = null
  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[a-f0-9-]{36}$", var.kms_key_arn))
    error_message = "kms_key_arn must be the ARN of a KMS key (arn:aws:kms:REGION:ACCOUNT:key/UUID), not an alias."
  }
}

variable "access_entries" {
  description = "IAM principals given access to the cluster, each with one EKS access policy (AmazonEKSClusterAdminPolicy, AmazonEKSAdminPolicy, AmazonEKSEditPolicy or AmazonEKSViewPolicy) over the whole cluster or some namespaces."
  type = list(object({
    principal_arn = string
    policy        = optional(string, "AmazonEKSViewPolicy")
    namespaces    = optional(list(string), [])
  }))
  default = []
  validation {
    condition     = alltrue([for e in var.access_entries : can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+$", e.principal_arn))])
    error_message = "every access_entries principal_arn must be an IAM role or user ARN."
  }
  validation {
    condition     = alltrue([for e in var.access_entries : contains(["AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy", "AmazonEKSEditPolicy", "AmazonEKSViewPolicy"], e.policy)])
    error_message = "every access_entries policy must be AmazonEKSClusterAdminPolicy, AmazonEKSAdminPolicy, AmazonEKSEditPolicy or AmazonEKSViewPolicy."
  }
  validation {
    condition     = length(distinct([for e in var.access_entries : e.principal_arn])) == length(var.access_entries)
    error_message = "access_entries must name each principal once."
  }
}

variable "public_access_cidrs" {
  description = "The tenant's egress CIDRs the cluster's public API endpoint is opened to, only while nuon install create bootstraps the agent. Empty (the default): private endpoint only."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.public_access_cidrs : can(cidrhost(c, 0)) && !endswith(c, "/0") && strcontains(c, ".")])
    error_message = "public_access_cidrs must be IPv4 CIDRs narrower than /0 (the tenant's egress addresses, e.g. 203.0.113.7/32)."
  }
  validation {
    condition     = length(var.public_access_cidrs) <= 40
    error_message = "public_access_cidrs takes at most 40 CIDRs (an EKS limit)."
  }
}

variable "node_instance_types" {
  description = "Instance types of the managed node group."
  type        = list(string)
  default     = ["m6i.large"]
  validation {
    condition     = length(var.node_instance_types) > 0
    error_message = "node_instance_types must not be empty."
  }
}

variable "node_scaling" {
  description = "Size of the managed node group."
  type = object({
    min     = number
    desired = number
    max     = number
  })
  default = { min = 2, desired = 2, max = 4 }
  validation {
    condition     = var.node_scaling.min >= 1 && var.node_scaling.min <= var.node_scaling.desired && var.node_scaling.desired <= var.node_scaling.max
    error_message = "node_scaling must satisfy 1 <= min <= desired <= max."
  }
}

variable "domain" {
  description = "The install's public DNS domain (a public Route53 zone); internal.<domain> is its private zone."
  type        = string
  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]{2,63}$", var.domain))
    error_message = "domain must be a lower-case DNS name such as acme.example.com."
  }
}

variable "repositories" {
  description = "Names of the install's ECR repositories, created under nuon/<install_id>/ (the agent copies the vendor's artifacts into them)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for r in var.repositories : can(regex("^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$", r))])
    error_message = "repositories must be ECR repository names (lower-case, digits, . _ - and /)."
  }
}

variable "maintenance_role_arn" {
  description = "The install's maintenance role (from the customer's stack): the only role the agent may assume, to upgrade the sandbox."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", var.maintenance_role_arn))
    error_message = "maintenance_role_arn must be an IAM role ARN."
  }
}

variable "agent_namespace" {
  description = "Namespace of the agent's service account (manifests/)."
  type        = string
  default     = "nuon-system"
}

variable "agent_service_account" {
  description = "The agent's service account (manifests/)."
  type        = string
  default     = "nuon-agent"
}

variable "tags" {
  description = "The customer's tags, added to every resource."
  type        = map(string)
  default     = {}
  validation {
    condition     = !contains(keys(var.tags), "nuon.dev/install")
    error_message = "tags must not set nuon.dev/install: the install id sets it."
  }
}
