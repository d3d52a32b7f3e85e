#!/usr/bin/env bash
# demo.sh NUON DEMO_DIR
#
# The whole loop on local defaults: a tenant repository with the sample app
# (fixtures/tenant) on main, rendered into signed per-install commits, one
# agent per install converging its install, then `nuon status`. Then a
# promotion: a pull request's worth of change to a channel pin, rendered, and
# the agents on that channel updating just that component.
set -euo pipefail

nuon=$(realpath "$1")
demo=$2
root=$(cd "$(dirname "$0")/.." && pwd)

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

rm -rf "$demo"
mkdir -p "$demo"
demo=$(cd "$demo" && pwd)
export GIT_AUTHOR_NAME="Vendor Dev" GIT_AUTHOR_EMAIL=dev@vendor.example
export GIT_COMMITTER_NAME="Vendor Dev" GIT_COMMITTER_EMAIL=dev@vendor.example

step "tenant repository at $demo/tenant.git (main = fixtures/tenant)"
git init --quiet --bare --initial-branch=main "$demo/tenant.git"
git clone --quiet "$demo/tenant.git" "$demo/main" 2>/dev/null
cp -R "$root/fixtures/tenant/." "$demo/main/"
git -C "$demo/main" add --all
git -C "$demo/main" commit --quiet -m "shop: first version of the app, two channels, three installs"
git -C "$demo/main" push --quiet origin HEAD:main
git -C "$demo/main" log --oneline

step "nuon render: every install's desired state as signed commits"
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render"
git -C "$demo/tenant.git" for-each-ref --format='  %(objectname:short) %(refname)' refs/heads/nuon/

step "stock git verifies the renderer's signature"
echo "renderer $(cut -d' ' -f1,2 "$root/fixtures/keys/render.pub")" > "$demo/allowed_signers"
git -C "$demo/tenant.git" -c gpg.ssh.allowedSignersFile="$demo/allowed_signers" verify-commit refs/heads/nuon/installs/acme 2>&1 | sed 's/^/  /'

# Secrets resolve inside the install, from the agent's environment; they
# never reach git.
export NUON_SECRET_LICENSE_KEY=demo-license-4242

agents() {
	for id in acme globex initech; do
		"$nuon" agent --once --repo "$demo/tenant.git" --install "$id" \
			--trust "$demo/allowed_signers" --key "$root/fixtures/keys/$id" \
			--workdir "$demo/agents/$id" --artifacts "$root/fixtures/modules" \
			--log-format text --log-level warn
	done
}

step "one agent per install: verify, plan, run terraform jobs, write signed status"
agents

step "nuon status (helm and manifests components wait for the Kubernetes plugins)"
"$nuon" status --repo "$demo/tenant.git"

step "promotion: a pull request moves database to 1.1.0 on stable"
sed -i 's/^  database: 1.0.0$/  database: 1.1.0/' "$demo/main/channels/stable.yaml"
git -C "$demo/main" commit --quiet -am "stable: promote database 1.1.0"
git -C "$demo/main" push --quiet origin HEAD:main
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render" --dry-run | sed -n '1,6p'
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render"

step "agents: only the stable installs' database job runs"
agents
"$nuon" status --repo "$demo/tenant.git"

step "the audit log of acme: git log refs/heads/nuon/status/acme"
git -C "$demo/tenant.git" log --format='  %h %s' refs/heads/nuon/status/acme
echo "agent $(cut -d' ' -f1,2 "$root/fixtures/keys/acme.pub")" > "$demo/acme_signers"
git -C "$demo/tenant.git" -c gpg.ssh.allowedSignersFile="$demo/acme_signers" verify-commit refs/heads/nuon/status/acme 2>&1 | sed 's/^/  /'
printf '\ndemo state is in %s\n' "$demo"
