#!/usr/bin/env bash
# sshd.sh install
#   Installs what the SSH git tests run, when missing: Debian's
#   openssh-server (/usr/sbin/sshd and ssh-keygen). internal/gittest starts
#   its own sshd on loopback with its own configuration; the package's
#   service is not used (no systemd here).
set -euo pipefail

install() {
	local missing=()
	[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
	command -v ssh-keygen >/dev/null || missing+=(openssh-client)
	[ ${#missing[@]} -eq 0 ] && return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "sshd.sh: installing ${missing[*]}" >&2
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

case ${1:-} in
install) install ;;
*)
	sed -n '2,6p' "$0" >&2
	exit 2
	;;
esac
