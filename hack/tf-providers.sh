#!/usr/bin/env bash
# tf-providers.sh DEST
#
# Builds the hashicorp/local and hashicorp/random Terraform providers from the
# Go module proxy (the public provider registry is out of reach) and lays them
# out as a filesystem mirror in DEST/mirror. DEST/terraformrc is a CLI config
# (TF_CLI_CONFIG_FILE) that installs hashicorp providers from that mirror only.
# Nothing is rebuilt when the binaries are already there.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DEST" >&2
	exit 2
fi

GO=${GO:-go}

if ! command -v terraform >/dev/null 2>&1; then
	echo "tf-providers: terraform is not on PATH; install terraform (1.11.x) first" >&2
	exit 1
fi

mkdir -p "$1"
dest=$(cd "$1" && pwd)
mirror=$dest/mirror
platform=$("$GO" env GOOS)_$("$GO" env GOARCH)

# Each line: provider name, provider version, Go package@version. The
# providers build only under their old github.com/terraform-providers paths.
providers=(
	"local 2.9.0 github.com/terraform-providers/terraform-provider-local@v1.4.1-0.20260513075820-3561e410f9fe"
	"random 3.9.0 github.com/terraform-providers/terraform-provider-random@v1.3.2-0.20260824155315-e1092b0cfc07"
)

binary() { # name version
	echo "$mirror/registry.terraform.io/hashicorp/$1/$2/$platform/terraform-provider-$1_v$2"
}

missing=()
for p in "${providers[@]}"; do
	read -r name version pkg <<<"$p"
	[[ -x $(binary "$name" "$version") ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 && -f $dest/terraformrc ]]; then
	echo "tf-providers: up to date in $dest"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for p in "${missing[@]}"; do
	read -r name version pkg <<<"$p"
	echo "tf-providers: building $name $version from $pkg"
	(cd "$tmp" && GOWORK=off GOBIN="$tmp/bin" "$GO" install -trimpath -ldflags='-s -w' "$pkg")
	out=$(binary "$name" "$version")
	mkdir -p "$(dirname "$out")"
	mv "$tmp/bin/terraform-provider-$name" "$out.tmp"
	mv "$out.tmp" "$out"
done

cat >"$dest/terraformrc.tmp" <<RC
# Written by hack/tf-providers.sh: hashicorp providers come from the local
# mirror only, never from the registry.
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["registry.terraform.io/hashicorp/*"]
  }
  direct {
    exclude = ["registry.terraform.io/hashicorp/*"]
  }
}
RC
mv "$dest/terraformrc.tmp" "$dest/terraformrc"

# Prove the mirror works: init a module that needs both providers.
mkdir -p "$tmp/check"
cat >"$tmp/check/main.tf" <<'TF'
terraform {
  required_providers {
    local  = { source = "hashicorp/local", version = "2.9.0" }
    random = { source = "hashicorp/random", version = "3.9.0" }
  }
}
TF
if ! out=$(cd "$tmp/check" && CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE="$dest/terraformrc" terraform init -input=false -no-color 2>&1); then
	echo "$out" >&2
	echo "tf-providers: terraform init against the mirror failed" >&2
	exit 1
fi
echo "tf-providers: local 2.9.0 and random 3.9.0 ready in $dest"
