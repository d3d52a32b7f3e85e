#!/usr/bin/env bash
# registry.sh up DIR
#   Starts Debian's docker-registry (Distribution 2.8) as the install's
#   registry, standing in for ECR: on a free loopback port, TLS with a
#   self-signed certificate for 127.0.0.1 (DIR/cert.pem, the CA to trust)
#   and basic auth for the user nuon, whose password is made here and kept
#   in DIR/password (mode 0600; never in argv, Terraform state or logs).
#   Writes the host (127.0.0.1:PORT) to DIR/host. Does nothing when the
#   registry of DIR already runs.
#
# registry.sh down DIR
#   Stops it and removes DIR.
set -euo pipefail

up() {
	local dir=$1
	mkdir -p "$dir/data"
	dir=$(cd "$dir" && pwd)
	# One start at a time per DIR (see kube-up.sh).
	exec 9>"$dir/.up.lock"
	flock 9
	if [[ -f $dir/pid && -f $dir/host ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
		return 0
	fi
	for b in docker-registry htpasswd openssl; do
		command -v "$b" >/dev/null || { echo "registry.sh: $b not found: run \`make registry\`" >&2; exit 1; }
	done
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
	if [[ ! -f $dir/password ]]; then
		(umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$dir/password")
	fi
	if [[ ! -f $dir/cert.pem ]]; then
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
			-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
			-keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
	fi
	htpasswd -Bin nuon <"$dir/password" >"$dir/htpasswd" 2>/dev/null
	{
		echo "version: 0.1"
		echo "log: {level: error, accesslog: {disabled: true}}"
		echo "storage: {filesystem: {rootdirectory: $dir/data}, delete: {enabled: true}}"
		echo "http:"
		echo "  addr: 127.0.0.1:$port"
		echo "  secret: $(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
		echo "  tls: {certificate: $dir/cert.pem, key: $dir/key.pem}"
		echo "auth: {htpasswd: {realm: nuon, path: $dir/htpasswd}}"
	} >"$dir/config.yml"
	chmod 600 "$dir/config.yml"
	setsid docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 </dev/null 9>&- &
	echo $! >"$dir/pid"
	for _ in $(seq 200); do
		case $(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/cert.pem" "https://127.0.0.1:$port/v2/" || true) in
		401)
			echo "127.0.0.1:$port" >"$dir/host"
			return 0
			;;
		esac
		kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
		sleep 0.05
	done
	echo "registry.sh: docker-registry did not start; see $dir/log" >&2
	down "$dir"
	exit 1
}

down() {
	local dir=$1 pid
	if pid=$(cat "$dir/pid" 2>/dev/null); then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		! kill -0 "$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}

case ${1:-} in
up) up "$2" ;;
down) down "$2" ;;
*)
	sed -n '2,13p' "$0" >&2
	exit 2
	;;
esac
