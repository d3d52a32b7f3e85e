#!/usr/bin/env bash
# cfnspec.sh DEST
#
# Fetches the published CloudFormation resource specification (npm
# @aws-cdk/cfnspec 2.72.1: spec/specification.json, resource specification
# 117.0.0) into DEST, a file in the cache. The stack package's tests check
# the customer's CloudFormation template against it (NUON_CFNSPEC).
# Nothing is fetched when DEST is there.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DEST" >&2
	exit 2
fi
NPM=${NPM:-npm}
PKG=@aws-cdk/cfnspec
PKG_VERSION=2.72.1

dest=$1
if [[ -s $dest ]]; then
	echo "cfnspec: up to date in $dest"
	exit 0
fi
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
need_npm
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && "$NPM" pack --silent "$PKG@$PKG_VERSION" >/dev/null)
tar -xzf "$tmp"/aws-cdk-cfnspec-$PKG_VERSION.tgz -C "$tmp" package/spec/specification.json
mv "$tmp/package/spec/specification.json" "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "cfnspec: CloudFormation resource specification from $PKG $PKG_VERSION in $dest"
