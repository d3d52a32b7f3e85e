#!/usr/bin/env bash
# chromium.sh install
#   Installs what the fleet view's browser test drives, when missing:
#   Debian's chromium (/usr/bin/chromium), run headless by server/viewtest
#   through the DevTools protocol (chromedp).
set -euo pipefail

install() {
	command -v chromium >/dev/null && return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "chromium.sh: installing chromium" >&2
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
}

case ${1:-} in
install) install ;;
*)
	sed -n '2,5p' "$0" >&2
	exit 2
	;;
esac
