#!/usr/bin/env bash
# demo.sh NUON DEMO_DIR
#
# The whole loop on local defaults: a tenant repository with the sample app
# (fixtures/tenant) on main, its artifacts built, signed and released by
# "vendor CI", rendered into signed per-install commits, one agent per install
# syncing the artifacts into its registry and converging its install
# (terraform, helm and manifests against a local API server), then
# `nuon status`. Then a
# promotion: a pull request's worth of change to a channel pin, rendered, and
# the agents on that channel updating just that component. Each install is
# made by `nuon install create --cloud local`: its keys, its local sandbox
# (kube-apiserver, a registry with TLS and basic auth), installs/<id>.yaml on
# main, and its agent as a process, which adopts the sandbox as the install's
# first component (released by vendor CI from sandboxes/ and pinned on both
# channels, like any component); the last step deletes one install with
# `nuon install delete`.
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
# The app declares its sandbox: released from sandboxes/ like a component,
# pinned on both channels, applied by each install's agent before the rest.
printf '\nsandbox:\n  repository: registry.vendor.example/shop/sandbox\n' >>"$demo/main/nuon.yaml"
sed -i 's/^components:$/components:\n  sandbox: 0.1.0/' "$demo/main/channels/stable.yaml" "$demo/main/channels/beta.yaml"
git -C "$demo/main" add --all
# The installs are made below by nuon install create, not written by hand.
git -C "$demo/main" rm --quiet -r --cached installs && rm -r "$demo/main/installs"
git -C "$demo/main" commit --quiet -m "shop: first version of the app, two channels"
git -C "$demo/main" push --quiet origin HEAD:main
git -C "$demo/main" log --oneline

# ---- artifacts (builder/, agent/sync/) ----------------------------------------
# Vendor CI builds, signs and releases the components; each agent verifies the
# signatures and copies the artifacts into its install's own registry before
# the jobs, which read them from there.
step "the vendor's registry (each install gets its own from its sandbox)"
"$root/hack/registry.sh" install
vendor_reg=$("$root/hack/registry.sh" serve "$demo/registries/vendor")
installs=(acme globex initech)
# On exit: stop the vendor registry and what the installs left running
# (their agents and sandboxes; `nuon install create` with the same
# arguments starts them again).
cleanup() {
	for id in "${installs[@]}"; do
		d=$demo/installs/$id
		[[ -f $d/agent.pid ]] && kill -- -"$(cat "$d/agent.pid")" 2>/dev/null || true
		[[ -x $d/sandbox/module/kube-down.sh ]] && "$d/sandbox/module/kube-down.sh" "$d/sandbox/run/kube" >/dev/null 2>&1 || true
		[[ -x $d/sandbox/module/registry.sh ]] && "$d/sandbox/module/registry.sh" down "$d/sandbox/run/registry" || true
	done
	"$root/hack/registry.sh" stop "$demo/registries/vendor"
}
trap cleanup EXIT
echo "  vendor registry   $vendor_reg  (stands in for registry.vendor.example)"
sed -i "s#registry\.vendor\.example#$vendor_reg#" "$demo/main/nuon.yaml"
git -C "$demo/main" rm --quiet -r releases
git -C "$demo/main" commit --quiet -am "shop: the demo's registries; vendor CI records the releases"
git -C "$demo/main" push --quiet origin HEAD:main

step "nuon build: package each component, push it by digest, sign it (cosign's format, offline)"
export COSIGN_PASSWORD= # the demo key has none
build() { "$nuon" build --app "$demo/main/nuon.yaml" --key "$root/fixtures/keys/cosign.key" --log-level warn "$@"; }
build --src "$root/fixtures/previous" -o json database api api-image dashboards >"$demo/build-previous.json"
build --src "$root/fixtures" --dir sandbox="$root/sandboxes" | sed 's/^/  /'
echo "  a rebuild gives the same digests and keeps the signatures:"
build --src "$root/fixtures" --dir sandbox="$root/sandboxes" -o json | tee "$demo/build.json" | grep -c '"signed": false' | sed 's/^/    unchanged artifacts: /'

