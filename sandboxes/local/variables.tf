variable "install_id" {
  description = "The install's id: names the cluster and the repository prefix."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$", var.install_id))
    error_message = "install_id must be 3-32 of [a-z0-9-], starting and ending with a letter or digit."
  }
}

variable "dir" {
  description = "Absolute directory for the sandbox's processes: their data, certificates, logs and pid files (kube/, registry/). Destroy removes them."
  type        = string
  validation {
    condition     = startswith(var.dir, "/")
    error_message = "dir must be an absolute path."
  }
}

variable "kube_assets" {
  description = "Directory holding etcd, kube-apiserver and kube-controller-manager (make kube-binaries: ~/.cache/nuon/kube/<version>)."
  type        = string
}

variable "domain" {
  description = "The install's domain; default <install_id>.nuon.localhost (resolves to loopback, no zone is made)."
  type        = string
  default     = null
}

variable "agent_namespace" {
  description = "The agent's namespace; must match manifests/."
  type        = string
  default     = "nuon-system"
}

variable "agent_service_account" {
  description = "The agent's service account; must match manifests/."
  type        = string
  default     = "nuon-agent"
}
