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
KUBE_VERSION=v1.37.1

root=$(cd "$(dirname "$0")/.." && pwd)
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

missing_bins
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "kube-binaries: up to date in $dest"
	exit 0
fi
# One build per DEST at a time (two make targets, or two clones sharing the
# cache); the second looks again at what is missing once the first is done.
exec 9>"$dest/.build.lock"
if ! flock -n 9; then
	echo "kube-binaries: another build into $dest is running; waiting for it" >&2
	flock 9
fi
missing_bins
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
