#!/usr/bin/env bash
# registry.sh install
#   Installs what the registry tests and the demo run, when missing:
#   Debian's docker-registry (CNCF Distribution 2.8), htpasswd
#   (apache2-utils) and openssl.
#
# registry.sh serve DIR [USER:PASSWORD]
#   Starts docker-registry in the background on a free loopback port, with
#   its configuration, storage and log in DIR, and prints its host
#   (127.0.0.1:PORT). With credentials it serves TLS with a self-signed
#   certificate for 127.0.0.1 (DIR/cert.pem: the CA to trust) and requires
#   basic auth, as ECR does. DIR/pid holds the server's process id.
#
# registry.sh stop DIR
#   Stops the server that `serve DIR` started.
set -euo pipefail

install() {
	local missing=()
	command -v docker-registry >/dev/null || missing+=(docker-registry)
	command -v htpasswd >/dev/null || missing+=(apache2-utils)
	command -v openssl >/dev/null || missing+=(openssl)
	[ ${#missing[@]} -eq 0 ] && return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "registry.sh: installing ${missing[*]}" >&2
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

free_port() {
	local port
	for _ in $(seq 50); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	echo "registry.sh: no free port" >&2
	return 1
}

serve() {
	local dir=$1 creds=${2:-}
	mkdir -p "$dir/data"
	dir=$(cd "$dir" && pwd)
	local port scheme=http
	port=$(free_port)
	{
		echo "version: 0.1"
		echo "log: {level: error, accesslog: {disabled: true}}"
		echo "storage: {filesystem: {rootdirectory: $dir/data}, delete: {enabled: true}}"
		echo "http:"
		echo "  addr: 127.0.0.1:$port"
		echo "  secret: $(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
	} >"$dir/config.yml"
	if [ -n "$creds" ]; then
		scheme=https
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
			-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
			-keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
		htpasswd -Bbn "${creds%%:*}" "${creds#*:}" >"$dir/htpasswd" 2>/dev/null
		{
			echo "  tls: {certificate: $dir/cert.pem, key: $dir/key.pem}"
			echo "auth: {htpasswd: {realm: nuon, path: $dir/htpasswd}}"
		} >>"$dir/config.yml"
	fi
	docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
	echo $! >"$dir/pid"
	local curl=(curl -s -o /dev/null -w '%{http_code}')
	[ -n "$creds" ] && curl+=(--cacert "$dir/cert.pem")
	for _ in $(seq 100); do
		case $("${curl[@]}" "$scheme://127.0.0.1:$port/v2/" || true) in
		200 | 401)
			echo "127.0.0.1:$port"
			return
			;;
		esac
		sleep 0.05
	done
	echo "registry.sh: docker-registry did not start; see $dir/log" >&2
	return 1
}

stop() {
	local pid
	pid=$(cat "$1/pid" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null || true
	rm -f "$1/pid"
}

case ${1:-} in
install) install ;;
serve) serve "${@:2}" ;;
stop) stop "$2" ;;
*)
	sed -n '2,17p' "$0" >&2
	exit 2
	;;
esac
