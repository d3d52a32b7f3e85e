# A module whose apply runs until it is interrupted. The provisioner writes
# its process id to pid_file first, so a test can tell when it runs and that
# it stopped.
variable "pid_file" {
  type = string
}

resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "echo $$ > ${var.pid_file}; exec sleep 300"
  }
}
