#!/usr/bin/env bash
# fuzz.sh FUZZTIME [PACKAGE...]
#
# Runs every fuzz target of the module (or of the packages named) on its
# own for FUZZTIME (`go test -fuzz=^Name$` takes one target at a time). The
# targets are found per package, in the test files `go list` says belong to
# it, so a new Fuzz function is picked up without editing anything. Every
# target runs even when one fails; the exit status is non-zero if any did,
# and a failing input is left under the package's testdata/fuzz/ as Go
# writes it.
set -euo pipefail

if [[ $# -lt 1 ]]; then
	echo "usage: $0 FUZZTIME [PACKAGE...]" >&2
	exit 2
fi
GO=${GO:-go}
fuzztime=$1
shift
pkgs=("$@")
[[ ${#pkgs[@]} -gt 0 ]] || pkgs=(./...)

failed=()
count=0
began=$SECONDS
while read -r pkg dir files; do
	[[ -n $files ]] || continue
	targets=$(cd "$dir" && sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $files | sort -u)
	for t in $targets; do
		count=$((count + 1))
		echo "fuzz $pkg $t ($fuzztime)"
		out=$(mktemp)
		rc=0
		"$GO" test -run='^$' -fuzz="^$t\$" -fuzztime="$fuzztime" "$pkg" >"$out" 2>&1 || rc=$?
		cat "$out"
		if [[ $rc -ne 0 ]]; then
			# Go's fuzzing engine can end a run with "context deadline
			# exceeded" when -fuzztime runs out mid-input, with no input
			# found: that target runs once more. A real finding writes
			# "Failing input written to" and fails at once.
			if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written to' "$out"; then
				echo "fuzz $pkg $t: ended by its deadline without a finding; once more"
				"$GO" test -run='^$' -fuzz="^$t\$" -fuzztime="$fuzztime" "$pkg" || failed+=("$pkg $t")
			else
				failed+=("$pkg $t")
			fi
		fi
		rm -f "$out"
	done
done < <("$GO" list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' "${pkgs[@]}")

echo "fuzz: $count targets, ${fuzztime} each, $((SECONDS - began)) s"
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
