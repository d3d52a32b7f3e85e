#!/usr/bin/env bash
# kube-up.sh ASSETS DIR
#
# Starts a local Kubernetes control plane for the demo and the local
# sandbox: etcd, kube-apiserver and kube-controller-manager from ASSETS
# (built by `make kube-binaries`) on free loopback ports, with their data,
# certificates, logs and pid files in DIR. Prints the kubeconfig's path
# (DIR/kubeconfig, admin user) when the API server is ready and the
# controllers run. The controller manager has a kubeconfig of its own
# (DIR/controller-manager.kubeconfig, user system:kube-controller-manager,
# whose rights the API server's bootstrap RBAC policy gives) and signs
# service account tokens with DIR/sa.key; each controller acts as its own
# service account. So service accounts and their tokens exist, deleted
# namespaces are emptied and go, dependents are garbage-collected with their
# owners, and Jobs and Deployments create their Pods. There is no scheduler
# or kubelet: Pods stay Pending. Stop it with sandboxes/local/kube-down.sh
# DIR.
set -euo pipefail

if [[ $# -ne 2 ]]; then
	echo "usage: $0 ASSETS DIR" >&2
	exit 2
fi
assets=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)

for b in etcd kube-apiserver kube-controller-manager; do
	if [[ ! -x $assets/$b ]]; then
		echo "kube-up: $assets/$b not found: run \`make kube-binaries\`" >&2
		exit 1
	fi
done
# One start at a time per DIR: a start killed with its caller (a terraform
# killed half way) may still be running when the next begins.
exec 9>"$dir/.kube-up.lock"
flock 9
running() { [[ -f $dir/$1.pid ]] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
if [[ -f $dir/kubeconfig ]] && running kube-apiserver && running kube-controller-manager; then
	echo "kube-up: already running in $dir" >&2
	echo "$dir/kubeconfig"
	exit 0
fi
# What a start killed half way left: stop it and start again.
"$(dirname "$0")/kube-down.sh" "$dir" >/dev/null 2>&1 || true

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
etcd_port=$(free_port)
peer_port=$(free_port)
api_port=$(free_port)

mkdir -p "$dir/certs"
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
kcm_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
kcm_user=system:kube-controller-manager
{
	echo "$token,admin,admin,system:masters"
	echo "$kcm_token,$kcm_user,$kcm_user"
} >"$dir/tokens.csv"
chmod 600 "$dir/tokens.csv"
if [[ ! -f $dir/sa.key ]]; then
	openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
	openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
fi

# Each in a session of its own, so that it outlives this script.
setsid "$assets/etcd" \
	--name=default \
	--data-dir="$dir/etcd" \
	--listen-client-urls="http://127.0.0.1:$etcd_port" \
	--advertise-client-urls="http://127.0.0.1:$etcd_port" \
	--listen-peer-urls="http://127.0.0.1:$peer_port" \
	--initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
	--initial-cluster="default=http://127.0.0.1:$peer_port" \
	--unsafe-no-fsync \
	--log-level=error \
	>"$dir/etcd.log" 2>&1 </dev/null 9>&- &
echo $! >"$dir/etcd.pid"

setsid "$assets/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:$etcd_port" \
	--bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 \
	--endpoint-reconciler-type=none \
	--secure-port="$api_port" \
	--cert-dir="$dir/certs" \
	--service-cluster-ip-range=10.0.0.0/24 \
	--service-account-issuer=https://kubernetes.default.svc \
	--service-account-key-file="$dir/sa.pub" \
	--service-account-signing-key-file="$dir/sa.key" \
	--authorization-mode=RBAC \
	--token-auth-file="$dir/tokens.csv" \
	--profiling=false \
	>"$dir/apiserver.log" 2>&1 </dev/null 9>&- &
echo $! >"$dir/kube-apiserver.pid"

server="https://127.0.0.1:$api_port"
for _ in $(seq 1 600); do
	if [[ -f $dir/certs/apiserver.crt ]] &&
		[[ $(curl -sk -H "Authorization: Bearer $token" -o /dev/null -w '%{http_code}' "$server/readyz" || true) == 200 ]]; then
		break
	fi
	for p in etcd kube-apiserver; do
		if ! kill -0 "$(cat "$dir/$p.pid")" 2>/dev/null; then
			echo "kube-up: $p exited; its log:" >&2
			tail -20 "$dir/${p/kube-/}.log" >&2
			"$(dirname "$0")/kube-down.sh" "$dir" >/dev/null 2>&1 || true
			exit 1
		fi
	done
	sleep 0.1
done
if [[ $(curl -sk -H "Authorization: Bearer $token" -o /dev/null -w '%{http_code}' "$server/readyz" || true) != 200 ]]; then
	echo "kube-up: kube-apiserver not ready after 60s; its log: $dir/apiserver.log" >&2
	exit 1
fi

ca=$(base64 -w0 <"$dir/certs/apiserver.crt")
cat >"$dir/kubeconfig.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: admin
    user:
      token: $token
contexts:
  - name: local
    context:
      cluster: local
      user: admin
      namespace: default
current-context: local
KC
chmod 600 "$dir/kubeconfig.tmp"
sed -e "s/token: $token/token: $kcm_token/" -e "s/name: admin/name: controller-manager/" \
	-e "s/user: admin/user: controller-manager/" "$dir/kubeconfig.tmp" >"$dir/controller-manager.kubeconfig"
chmod 600 "$dir/controller-manager.kubeconfig"

# The CA that pods get (kube-root-ca.crt ConfigMaps, token Secrets): the
# API server's self-signed certificate. A copy, so that only the API
# server's command line names certs/.
cp "$dir/certs/apiserver.crt" "$dir/ca.crt"

# No serving port (--secure-port=0): nothing scrapes it here.
setsid "$assets/kube-controller-manager" \
	--kubeconfig="$dir/controller-manager.kubeconfig" \
	--secure-port=0 \
	--leader-elect=false \
	--use-service-account-credentials=true \
	--service-account-private-key-file="$dir/sa.key" \
	--root-ca-file="$dir/ca.crt" \
	--controllers='*' \
	--profiling=false \
	>"$dir/controller-manager.log" 2>&1 </dev/null 9>&- &
echo $! >"$dir/kube-controller-manager.pid"

# The controllers run once the service account controller made the
# default namespace's ServiceAccount.
for _ in $(seq 1 600); do
	if [[ $(curl -sk -H "Authorization: Bearer $token" -o /dev/null -w '%{http_code}' \
		"$server/api/v1/namespaces/default/serviceaccounts/default" || true) == 200 ]]; then
		break
	fi
	if ! running kube-controller-manager; then
		echo "kube-up: kube-controller-manager exited; its log:" >&2
		tail -20 "$dir/controller-manager.log" >&2
		"$(dirname "$0")/kube-down.sh" "$dir" >/dev/null 2>&1 || true
		exit 1
	fi
	sleep 0.1
done
if [[ $(curl -sk -H "Authorization: Bearer $token" -o /dev/null -w '%{http_code}' \
	"$server/api/v1/namespaces/default/serviceaccounts/default" || true) != 200 ]]; then
	echo "kube-up: kube-controller-manager's controllers not running after 60s; its log: $dir/controller-manager.log" >&2
	exit 1
fi
mv "$dir/kubeconfig.tmp" "$dir/kubeconfig"
echo "kube-up: kube-apiserver ready at $server, controllers running" >&2
echo "$dir/kubeconfig"
