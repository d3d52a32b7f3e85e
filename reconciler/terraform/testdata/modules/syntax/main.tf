# A module terraform cannot parse.
resource "terraform_data" "broken" {
  input = 
}
