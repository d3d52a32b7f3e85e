# A module of local providers only, to keep a state in the s3 backend.
terraform {
  required_providers {
    random = { source = "hashicorp/random" }
  }
}

variable "name" {
  type = string
}

resource "random_id" "suffix" {
  byte_length = 4
}

resource "terraform_data" "cluster" {
  input = "${var.name}-${random_id.suffix.hex}"
}

output "cluster" {
  value = terraform_data.cluster.output
}
