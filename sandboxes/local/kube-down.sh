#!/usr/bin/env bash
# kube-down.sh DIR
#
# Stops what kube-up.sh DIR started: kube-controller-manager, then
# kube-apiserver, then etcd (an API server whose etcd is gone first can
# hang retrying it), each with SIGTERM and, after 10 s, SIGKILL. The data
# in DIR stays.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
dir=$1

stop() { # name
	local pidfile=$dir/$1.pid pid
	[[ -f $pidfile ]] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "kube-down: $1 did not stop within 10s of SIGTERM; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$pidfile"
}

stop kube-controller-manager
stop kube-apiserver
stop etcd
echo "kube-down: stopped the control plane in $dir" >&2
