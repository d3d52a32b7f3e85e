terraform {
  # 1.10: S3 state locking with use_lockfile (the customer's stack makes
  # the bucket); 1.7: mock providers in terraform test.
  required_version = ">= 1.10"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.25.0, < 7.0.0"
    }
  }
}

provider "aws" {
  region = var.region
  # Every resource carries the install id and the customer's tags.
  default_tags {
    tags = local.tags
  }
}
