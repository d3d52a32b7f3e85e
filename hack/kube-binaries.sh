#!/usr/bin/env bash
# kube-binaries.sh DEST
#
# Builds kube-apiserver, etcd and kubectl from the Go module proxy with the
# module in tools/kube and puts them in DEST (a folder keyed by the
# Kubernetes version, laid out like controller-runtime's KUBEBUILDER_ASSETS).
# Only what is missing is built: a binary already in DEST at this version
# stays. kubectl is built from the same module as the API server, so tests
# and benchmarks that compare with it talk to a server of its own version
# (a kubectl found elsewhere is never used). A cold build of all three takes
# ~11 min on two cores and ~3 GB of memory (kubectl alone: see
# BENCHMARKS.md); a warm one a few seconds.
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

# kubectl_ok: DEST holds a kubectl binary (not a link to another one) of
# KUBE_VERSION.
kubectl_ok() {
	[[ -x $dest/kubectl && ! -L $dest/kubectl ]] &&
		"$dest/kubectl" version --client -o json 2>/dev/null | grep -q "\"gitVersion\": \"$KUBE_VERSION\""
}

missing=()
[[ -x $dest/kube-apiserver ]] || missing+=(kube-apiserver)
[[ -x $dest/etcd ]] || missing+=(etcd)
kubectl_ok || missing+=(kubectl)
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "kube-binaries: up to date in $dest"
	exit 0
fi

minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
# Without these the server reports v0.0.0-master and charts with a
# kubeVersion constraint refuse to install; kubectl reports its version
# from the same variables.
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"

tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cd "$root/tools/kube"
echo "kube-binaries: building ${missing[*]} $KUBE_VERSION into $dest"
for bin in "${missing[@]}"; do
	case $bin in
	kube-apiserver)
		GOWORK=off "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
		"$tmp/kube-apiserver" --version
		;;
	etcd)
		# etcd's main package is named server; install it under its usual name.
		GOWORK=off "$GO" build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
		"$tmp/etcd" --version | head -1
		;;
	kubectl)
		GOWORK=off "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl
		"$tmp/kubectl" version --client
		;;
	esac
	rm -f "$dest/$bin"
	mv "$tmp/$bin" "$dest/$bin"
done
kubectl_ok || {
	echo "kube-binaries: $dest/kubectl does not report $KUBE_VERSION" >&2
	exit 1
}
echo "kube-binaries: ${missing[*]} $KUBE_VERSION ready in $dest"
