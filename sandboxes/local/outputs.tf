# The outputs contract (../README.md). Values with no local meaning are
# documented placeholders, so components that read them still render.

output "cluster" {
  description = "The local kube-apiserver. kubeconfig (local only) is the admin kubeconfig's path; it holds a token, so it is a path and never content."
  value = {
    name                  = "nuon-${var.install_id}"
    endpoint              = local.kubeconfig.clusters[0].cluster.server
    certificate_authority = local.kubeconfig.clusters[0].cluster["certificate-authority-data"]
    arn                   = "local:${var.dir}/kube"
    kubeconfig            = data.local_file.kubeconfig.filename
  }
}

output "vpc" {
  description = "Placeholders: there is no network on a developer machine; the subnet lists are empty."
  value = {
    id                 = "local"
    public_subnet_ids  = []
    private_subnet_ids = []
  }
}

output "registry" {
  description = "The install's registry. Local only: username, password_file (mode 0600) and ca_file, which ECR replaces with GetAuthorizationToken and a public CA."
  value = {
    url               = trimspace(data.local_file.registry_host.content)
    repository_prefix = "nuon/${var.install_id}"
    region            = "local"
    username          = "nuon"
    password_file     = "${local.registry_dir}/password"
    ca_file           = "${local.registry_dir}/cert.pem"
  }
}

output "dns" {
  description = "A local domain; no zone is made, so both zone ids are the placeholder \"local\"."
  value = {
    domain          = coalesce(var.domain, "${var.install_id}.nuon.localhost")
    public_zone_id  = "local"
    private_zone_id = "local"
  }
}

output "agent" {
  description = "The agent's identity. role_arn is empty: locally the agent runs as a process with the operator's identity."
  value = {
    role_arn        = ""
    namespace       = var.agent_namespace
    service_account = var.agent_service_account
  }
}
