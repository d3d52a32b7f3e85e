#!/usr/bin/env bash
# kube-node.sh DEST
#
# Builds what internal/kubetest's StartNode runs for a real Kubernetes node
# on loopback, and puts it in DEST (a folder keyed by the versions,
# ~/.cache/nuon/kube-node/VERSIONS under make kube-node):
#
#   kubelet                  from tools/kube, the module kube-apiserver is
#                            built from (same Kubernetes, same ldflags)
#   containerd, ctr,         containerd v2.4.2 from the Go module proxy,
#   containerd-shim-runc-v2  static (CGO_ENABLED=0: no btrfs, devmapper or
#                            zfs snapshotters; overlayfs is what a node uses)
#   cni/bridge, host-local,  CNI plugins v1.10.0 from the Go module proxy
#   loopback
#   pause                    internal/kubetest/pause, static: the pods'
#                            sandbox image, imported, never pulled
#
# and installs Debian's runc (apt-get) when no runc is on PATH: runc needs
# cgo and libseccomp, so it is not built here. Only what is missing is
# built; two builds into one DEST never run at once (DEST/.build.lock).
# Cold, after kube-binaries filled the build cache: containerd, ctr, the
# shim, the CNI plugins and pause took 165 s user + 37 s system CPU (an
# empty GOCACHE, modules already downloaded; 8 min wall on a machine at
# load 10); the kubelet's own build (105 packages the other binaries do not
# share) was not timed. Warm, into an empty DEST: 33 s.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DEST" >&2
	exit 2
fi

GO=${GO:-go}
CONTAINERD_VERSION=v2.4.2
CNI_VERSION=v1.10.0

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/kube-build.sh
source "$root/hack/kube-build.sh"
mkdir -p "$1"
dest=$(cd "$1" && pwd)

missing_bins() {
	missing=()
	local out
	out=$("$dest/kubelet" --version 2>/dev/null) && [[ $out == *"$KUBE_VERSION"* ]] || missing+=(kubelet)
	if ! { out=$("$dest/containerd" --version 2>/dev/null) && [[ $out == *"$CONTAINERD_VERSION"* ]] &&
		[[ -x $dest/containerd-shim-runc-v2 && -x $dest/ctr ]]; }; then
		missing+=(containerd)
	fi
	[[ -x $dest/cni/bridge && -x $dest/cni/host-local && -x $dest/cni/loopback ]] || missing+=(cni)
	[[ -x $dest/pause ]] || missing+=(pause)
}

install_runc() {
	command -v runc >/dev/null && return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "kube-node: installing runc (apt-get)" >&2
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends runc >/dev/null
}

install_runc
lock_dest kube-node

tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "kube-node: building ${missing[*]} into $dest"

# The binaries go install writes, moved into DEST once all are built.
for part in "${missing[@]}"; do
	case $part in
	kubelet)
		ldflags=$(kube_ldflags)
		(cd "$root/tools/kube" && GOWORK=off "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/kubelet" k8s.io/kubernetes/cmd/kubelet)
		"$tmp/kubelet" --version
		;;
	containerd)
		# Outside any module: containerd's go.mod has no replace lines, so
		# go install pkg@version builds it as released.
		(cd "$tmp" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$tmp" "$GO" install -trimpath \
			-tags no_btrfs,no_devmapper,no_zfs \
			-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION")
		"$tmp/containerd" --version
		;;
	cni)
		mkdir -p "$tmp/cni"
		(cd "$tmp" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$tmp/cni" "$GO" install -trimpath -ldflags "-s -w" \
			"github.com/containernetworking/plugins/plugins/main/bridge@$CNI_VERSION" \
			"github.com/containernetworking/plugins/plugins/main/loopback@$CNI_VERSION" \
			"github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_VERSION")
		;;
	pause)
		(cd "$root" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$tmp/pause" ./internal/kubetest/pause)
		;;
	esac
done
for f in kubelet containerd containerd-shim-runc-v2 ctr pause; do
	if [[ -e $tmp/$f ]]; then
		rm -f "$dest/$f"
		mv "$tmp/$f" "$dest/$f"
	fi
done
if [[ -d $tmp/cni ]]; then
	rm -rf "$dest/cni"
	mv "$tmp/cni" "$dest/cni"
fi
missing_bins
if [[ ${#missing[@]} -gt 0 ]]; then
	echo "kube-node: ${missing[*]} in $dest missing or not of its version" >&2
	exit 1
fi
echo "kube-node: built kubelet $KUBE_VERSION, containerd $CONTAINERD_VERSION, CNI plugins $CNI_VERSION in $dest (runc: $(command -v runc))"
