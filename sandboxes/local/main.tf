# The local sandbox: what an install runs on on a developer machine, in the
# tests and in the demo, with the outputs contract of every sandbox
# (../README.md). No network and no cloud provider: terraform_data
# resources whose create-time provisioners start the processes and whose
# destroy-time provisioners stop them and remove their files.
#
#   kube      etcd, kube-apiserver and kube-controller-manager from
#             var.kube_assets on loopback (kube-up.sh), standing in for the
#             cluster (no scheduler or kubelet: Pods stay Pending)
#   registry  docker-registry with TLS and basic auth (registry.sh),
#             standing in for ECR
#
# The scripts are idempotent (a running piece is left alone), so a re-run
# after a kill continues. The module's own state, kept by the caller in a
# local backend file beside var.dir, stands in for the state bucket.

terraform {
  required_version = ">= 1.10"
  required_providers {
    local = {
      source  = "hashicorp/local"
      version = "2.9.0"
    }
  }
}

locals {
  kube_dir     = "${var.dir}/kube"
  registry_dir = "${var.dir}/registry"
  scripts      = abspath(path.module)
}

resource "terraform_data" "kube" {
  # Only what destroy needs: a destroy-time provisioner sees nothing but self.
  input = {
    dir     = local.kube_dir
    scripts = local.scripts
  }
  provisioner "local-exec" {
    command = "\"$SCRIPTS/kube-up.sh\" \"$ASSETS\" \"$DIR\" >/dev/null"
    environment = {
      SCRIPTS = local.scripts
      ASSETS  = var.kube_assets
      DIR     = local.kube_dir
    }
  }
  provisioner "local-exec" {
    when    = destroy
    command = "\"$SCRIPTS/kube-down.sh\" \"$DIR\" && rm -rf \"$DIR\" && { rmdir \"$(dirname \"$DIR\")\" 2>/dev/null || true; }"
    environment = {
      SCRIPTS = self.input.scripts
      DIR     = self.input.dir
    }
  }
}

resource "terraform_data" "registry" {
  input = {
    dir     = local.registry_dir
    scripts = local.scripts
  }
  provisioner "local-exec" {
    command = "\"$SCRIPTS/registry.sh\" up \"$DIR\""
    environment = {
      SCRIPTS = local.scripts
      DIR     = local.registry_dir
    }
  }
  provisioner "local-exec" {
    when    = destroy
    command = "\"$SCRIPTS/registry.sh\" down \"$DIR\" && { rmdir \"$(dirname \"$DIR\")\" 2>/dev/null || true; }"
    environment = {
      SCRIPTS = self.input.scripts
      DIR     = self.input.dir
    }
  }
}

# Read after the resources: the processes write them when they start.
data "local_file" "kubeconfig" {
  filename   = "${local.kube_dir}/kubeconfig"
  depends_on = [terraform_data.kube]
}

data "local_file" "registry_host" {
  filename   = "${local.registry_dir}/host"
  depends_on = [terraform_data.registry]
}

locals {
  kubeconfig = yamldecode(data.local_file.kubeconfig.content)
}