step "nuon release: each version's digests recorded on main, one commit each"
release() { "$nuon" release "$1" --repo "$demo/tenant.git" --version "$2" --from "$3" | sed -n 's/^released /  released /p'; }
for cv in database:1.0.0 api:2.3.0 api-image:2.3.0 dashboards:1.1.0; do release "${cv%%:*}" "${cv#*:}" "$demo/build-previous.json"; done
for cv in network:1.0.0 database:1.1.0 api:2.4.0 api-image:2.4.0 dashboards:1.2.0 sandbox:0.1.0; do release "${cv%%:*}" "${cv#*:}" "$demo/build.json"; done
git -C "$demo/main" pull --quiet --ff-only
diff -r -x sandbox.yaml "$root/fixtures/tenant/releases" "$demo/main/releases" &&
	echo "  releases/ on main is fixtures/tenant/releases, digest for digest: the builds are reproducible"

step "a released version never changes"
"$nuon" release database --repo "$demo/tenant.git" --version 1.1.0 --from "$demo/build-previous.json" 2>&1 | sed 's/^/  /' || true

# ---- end of artifacts ---------------------------------------------------------

# Secrets resolve inside the install, from the agent's environment; they
# never reach git.
export NUON_SECRET_LICENSE_KEY=demo-license-4242 NUON_SECRET_DB_PASSWORD=demo-db-password

# ---- the installs (lifecycle/, sandboxes/local) ---------------------------------
# Each install: its own key pair and trust file (never committed), its local
# sandbox (a real kube-apiserver and etcd, no kubelet: objects are stored and
# served, Pods never run; a registry with TLS and basic auth standing in for
# ECR), installs/<id>.yaml committed on main with the sandbox's registry, and
# its agent as a process that verifies each artifact with the vendor's key
# and copies it, with its signature, into the install's registry.
step "nuon install create --cloud local, for each install"
for id in "${installs[@]}"; do
	f=$root/fixtures/tenant/installs/$id.yaml
	echo "  $id:"
	"$nuon" install create "$id" --cloud local --repo "$demo/tenant.git" --dir "$demo/installs/$id" --commit \
		--channel "$(sed -n 's/^channel: //p' "$f")" \
		--input "cidr=$(sed -n 's/^  cidr: //p' "$f")" --input "domain=$(sed -n 's/^  domain: //p' "$f")" \
		--render-key "$root/fixtures/keys/render.pub" \
		--agent-flag=--vendor-key="$root/fixtures/keys/cosign.pub" \
		--agent-flag=--interval=1s --agent-flag=--max-backoff=3s --agent-flag=--log-level=warn --log-level warn |
		sed 's/^/    /'
done
git -C "$demo/main" pull --quiet --ff-only
git -C "$demo/main" log --format='  %h %s' -3
# ---- end of the installs --------------------------------------------------------

# converge waits until every install's agent reported on its current desired
# state with every component applied.
converge() {
	for _ in $(seq 600); do
		if "$nuon" status --repo "$demo/tenant.git" -o json | python3 -c '
import json, sys
rows = json.load(sys.stdin)
ok = rows and all(r["inSync"] and r["components"] and all(c["phase"] == "Applied" for c in r["components"]) for r in rows)
sys.exit(0 if ok else 1)'; then
			return 0
		fi
		sleep 0.5
	done
	echo "demo: the agents did not converge within 5 minutes; their logs: $demo/installs/*/agent.log" >&2
	return 1
}

step "nuon render: every install's desired state as signed commits"
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render"
git -C "$demo/tenant.git" for-each-ref --format='  %(objectname:short) %(refname)' refs/heads/nuon/

step "stock git verifies the renderer's signature"
echo "renderer $(cut -d' ' -f1,2 "$root/fixtures/keys/render.pub")" > "$demo/allowed_signers"
git -C "$demo/tenant.git" -c gpg.ssh.allowedSignersFile="$demo/allowed_signers" verify-commit refs/heads/nuon/installs/acme 2>&1 | sed 's/^/  /'

