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

# ---- artifacts (builder/, agent/sync/) ----------------------------------------
# Vendor CI builds, signs and releases the components; each agent verifies the
# signatures and copies the artifacts into its install's own registry before
# the jobs, which read them from there.
step "registries: the vendor's, and the installs' (TLS and basic auth, as ECR)"
"$root/hack/registry.sh" install
vendor_reg=$("$root/hack/registry.sh" serve "$demo/registries/vendor")
install_reg=$("$root/hack/registry.sh" serve "$demo/registries/install" nuon:demo-registry-secret)
trap '"$root/hack/registry.sh" stop "$demo/registries/vendor"; "$root/hack/registry.sh" stop "$demo/registries/install"' EXIT
echo "  vendor registry   $vendor_reg  (stands in for registry.vendor.example)"
echo "  install registry  $install_reg  (stands in for each install's ECR: nuon-<install>/...)"
sed -i "s#registry\.vendor\.example#$vendor_reg#" "$demo/main/nuon.yaml"
sed -i -E "s#^registry: .*/(nuon-[a-z0-9-]+)\$#registry: $install_reg/\1#" "$demo/main/installs/"*.yaml
git -C "$demo/main" rm --quiet -r releases
git -C "$demo/main" commit --quiet -am "shop: the demo's registries; vendor CI records the releases"
git -C "$demo/main" push --quiet origin HEAD:main

step "nuon build: package each component, push it by digest, sign it (cosign's format, offline)"
export COSIGN_PASSWORD= # the demo key has none
build() { "$nuon" build --app "$demo/main/nuon.yaml" --key "$root/fixtures/keys/cosign.key" --log-level warn "$@"; }
build --src "$root/fixtures/previous" -o json database api api-image dashboards >"$demo/build-previous.json"
build --src "$root/fixtures" | sed 's/^/  /'
echo "  a rebuild gives the same digests and keeps the signatures:"
build --src "$root/fixtures" -o json | tee "$demo/build.json" | grep -c '"signed": false' | sed 's/^/    unchanged artifacts: /'

step "nuon release: each version's digests recorded on main, one commit each"
release() { "$nuon" release "$1" --repo "$demo/tenant.git" --version "$2" --from "$3" | sed -n 's/^released /  released /p'; }
for cv in database:1.0.0 api:2.3.0 api-image:2.3.0 dashboards:1.1.0; do release "${cv%%:*}" "${cv#*:}" "$demo/build-previous.json"; done
for cv in network:1.0.0 database:1.1.0 api:2.4.0 api-image:2.4.0 dashboards:1.2.0; do release "${cv%%:*}" "${cv#*:}" "$demo/build.json"; done
git -C "$demo/main" pull --quiet --ff-only
diff -r "$root/fixtures/tenant/releases" "$demo/main/releases" &&
	echo "  releases/ on main is fixtures/tenant/releases, digest for digest: the builds are reproducible"

step "a released version never changes"
"$nuon" release database --repo "$demo/tenant.git" --version 1.1.0 --from "$demo/build-previous.json" 2>&1 | sed 's/^/  /' || true

# Agents verify each artifact with the vendor's public key and copy it, with
# its signature, into their install's registry.
export NUON_REGISTRY_PASSWORD=demo-registry-secret
artifact_flags=(--vendor-key "$root/fixtures/keys/cosign.pub" --registry "$install_reg"
	--registry-ca "$demo/registries/install/cert.pem" --registry-username nuon)
# ---- end of artifacts ---------------------------------------------------------

# ---- Kubernetes (reconciler/helm, reconciler/manifests) -------------------------
# A real kube-apiserver and etcd on loopback for each install stand in for
# the installs' clusters (no kubelet: objects are stored and served, Pods
# never run).
step "a local Kubernetes API server per install, for the helm and manifests components"
cleanup() {
	for id in acme globex initech; do "$root/hack/kube-down.sh" "$demo/kube/$id" >/dev/null 2>&1 || true; done
	"$root/hack/registry.sh" stop "$demo/registries/vendor"
	"$root/hack/registry.sh" stop "$demo/registries/install"
}
trap cleanup EXIT
declare -A kubeconfig
for id in acme globex initech; do
	kubeconfig[$id]=$("$root/hack/kube-up.sh" "$NUON_KUBE_ASSETS" "$demo/kube/$id")
	echo "  $id: ${kubeconfig[$id]}"
done
# ---- end of Kubernetes --------------------------------------------------------

step "nuon render: every install's desired state as signed commits"
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render"
git -C "$demo/tenant.git" for-each-ref --format='  %(objectname:short) %(refname)' refs/heads/nuon/

step "stock git verifies the renderer's signature"
echo "renderer $(cut -d' ' -f1,2 "$root/fixtures/keys/render.pub")" > "$demo/allowed_signers"
git -C "$demo/tenant.git" -c gpg.ssh.allowedSignersFile="$demo/allowed_signers" verify-commit refs/heads/nuon/installs/acme 2>&1 | sed 's/^/  /'

# Secrets resolve inside the install, from the agent's environment; they
# never reach git.
export NUON_SECRET_LICENSE_KEY=demo-license-4242 NUON_SECRET_DB_PASSWORD=demo-db-password

# Each agent is the small nuon-agent binary; it runs jobs with nuon beside it.
agents() {
	for id in acme globex initech; do
		"$(dirname "$nuon")/nuon-agent" agent --once --repo "$demo/tenant.git" --install "$id" \
			--trust "$demo/allowed_signers" --key "$root/fixtures/keys/$id" \
			--workdir "$demo/agents/$id" "${artifact_flags[@]}" --kubeconfig "${kubeconfig[$id]}" \
			--log-format text --log-level warn
	done
}

step "one agent per install: verify, sync artifacts, run terraform, helm and manifests jobs, write signed status"
agents

# ---- artifacts ----------------------------------------------------------------
step "the install registry holds what the agents deployed, each artifact beside its signature"
curl -s --cacert "$demo/registries/install/cert.pem" -u "nuon:$NUON_REGISTRY_PASSWORD" "https://$install_reg/v2/_catalog" |
	tr -d '{}[]"' | sed 's/^repositories://' | tr ',' '\n' | sed 's/^/  /'
curl -s --cacert "$demo/registries/install/cert.pem" -u "nuon:$NUON_REGISTRY_PASSWORD" "https://$install_reg/v2/nuon-acme/shop/network/tags/list" |
	sed 's/^/  nuon-acme\/shop\/network tags: /'
echo
# ---- end of artifacts ---------------------------------------------------------

step "nuon status"
"$nuon" status --repo "$demo/tenant.git"
if command -v kubectl >/dev/null; then
	step "what acme's helm and manifests jobs applied (kubectl; no kubelet runs the Pods)"
	kubectl --kubeconfig "${kubeconfig[acme]}" get deployments,configmaps,secrets -n shop 2>/dev/null |
		grep -v kube-root-ca | sed 's/^/  acme: /' || true
fi

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
