# A module whose plan fails: a precondition does not hold.
variable "replicas" {
  type    = number
  default = 0
}

resource "terraform_data" "app" {
  input = var.replicas

  lifecycle {
    precondition {
      condition     = var.replicas > 0
      error_message = "replicas must be positive."
    }
  }
}
