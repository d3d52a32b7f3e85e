# A module whose health check output is whatever the job says.
variable "healthy" {
  type    = any
  default = true
}

resource "terraform_data" "app" {
  input = "app"
}

output "healthy" {
  value = var.healthy
}
