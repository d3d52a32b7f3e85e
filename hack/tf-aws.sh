#!/usr/bin/env bash
# tf-aws.sh DEST OTHER_MIRROR
#
# Builds a Terraform provider that serves the real schema of hashicorp/aws
# 6.25.0 and nothing else (tools/tfaws), for terraform validate and
# terraform test with mock_provider: the real provider binary cannot be had
# offline, its schema can. `npm pack @cdktf/provider-aws@21.22.1` (generated
# from hashicorp/aws 6.25.0) goes into the cache, tfaws-gen turns it into
# the schema, and the provider binary, with the schema embedded, is laid out
# as a filesystem mirror in DEST/mirror. DEST/terraformrc is a CLI config
# that installs hashicorp/aws from that mirror and hashicorp/local and
# hashicorp/random from OTHER_MIRROR (hack/tf-providers.sh's), never from
# the registry. Nothing is rebuilt when the binary is there and
# tools/tfaws did not change.
set -euo pipefail

if [[ $# -ne 2 ]]; then
	echo "usage: $0 DEST OTHER_MIRROR" >&2
	exit 2
fi

GO=${GO:-go}
NPM=${NPM:-npm}
PKG=@cdktf/provider-aws
PKG_VERSION=21.22.1
AWS_VERSION=6.25.0

# need_npm installs Debian's npm when it is missing (npm pack is all the
# build needs from it).
need_npm() {
	command -v "$NPM" >/dev/null && return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "$(basename "$0"): installing npm (apt-get)" >&2
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends npm >/dev/null
}

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
dest=$(cd "$1" && pwd)
other=$2
mirror=$dest/mirror
platform=$("$GO" env GOOS)_$("$GO" env GOARCH)
binary=$mirror/registry.terraform.io/hashicorp/aws/$AWS_VERSION/$platform/terraform-provider-aws_v$AWS_VERSION
npmcache=$(dirname "$(dirname "$dest")")/npm
tarball=$npmcache/cdktf-provider-aws-$PKG_VERSION.tgz

# The generator's and provider's sources: a change rebuilds.
stamp=$(cd "$root/tools/tfaws" && cat go.mod go.sum $(find . -name '*.go' | sort) | sha256sum | cut -c1-16)

write_rc() {
	cat >"$dest/terraformrc.tmp" <<RC
# Written by hack/tf-aws.sh: hashicorp/aws is the schema-only provider
# built from tools/tfaws; local and random come from hack/tf-providers.sh's
# mirror; nothing comes from the registry.
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["registry.terraform.io/hashicorp/aws"]
  }
  filesystem_mirror {
    path    = "$other"
    include = ["registry.terraform.io/hashicorp/local", "registry.terraform.io/hashicorp/random"]
  }
  direct {
    exclude = ["registry.terraform.io/hashicorp/*"]
  }
}
RC
	mv "$dest/terraformrc.tmp" "$dest/terraformrc"
}

if [[ -x $binary && -f $dest/terraformrc && "$(cat "$dest/stamp" 2>/dev/null)" == "$stamp" ]]; then
	echo "tf-aws: up to date in $dest"
	exit 0
fi

if [[ ! -f $tarball ]]; then
	need_npm
	echo "tf-aws: npm pack $PKG@$PKG_VERSION into $npmcache"
	mkdir -p "$npmcache"
	(cd "$npmcache" && "$NPM" pack --silent "$PKG@$PKG_VERSION" >/dev/null)
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The generator reads lib/ and package.json, and cross-checks with .jsii.
tar -xzf "$tarball" -C "$tmp" package/package.json package/.jsii package/lib

cp -r "$root/tools/tfaws" "$tmp/src"
cd "$tmp/src"
echo "tf-aws: generating the schema of hashicorp/aws $AWS_VERSION from $PKG $PKG_VERSION"
GOWORK=off "$GO" run ./cmd/tfaws-gen -package "$tmp/package" -o "$dest/schema.json"
gzip -9 -c "$dest/schema.json" >cmd/terraform-provider-aws/embedded/schema.json.gz
echo "tf-aws: building the schema-only provider"
GOWORK=off "$GO" build -trimpath -ldflags='-s -w' -o "$tmp/provider" ./cmd/terraform-provider-aws
mkdir -p "$(dirname "$binary")"
mv "$tmp/provider" "$binary"
write_rc
echo "$stamp" >"$dest/stamp"

# Prove the mirror works: init and validate a module that needs all three.
mkdir -p "$tmp/check"
cat >"$tmp/check/main.tf" <<'TF'
terraform {
  required_providers {
    aws    = { source = "hashicorp/aws", version = "6.25.0" }
    local  = { source = "hashicorp/local", version = "2.9.0" }
    random = { source = "hashicorp/random", version = "3.9.0" }
  }
}
resource "aws_s3_bucket" "b" { bucket = "check" }
TF
if ! out=$(cd "$tmp/check" && export CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE="$dest/terraformrc" &&
	terraform init -input=false -no-color 2>&1 && terraform validate -no-color 2>&1); then
	echo "$out" >&2
	echo "tf-aws: terraform init/validate against the mirror failed" >&2
	exit 1
fi
echo "tf-aws: hashicorp/aws $AWS_VERSION (schema only) ready in $dest"
