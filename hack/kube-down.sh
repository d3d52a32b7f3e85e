#!/usr/bin/env bash
# kube-down.sh: the local sandbox's script (sandboxes/local/kube-down.sh), kept here for
# make kube-up/kube-down and the scripts that call it by this path.
exec "$(dirname "$0")/../sandboxes/local/kube-down.sh" "$@"