step "each install's agent: verify, sync artifacts, run terraform, helm and manifests jobs, write signed status"
converge

# ---- artifacts ----------------------------------------------------------------
step "acme's registry (from its sandbox) holds what its agent deployed, each artifact beside its signature"
acme_reg=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["registry"]["url"])' "$demo/installs/acme/sandbox/outputs.json")
acme_curl=(curl -s --cacert "$demo/installs/acme/sandbox/run/registry/cert.pem" -u "nuon:$(cat "$demo/installs/acme/sandbox/run/registry/password")")
"${acme_curl[@]}" "https://$acme_reg/v2/_catalog" |
	tr -d '{}[]"' | sed 's/^repositories://' | tr ',' '\n' | sed 's/^/  /'
"${acme_curl[@]}" "https://$acme_reg/v2/nuon/acme/shop/network/tags/list" |
	sed 's/^/  nuon\/acme\/shop\/network tags: /'
echo
# ---- end of artifacts ---------------------------------------------------------

step "acme's sandbox: its agent's first component, adopted from nuon install create"
git -C "$demo/tenant.git" show refs/heads/nuon/status/acme:status.json | python3 -c '
import json, sys
st = json.load(sys.stdin)
sb = st["components"]["sandbox"]
print("  sandbox %s %s; its outputs feed the components:" % (sb["version"], sb["phase"]))
for k in ("registry", "cluster", "dns"):
    print("    %-9s %s" % (k, {kk: v for kk, v in sb["outputs"][k].items() if kk != "certificate_authority"}))'
git -C "$demo/tenant.git" show refs/heads/nuon/installs/acme:install.json | python3 -c '
import json, sys
print("  apply order: " + " → ".join(json.load(sys.stdin)["components"]))'

step "nuon status"
"$nuon" status --repo "$demo/tenant.git"
if command -v kubectl >/dev/null; then
	step "what acme's helm and manifests jobs applied (kubectl; no kubelet runs the Pods)"
	kubectl --kubeconfig "$demo/installs/acme/sandbox/run/kube/kubeconfig" get deployments,configmaps,secrets -n shop 2>/dev/null |
		grep -v kube-root-ca | sed 's/^/  acme: /' || true
fi

step "promotion: a pull request moves database to 1.1.0 on stable"
sed -i 's/^  database: 1.0.0$/  database: 1.1.0/' "$demo/main/channels/stable.yaml"
git -C "$demo/main" commit --quiet -am "stable: promote database 1.1.0"
git -C "$demo/main" push --quiet origin HEAD:main
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render" --dry-run | sed -n '1,6p'
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render"

step "agents: only the stable installs' database job runs"
converge
"$nuon" status --repo "$demo/tenant.git"

step "the audit log of acme: git log refs/heads/nuon/status/acme"
git -C "$demo/tenant.git" log --format='  %h %s' refs/heads/nuon/status/acme
echo "agent $(cut -d' ' -f1,2 "$demo/installs/acme/agent.key.pub")" > "$demo/acme_signers"
git -C "$demo/tenant.git" -c gpg.ssh.allowedSignersFile="$demo/acme_signers" verify-commit refs/heads/nuon/status/acme 2>&1 | sed 's/^/  /'
step "nuon install delete initech: its agent deletes every component, then its agent and sandbox go; its history stays"
"$nuon" install delete initech --repo "$demo/tenant.git" --dir "$demo/installs/initech" \
	--render "$root/fixtures/keys/render" --timeout 5m --log-level warn | sed 's/^/  /'
git -C "$demo/tenant.git" for-each-ref --format='  %(objectname:short) %(refname)' refs/nuon/archive/initech
git -C "$demo/tenant.git" log --format='  %h %s' -3 refs/nuon/archive/initech/status

printf '\ndemo state is in %s\n' "$demo"
