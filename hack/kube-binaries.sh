#!/usr/bin/env bash
# kube-binaries.sh DEST
#
# Builds kube-apiserver and etcd from the Go module proxy with the module in
# tools/kube and puts them in DEST (a folder keyed by the Kubernetes version,
# laid out like controller-runtime's KUBEBUILDER_ASSETS). Nothing is rebuilt
# when both binaries are already there. A cold build takes ~11 min on two
# cores and ~3 GB of memory; a warm one a few seconds.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DEST" >&2
	exit 2
fi

GO=${GO:-go}
KUBE_VERSION=v1.37.1

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
dest=$(cd "$1" && pwd)

if [[ -x $dest/kube-apiserver && -x $dest/etcd ]]; then
	echo "kube-binaries: up to date in $dest"
	exit 0
fi

minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
# Without these the server reports v0.0.0-master and charts with a
# kubeVersion constraint refuse to install.
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"

tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cd "$root/tools/kube"
echo "kube-binaries: building kube-apiserver $KUBE_VERSION and etcd into $dest"
GOWORK=off "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
# etcd's main package is named server; install it under its usual name.
GOWORK=off "$GO" build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3

"$tmp/kube-apiserver" --version
"$tmp/etcd" --version | head -1
mv "$tmp/etcd" "$dest/etcd"
mv "$tmp/kube-apiserver" "$dest/kube-apiserver"
# controller-runtime's envtest looks for kubectl in the same folder.
if [[ ! -e $dest/kubectl ]] && command -v kubectl >/dev/null 2>&1; then
	ln -s "$(command -v kubectl)" "$dest/kubectl"
fi
echo "kube-binaries: kube-apiserver $KUBE_VERSION and etcd ready in $dest"
