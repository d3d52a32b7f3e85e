#!/usr/bin/env bash
# kube-binaries.sh DEST
#
# Builds kube-apiserver, kube-controller-manager, etcd and kubectl from the
# Go module proxy with the module in tools/kube and puts them in DEST (a
# folder keyed by the Kubernetes version, laid out like controller-runtime's
# KUBEBUILDER_ASSETS, with kube-controller-manager beside the API server).
# Only what is missing is built: a binary already in DEST at this version
# stays, so a cache from before kube-controller-manager was added builds that
# one alone. The Kubernetes binaries that are missing are built by one go
# build of the one module, so the packages they share (most of
# k8s.io/kubernetes/pkg) compile once. kubectl is built from the same module
# as the API server, so tests and benchmarks that compare with it talk to a
# server of its own version (a kubectl found elsewhere is never used). A
# cold build of the first three took ~11 min on two cores and ~3 GB of
# memory (kubectl alone: see BENCHMARKS.md); kube-controller-manager added
# to a cache of those took 148 s user + 23 s system CPU and 2.9 GB peak,
# most of its packages already compiled for the API server. Nothing to
# build takes well under a second. Two builds
# into one DEST never run at once: the second waits on DEST/.build.lock and
# then finds the binaries there.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DEST" >&2
	exit 2
fi

GO=${GO:-go}

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/kube-build.sh
source "$root/hack/kube-build.sh"
mkdir -p "$1"
dest=$(cd "$1" && pwd)

# version_ok BIN ARGS...: DEST holds BIN (not a link to another one) and
# BIN ARGS prints KUBE_VERSION.
version_ok() {
	local bin=$1
	shift
	local out
	[[ -x $dest/$bin && ! -L $dest/$bin ]] || return 1
	# Read it all before matching: grep -q stopping early would SIGPIPE the
	# binary, which pipefail counts as a failure.
	out=$("$dest/$bin" "$@" 2>/dev/null) || return 1
	[[ $out == *"$KUBE_VERSION"* ]]
}

missing_bins() {
	missing=()
	[[ -x $dest/kube-apiserver ]] || missing+=(kube-apiserver)
	version_ok kube-controller-manager --version || missing+=(kube-controller-manager)
	[[ -x $dest/etcd ]] || missing+=(etcd)
	version_ok kubectl version --client || missing+=(kubectl)
}

lock_dest kube-binaries
ldflags=$(kube_ldflags)

tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cd "$root/tools/kube"
echo "kube-binaries: building ${missing[*]} $KUBE_VERSION into $dest"
kube=()
for bin in "${missing[@]}"; do
	case $bin in
	kube-apiserver | kube-controller-manager | kubectl) kube+=("k8s.io/kubernetes/cmd/$bin") ;;
	etcd)
		# etcd's main package is named server; install it under its usual name.
		GOWORK=off "$GO" build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
		"$tmp/etcd" --version | head -1
		;;
	esac
done
if [[ ${#kube[@]} -gt 0 ]]; then
	# One invocation: the shared packages compile once. With -o DIR/ each
	# binary is named after its package's last element.
	GOWORK=off "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/" "${kube[@]}"
fi
for bin in "${missing[@]}"; do
	case $bin in
	kube-apiserver | kube-controller-manager) "$tmp/$bin" --version ;;
	kubectl) "$tmp/kubectl" version --client ;;
	esac
	rm -f "$dest/$bin"
	mv "$tmp/$bin" "$dest/$bin"
done
missing_bins
if [[ ${#missing[@]} -gt 0 ]]; then
	echo "kube-binaries: ${missing[*]} in $dest missing or not $KUBE_VERSION" >&2
	exit 1
fi
echo "kube-binaries: built $KUBE_VERSION in $dest"
