# kube-build.sh: sourced by kube-binaries.sh and kube-node.sh, which build
# into a cache folder DEST ($dest) what a test's Kubernetes runs. Each
# defines missing_bins, which sets the array missing to what DEST lacks.

# KUBE_VERSION is the Kubernetes both scripts build, from tools/kube.
KUBE_VERSION=v1.37.1

# lock_dest NAME: exits 0 when DEST holds everything; otherwise takes
# DEST/.build.lock, so that one build into DEST runs at a time (two make
# targets, or two clones sharing the cache), and looks again once it holds
# it: the build it waited for may have made what was missing.
lock_dest() {
	local name=$1
	missing_bins
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "$name: up to date in $dest"
		exit 0
	fi
	exec 9>"$dest/.build.lock"
	if ! flock -n 9; then
		echo "$name: another build into $dest is running; waiting for it" >&2
		flock 9
	fi
	missing_bins
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "$name: up to date in $dest"
		exit 0
	fi
}

# kube_ldflags prints the -ldflags of a Kubernetes binary: without these
# the server reports v0.0.0-master and charts with a kubeVersion
# constraint refuse to install; kubectl and the kubelet report their
# versions from the same variables.
kube_ldflags() {
	local minor=${KUBE_VERSION#v1.}
	minor=${minor%%.*}
	local f="-s -w"
	f+=" -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
	f+=" -X k8s.io/component-base/version.gitMajor=1"
	f+=" -X k8s.io/component-base/version.gitMinor=$minor"
	f+=" -X k8s.io/component-base/version.gitTreeState=clean"
	f+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
	f+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
	f+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
	echo "$f"
}
