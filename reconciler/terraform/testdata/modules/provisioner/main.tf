# A module whose apply fails: its provisioner exits non-zero.
resource "terraform_data" "app" {
  provisioner "local-exec" {
    command = "echo provisioning failed >&2; exit 3"
  }
}
