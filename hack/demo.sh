#!/usr/bin/env bash
# demo.sh NUON DEMO_DIR         the whole loop, then stops everything it started
# demo.sh --up NUON DEMO_DIR    the same loop, but leaves the installs (agents,
#                               sandboxes), nuon server and the vendor registry running, and
#                               writes DEMO_DIR/env to source (make demo-up)
# demo.sh --down DEMO_DIR       stops what --up left running (make demo-down)
#
# The whole loop on local defaults: a tenant repository with the sample app
# (fixtures/tenant) on main, its artifacts built, signed and released by
# "vendor CI", rendered into signed per-install commits, one agent per install
# syncing the artifacts into its registry and converging its install
# (terraform, helm and manifests against a local API server), then
# `nuon status`. The agents talk to `nuon server` only: it serves the tenant
# repository on loopback, each agent signing its requests with its own
# install key (--server-auth), and renders every change of main. Then a
# promotion: a pull request's worth of change to a channel pin, rendered, and
# the agents on that channel updating just that component. Each install is
# made by `nuon install create --cloud local`: its keys, its local sandbox
# (kube-apiserver, a registry with TLS and basic auth), installs/<id>.yaml on
# main, and its agent as a process, which adopts the sandbox as the install's
# first component (released by vendor CI from sandboxes/ and pinned on both
# channels, like any component); then change control, and one install
# deleted with `nuon install delete`. Last, a vendor's own plugin (the Perl
# zonefile plugin) in a second app of the vendor's, zones, with its own
# nuon server and install: released, synced and run by digest, then
# upgraded by a release and a pin while the same agent process runs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=once
case ${1:-} in
--up) mode=up; shift ;;
--down) mode=down; shift ;;
esac

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
# act closes the act before it, printing how long it took, and opens the
# next: the demo tells its story in acts.
act_name= act_start=$SECONDS
act() {
	[[ -n $act_name ]] && printf '\n\033[36m--- %s: %ds\033[0m\n' "$act_name" $((SECONDS - act_start))
	act_name=$1 act_start=$SECONDS
	[[ -n $act_name ]] && printf '\n\033[1;36m===== %s\033[0m\n' "$act_name"
	return 0
}

# stop_all stops what a demo in $demo left running: each install's agent
# (its whole session: the agent and its jobs) and sandbox (kube-apiserver,
# etcd, kube-controller-manager, its registry), then nuon server and the
# vendor registry.
stop_all() {
	local d
	for d in "$demo"/installs/*/; do
		[[ -d $d ]] || continue
		d=${d%/}
		[[ -f $d/agent.pid ]] && kill -- -"$(cat "$d/agent.pid")" 2>/dev/null || true
		[[ -x $d/sandbox/module/kube-down.sh ]] && "$d/sandbox/module/kube-down.sh" "$d/sandbox/run/kube" >/dev/null 2>&1 || true
		[[ -x $d/sandbox/module/registry.sh ]] && "$d/sandbox/module/registry.sh" down "$d/sandbox/run/registry" || true
	done
	# The zones app of the plugin act: its install's agent, its nuon
	# server and its install's registry.
	[[ -f $demo/zones/acme/agent.pid ]] && kill -- -"$(cat "$demo/zones/acme/agent.pid")" 2>/dev/null || true
	[[ -f $demo/zones/server/server.pid ]] && kill -- -"$(cat "$demo/zones/server/server.pid")" 2>/dev/null || true
	[[ -d $demo/zones/registry ]] && "$root/hack/registry.sh" stop "$demo/zones/registry" || true
	[[ -f $demo/server/server.pid ]] && kill -- -"$(cat "$demo/server/server.pid")" 2>/dev/null || true
	[[ -d $demo/registries/vendor ]] && "$root/hack/registry.sh" stop "$demo/registries/vendor" || true
}

if [[ $mode == down ]]; then
	demo=$1
	if [[ ! -d $demo ]]; then
		echo "demo-down: no demo in $demo"
		exit 0
	fi
	demo=$(cd "$demo" && pwd)
	stop_all
	rm -f "$demo/env"
	echo "demo-down: stopped the agents, sandboxes, nuon server and vendor registry of $demo (its repository and state stay)"
	exit 0
fi

nuon=$(realpath "$1")
demo=$2
# The last act's plugin is a Perl script using core modules only (Debian's
# git package brings perl): better said now than after three minutes.
if [[ $mode == once ]] && ! perl -MJSON::PP -e 1 2>/dev/null; then
	echo "demo: the zonefile plugin (fixtures/plugins/zonefile) needs perl with JSON::PP: apt-get install perl" >&2
	exit 1
fi

# A demo left up (--up) is stopped before its folder goes.
if [[ -d $demo/installs ]]; then
	demo=$(cd "$demo" && pwd)
	stop_all
fi
rm -rf "$demo"
mkdir -p "$demo"
demo=$(cd "$demo" && pwd)
export GIT_AUTHOR_NAME="Vendor Dev" GIT_AUTHOR_EMAIL=dev@vendor.example
export GIT_COMMITTER_NAME="Vendor Dev" GIT_COMMITTER_EMAIL=dev@vendor.example

act "the fleet: the app built, signed and released; nuon server renders it; three installs converge"
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
# (their agents and sandboxes); with --up only when the demo failed.
trap stop_all EXIT
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

# ---- the tenant server (server/) ------------------------------------------------
# nuon server serves tenant.git on loopback: each agent signs its requests
# with its own install key (--server-auth, checked against agentKey in
# installs/<id>.yaml on main) and reads and writes only its own refs. The
# server checks main every second, and at once when the git host's webhook
# (here hook, below) posts to /hooks/main with the hook secret, and renders
# each change with the renderer's key, as nuon render does: the demo pushes to main and never
# renders itself. Operators holding the token see the fleet on /fleet.
step "nuon server: the one endpoint the agents talk to; it renders every change of main"
mkdir -p "$demo/server"
(umask 077 && for f in view-token replica-token hook-secret; do head -c 32 /dev/urandom | base64 >"$demo/server/$f"; done)
server_addr=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server_url=http://$server_addr
# Its own session, so that stop_all stops it as a group.
setsid "$nuon" server --repo "$demo/tenant.git" --render-key "$root/fixtures/keys/render" \
	--listen "$server_addr" --poll-interval 1s --view-token-file "$demo/server/view-token" \
	--replica-token-file "$demo/server/replica-token" --hook-secret-file "$demo/server/hook-secret" \
	>"$demo/server/server.log" 2>&1 </dev/null &
echo $! >"$demo/server/server.pid"
for _ in $(seq 100); do curl -sf "$server_url/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "$server_url/readyz" >/dev/null || {
	echo "demo: nuon server at $server_url is not ready; its log: $demo/server/server.log" >&2
	exit 1
}
echo "  nuon server  $server_url/tenant.git  (log $demo/server/server.log)"
echo "  fleet view   $server_url/fleet  (operators' token in $demo/server/view-token)"

# hook is the git host's push webhook, signed as GitHub signs it (an
# HMAC-SHA256 of the body under the hook secret): the server checks main at
# once instead of at its next poll. hook URL SECRET-FILE calls another
# server's.
hook() {
	local url=${1:-$server_url} secret=${2:-$demo/server/hook-secret} body='{"ref":"refs/heads/main"}' sig
	sig=$(printf '%s' "$body" | python3 -c '
import hashlib, hmac, sys
print(hmac.new(open(sys.argv[1], "rb").read().strip(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())' "$secret")
	curl -sf -o /dev/null -X POST -H "X-Hub-Signature-256: sha256=$sig" --data "$body" "$url/hooks/main"
}

# install_refs lists the rendered desired refs; rendered waits until they
# differ from $1 and there are $2 of them: the server rendered main.
install_refs() { git -C "$demo/tenant.git" for-each-ref --format='%(objectname) %(refname)' refs/heads/nuon/installs/; }
rendered() {
	for _ in $(seq 300); do
		local now
		now=$(install_refs)
		if [[ $now != "$1" && $(grep -c . <<<"$now") -eq $2 ]]; then
			return 0
		fi
		sleep 0.2
	done
	echo "demo: nuon server did not render main within a minute; its log: $demo/server/server.log" >&2
	return 1
}

# Secrets resolve inside the install, from the agent's --secrets-file
# (or its environment); they never reach git.
printf '%s\n' "# the demo installs' secrets: NAME=VALUE, NAME as in \${secrets.NAME}" \
	license_key=demo-license-4242 db_password=demo-db-password >"$demo/secrets.env"
chmod 600 "$demo/secrets.env"
# The operators each agent trusts for requests: trust/requests on main
# (fixtures/keys/operator signs as "support").
cp "$root/fixtures/tenant/trust/requests" "$demo/request_signers"
# The approvers each agent trusts for plans: trust/approvals on main
# (fixtures/keys/approver signs as "release-manager"); a render or request
# key never counts as one, whatever the file says.
cp "$root/fixtures/tenant/trust/approvals" "$demo/approvers"

# ---- the installs (lifecycle/, sandboxes/local) ---------------------------------
# Each install: its own key pair and trust file (never committed), its local
# sandbox (a real kube-apiserver and etcd, no kubelet: objects are stored and
# served, Pods never run; a registry with TLS and basic auth standing in for
# ECR), installs/<id>.yaml committed on main with the sandbox's registry, and
# its agent as a process that verifies each artifact with the vendor's key
# and copies it, with its signature, into the install's registry. The file
# goes on main in the tenant repository; the agent talks to nuon server,
# signing with the install's key, which the server knows from that file.
step "nuon install create --cloud local, for each install; its agent talks to nuon server"
agent_flags=(--agent-flag=--server-auth --agent-flag=--vendor-key="$root/fixtures/keys/cosign.pub"
	--agent-flag=--request-trust="$demo/request_signers" --agent-flag=--approval-trust="$demo/approvers"
	--agent-flag=--interval=1s --agent-flag=--max-backoff=3s --agent-flag=--log-level=warn
	--agent-flag=--health-interval=10s)
for id in "${installs[@]}"; do
	f=$root/fixtures/tenant/installs/$id.yaml
	echo "  $id:"
	"$nuon" install create "$id" --cloud local --repo "$demo/tenant.git" --dir "$demo/installs/$id" --commit \
		--phase keys --phase sandbox --phase install-file \
		--channel "$(sed -n 's/^channel: //p' "$f")" \
		--input "cidr=$(sed -n 's/^  cidr: //p' "$f")" --input "domain=$(sed -n 's/^  domain: //p' "$f")" \
		--render-key "$root/fixtures/keys/render.pub" --log-level warn |
		sed 's/^/    /'
	hook
	# The customer's own policy, read by the agent from inside the
	# install (here a file in its folder; none of main's business).
	customer=()
	if [[ $id == globex ]]; then
		printf 'apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n' >"$demo/installs/$id/customer-policy.yaml"
		customer=(--agent-flag=--customer-policy="$demo/installs/$id/customer-policy.yaml")
	fi
	"$nuon" install create "$id" --cloud local --repo "$server_url/tenant.git" --dir "$demo/installs/$id" \
		--phase agent --secrets-file "$demo/secrets.env" "${agent_flags[@]}" "${customer[@]}" --log-level warn |
		sed 's/^/    /'
done
git -C "$demo/main" pull --quiet --ff-only
git -C "$demo/main" log --format='  %h %s' -3
# ---- end of the installs --------------------------------------------------------

# up_env writes $demo/env, which a shell sources to reach what --up left
# running, and prints how to reach each piece.
up_env() {
	local id d reg v
	{
		echo "# source this file: the demo make demo-up left running in $demo"
		echo "export PATH=$(dirname "$nuon"):\$PATH"
		echo "export NUON_REPO=$demo/tenant.git"
		echo "export NUON_SERVER_URL=$server_url"
		echo "export NUON_SERVER_LOG=$demo/server/server.log"
		echo "export NUON_SERVER_PID_FILE=$demo/server/server.pid"
		echo "export NUON_FLEET_URL=$server_url/fleet"
		echo "export NUON_VIEW_TOKEN_FILE=$demo/server/view-token"
		echo "export NUON_REPLICA_TOKEN_FILE=$demo/server/replica-token"
		echo "export NUON_HOOK_SECRET_FILE=$demo/server/hook-secret"
		echo "export NUON_VENDOR_KEY=$root/fixtures/keys/cosign.pub"
		echo "export NUON_REQUEST_TRUST=$demo/request_signers"
		echo "export NUON_APPROVAL_TRUST=$demo/approvers"
		echo "export NUON_APPROVER_KEY=$root/fixtures/keys/approver"
		echo "export NUON_GLOBEX_CUSTOMER_POLICY=$demo/installs/globex/customer-policy.yaml"
		echo "export NUON_RENDER_KEY=$root/fixtures/keys/render"
		echo "export NUON_OPERATOR_KEY=$root/fixtures/keys/operator"
		echo "export NUON_VENDOR_REGISTRY=$vendor_reg"
		echo "export NUON_KUBE_ASSETS=${NUON_KUBE_ASSETS:-}"
		echo "export NUON_TF_CLI_CONFIG=${NUON_TF_CLI_CONFIG:-}"
		echo "export NUON_SECRETS_FILE=$demo/secrets.env"
		for id in "${installs[@]}"; do
			d=$demo/installs/$id
			reg=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["registry"]["url"])' "$d/sandbox/outputs.json")
			v=${id^^}
			echo "export NUON_${v}_DIR=$d"
			echo "export NUON_${v}_KUBECONFIG=$d/sandbox/run/kube/kubeconfig"
			echo "export NUON_${v}_REGISTRY=$reg"
			echo "export NUON_${v}_REGISTRY_CA=$d/sandbox/run/registry/cert.pem"
			echo "export NUON_${v}_REGISTRY_PASSWORD_FILE=$d/sandbox/run/registry/password"
		done
	} >"$demo/env"
	step "the demo stays up; make demo-down stops it"
	cat <<REACH
  . $demo/env
  fleet view         $server_url/fleet  sign in with the token $(cat "$demo/server/view-token")
                     (in \$NUON_VIEW_TOKEN_FILE; this demo's only, on loopback)
  curl -H "Authorization: Bearer \$(cat "\$NUON_VIEW_TOKEN_FILE")" "\$NUON_FLEET_URL"
  nuon status                                              what each agent reported, read through nuon server
                                                           (\$NUON_SERVER_URL, each request signed with \$NUON_OPERATOR_KEY)
  nuon logs acme database --tail 5                         a signed request, filed through nuon server, which renders
                                                           it into acme's desired state at once; acme's agent answers
  nuon requests --install acme                             the requests' state; answers in git show nuon/status/acme:answers/ID.txt
  nuon approvals --key "\$NUON_APPROVER_KEY"                the plans that wait for an approval; approve one with
                                                           nuon approve INSTALL COMPONENT --plan HASH --key "\$NUON_APPROVER_KEY"
  docs/operators-guide.md                                  the rest: restart, re-point, delete, trust, drift
  kubectl --kubeconfig "\$NUON_ACME_KUBECONFIG" get deployments,configmaps -n shop
  curl --cacert "\$NUON_ACME_REGISTRY_CA" -u "nuon:\$(cat "\$NUON_ACME_REGISTRY_PASSWORD_FILE")" "https://\$NUON_ACME_REGISTRY/v2/_catalog"
  tail -f "\$NUON_ACME_DIR/agent.log"

  stop an agent      kill -TERM -- -\$(cat "\$NUON_ACME_DIR/agent.pid")
  start it again     nuon install create acme --repo "\$NUON_SERVER_URL/tenant.git" --dir "\$NUON_ACME_DIR" --phase agent \\
                         --secrets-file "\$NUON_SECRETS_FILE" --agent-flag=--server-auth \\
                         --agent-flag=--vendor-key=$root/fixtures/keys/cosign.pub \\
                         --agent-flag=--request-trust=$demo/request_signers \\
                         --agent-flag=--approval-trust=$demo/approvers --agent-flag=--interval=1s
  stop everything    make demo-down DEMO_DIR=$demo

REACH
	for id in "${installs[@]}"; do
		d=$demo/installs/$id
		printf '  %-8s agent pid %s, log %s\n' "$id" "$(cat "$d/agent.pid")" "$d/agent.log"
	done
	printf '  %-8s pid %s, log %s\n' server "$(cat "$demo/server/server.pid")" "$demo/server/server.log"
	printf '  %-8s %s\n' vendor "registry $vendor_reg"
}

# The operator's view goes through nuon server, signed with the operator's key.
op_status() { "$nuon" status --server "$server_url" --key "$root/fixtures/keys/operator" | sed 's/^/  /'; }

# converge waits until every install's agent reported on its current desired
# state with every component applied.
converge() {
	for _ in $(seq 600); do
		if "$nuon" status --repo "$demo/tenant.git" -o json | python3 -c '
import json, sys
rows = json.load(sys.stdin)
ok = len(rows) == int(sys.argv[1]) and all(r["inSync"] and r["components"] and all(c["phase"] == "Applied" for c in r["components"]) for r in rows)
sys.exit(0 if ok else 1)' "${#installs[@]}"; then
			return 0
		fi
		sleep 0.5
	done
	echo "demo: the agents did not converge within 5 minutes; their logs: $demo/installs/*/agent.log" >&2
	return 1
}

step "nuon server rendered every install's desired state as signed commits"
rendered "" "${#installs[@]}"
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

step "nuon status, read through nuon server with the operator's key (trust/requests on main lists it)"
op_status
if command -v kubectl >/dev/null; then
	step "what acme's helm and manifests jobs applied (kubectl; no kubelet runs the Pods)"
	kubectl --kubeconfig "$demo/installs/acme/sandbox/run/kube/kubeconfig" get deployments,configmaps,secrets -n shop 2>/dev/null |
		grep -v kube-root-ca | sed 's/^/  acme: /' || true
fi

act "a promotion: database 1.1.0 on stable, no rollout policy yet: both stable installs at once"
step "promotion: a pull request moves database to 1.1.0 on stable"
sed -i 's/^  database: 1.0.0$/  database: 1.1.0/' "$demo/main/channels/stable.yaml"
git -C "$demo/main" commit --quiet -am "stable: promote database 1.1.0"
git -C "$demo/main" push --quiet origin HEAD:promote-database
echo "  what it changes (nuon render --dry-run --source refs/heads/promote-database):"
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render" --source refs/heads/promote-database --dry-run |
	sed -n '1,6p' | sed 's/^/  /'
before=$(install_refs)
git -C "$demo/main" push --quiet origin HEAD:main
hook
echo "  merged; the git host's webhook tells nuon server, which renders it:"
rendered "$before" "${#installs[@]}"
git -C "$demo/tenant.git" for-each-ref --format='  %(objectname:short) %(refname)' refs/heads/nuon/installs/

step "agents: only the stable installs' database job runs"
converge
op_status

step "the audit log of acme: git log refs/heads/nuon/status/acme"
git -C "$demo/tenant.git" log --format='  %h %s' refs/heads/nuon/status/acme
echo "agent $(cut -d' ' -f1,2 "$demo/installs/acme/agent.key.pub")" > "$demo/acme_signers"
git -C "$demo/tenant.git" -c gpg.ssh.allowedSignersFile="$demo/acme_signers" verify-commit refs/heads/nuon/status/acme 2>&1 | sed 's/^/  /'
if [[ $mode == up ]]; then
	act ""
	up_env
	trap - EXIT
	exit 0
fi

# ---- change control: a staged rollout (rollout/, server/rollout.go) -------------
# The demo's own copy of the tenant gets a rollout policy on stable, by a
# pull request: acme, labelled ring=canary, gets each change of stable's
# pins first; initech, the rest, only once acme runs it healthy. nuon
# server's rollout controller decides each step from the installs' signed
# status and records it, signed, on refs/heads/nuon/rollouts/stable.
act "change control: a staged rollout on stable halts on a bad release, then a fix finishes"

# rollout_state prints stable's rollout.json as the controller last wrote
# it (nothing before its first decision).
rollout_state() { git -C "$demo/tenant.git" show refs/heads/nuon/rollouts/stable:rollout.json 2>/dev/null || true; }
# decided waits until the controller's last decision on stable is $1 for
# a rollout to dashboards $2.
decided() {
	for _ in $(seq 600); do
		if rollout_state | python3 -c '
import json, sys
try:
    st = json.load(sys.stdin)
except ValueError:
    sys.exit(1)
sys.exit(0 if st["decision"]["kind"] == sys.argv[1] and st["to"].get("dashboards") == sys.argv[2] else 1)' "$1" "$2"; then
			return 0
		fi
		sleep 0.5
	done
	echo "demo: the rollout controller did not decide \"$1\" for dashboards $2 within 5 minutes; its log: $demo/server/server.log" >&2
	rollout_state >&2
	return 1
}
rollout_status() { "$nuon" rollout status stable --server "$server_url" --key "$root/fixtures/keys/operator" --trust "$demo/allowed_signers" --history "${1:-5}" | sed 's/^/  /'; }
# dashboards_of prints the dashboards version each install's agent last
# reported, and how it stands.
dashboards_of() {
	local id
	for id in "${installs[@]}"; do
		git -C "$demo/tenant.git" show "refs/heads/nuon/status/$id:status.json" | python3 -c '
import json, sys
c = json.load(sys.stdin)["components"].get("dashboards", {})
err = (": " + c["error"].splitlines()[0][:110]) if c.get("error") else ""
print("  %-8s dashboards %-6s %s%s" % (sys.argv[1], c.get("version", "-"), c.get("phase", "-"), err))' "$id"
	done
}

# A wave passes only on installs healthy on the new version: every
# component Applied and Ready. The sandboxes run no kubelet, so the API's
# Pods never run and its Deployment stays Progressing: the demo runs it at
# 0 replicas, which the Deployment controller reports Ready, and each
# agent checks its components' health every 10 s (--health-interval).
step "the demo's API at 0 replicas: no kubelet runs its Pods, and a rollout needs every component Ready"
git -C "$demo/main" pull --quiet --ff-only
sed -i 's/^      replicas: 2$/      replicas: 0/' "$demo/main/nuon.yaml"
git -C "$demo/main" commit --quiet -am "shop: the demo's API at 0 replicas (its sandboxes run no Pods)"
git -C "$demo/main" push --quiet origin HEAD:main
hook
converge

step "a pull request labels acme ring=canary and gives stable two waves: canary, then the rest"
git -C "$demo/main" pull --quiet --ff-only
printf 'labels:\n  ring: canary\n' >>"$demo/main/installs/acme.yaml"
cat >>"$demo/main/channels/stable.yaml" <<'POLICY'
# Each change of these pins reaches the canary ring first, the rest
# only when every canary runs it healthy.
rollout:
  waves:
    - name: canary
      selector:
        matchLabels: {ring: canary}
    - name: rest
      rest: true
POLICY
git -C "$demo/main" commit --quiet -am "stable: changes reach the canary ring (acme) first, then the rest"
git -C "$demo/main" push --quiet origin HEAD:rollout-policy
echo "  nuon render --dry-run --source refs/heads/rollout-policy shows the waves:"
"$nuon" render --repo "$demo/tenant.git" --key "$root/fixtures/keys/render" --source refs/heads/rollout-policy --dry-run |
	grep -i -A4 'wave' | sed 's/^/    /' || true
git -C "$demo/main" push --quiet origin HEAD:main
hook
decided baseline 1.1.0
echo "  merged; the rollout controller recorded stable's pins as its baseline:"
rollout_status 1

step "vendor CI releases dashboards 1.3.0 (fixtures/demo/dashboards-1.3.0: a ConfigMap key the API server refuses)"
build dashboards --dir dashboards="$root/fixtures/demo/dashboards-1.3.0" -o json >"$demo/build-dashboards-1.3.0.json"
release dashboards 1.3.0 "$demo/build-dashboards-1.3.0.json"
git -C "$demo/main" pull --quiet --ff-only
sed -i 's/^  dashboards: .*/  dashboards: 1.3.0/' "$demo/main/channels/stable.yaml"
git -C "$demo/main" commit --quiet -am "stable: promote dashboards 1.3.0"
git -C "$demo/main" push --quiet origin HEAD:main
hook
echo "  merged stable: dashboards 1.3.0; the controller opens wave 1 (acme) only; acme's agent fails to apply it, its signed status says so, and the controller halts:"
decided halted 1.3.0
rollout_status 3
step "halted: acme alone got 1.3.0; initech (wave 2) and globex (beta) never did"
dashboards_of
echo "  nuon status, through nuon server with the operator's key:"
op_status

step "vendor CI releases the fix, dashboards 1.3.1; stable pins it: a new rollout, canary first again"
build dashboards --dir dashboards="$root/fixtures/demo/dashboards-1.3.1" -o json >"$demo/build-dashboards-1.3.1.json"
release dashboards 1.3.1 "$demo/build-dashboards-1.3.1.json"
git -C "$demo/main" pull --quiet --ff-only
sed -i 's/^  dashboards: .*/  dashboards: 1.3.1/' "$demo/main/channels/stable.yaml"
git -C "$demo/main" commit --quiet -am "stable: promote dashboards 1.3.1, the fix of 1.3.0"
git -C "$demo/main" push --quiet origin HEAD:main
hook
echo "  acme runs 1.3.1 healthy, so wave 2 opens: initech goes from 1.1.0 straight to 1.3.1, never seeing 1.3.0:"
decided finished 1.3.1
rollout_status 4
converge
step "finished: every stable install runs dashboards 1.3.1"
dashboards_of
op_status
# ---- end of change control ------------------------------------------------------

# ---- change control inside an install (agent/, policy/, server/operator_approvals.go) ----
# globex (beta; no rollout policy) gets the three controls that act inside
# an install: a component that changes only with an approval bound to the
# exact saved plan, filed by an approver through nuon server; the
# customer's own hold, which the agent reads from inside the install; and
# a Rego policy on main that blocks a destroy whoever approves it.
act "inside an install: a plan approved by its hash, the customer's hold, a destroy blocked by policy"

# component ID COMP prints COMP's version and phase as ID's agent last
# reported them, and why when it waits or was refused.
component() {
	git -C "$demo/tenant.git" show "refs/heads/nuon/status/$1:status.json" | python3 -c '
import json, sys
st = json.load(sys.stdin)
c = st["components"].get(sys.argv[1], {})
p = c.get("plan") or {}
why = "; ".join(p.get("denied") or []) or p.get("needs", "")
d = st.get("deferred") or {}
print("%s %s %s%s%s" % (sys.argv[1], c.get("version", "-"), c.get("phase", "-"), (": " + why) if why else "",
      ("  [install " + d["reason"] + ": " + d["message"] + "]") if d else ""))' "$2"
}
# wait_for ID COMP WHAT waits until `component ID COMP` matches WHAT (a
# grep -E pattern).
wait_for() {
	for _ in $(seq 600); do
		component "$1" "$2" 2>/dev/null | grep -Eq "$3" && return 0
		sleep 0.5
	done
	echo "demo: $1's $2 is not \"$3\" after 5 minutes: $(component "$1" "$2"); its log: $demo/installs/$1/agent.log" >&2
	return 1
}
approver=(--server "$server_url" --key "$root/fixtures/keys/approver")

step "a pull request: globex's database changes only with an approval, and globex moves to a new network"
git -C "$demo/main" pull --quiet --ff-only
sed -i 's#^  cidr: .*#  cidr: 10.30.0.0/16#' "$demo/main/installs/globex.yaml"
printf 'approvals:\n  database:\n    mode: manual\n' >>"$demo/main/installs/globex.yaml"
git -C "$demo/main" commit --quiet -am "globex: database changes need an approval; globex moves to 10.30.0.0/16"
git -C "$demo/main" push --quiet origin HEAD:main
hook
echo "  the network is replaced at once; the database's new config would replace its file: globex's agent plans it,"
echo "  keeps the saved plan inside the install, and publishes its record in its signed status:"
wait_for globex database AwaitingApproval
echo "  nuon approvals, through nuon server with the approver's key:"
"$nuon" approvals --install globex "${approver[@]}" | sed 's/^/    /'
plan=$("$nuon" approvals --install globex "${approver[@]}" -o json | python3 -c 'import json, sys; print([r for r in json.load(sys.stdin) if r["component"] == "database"][0]["plan"]["hash"])')
step "nuon approve globex database --plan ${plan:0:19}…: signed by the approver, filed through nuon server"
approved_at=$SECONDS
"$nuon" approve globex database --plan "$plan" --expires 1h --reason "CHG-42: globex's new network" "${approver[@]}" | sed 's/^/  /'
wait_for globex database "Applied"
echo "  the agent applied exactly the saved plan $((SECONDS - approved_at))s after nuon approve; the approval is in git:"
git -C "$demo/tenant.git" log --format='    %h %s' -1 refs/heads/nuon/approvals
converge

step "the customer holds globex (a file inside the install, not on main): the agent applies nothing"
cat >"$demo/installs/globex/customer-policy.yaml" <<'HOLD'
apiVersion: nuon.dev/v1
kind: CustomerPolicy
hold:
  reason: quarter-end freeze
HOLD
git -C "$demo/main" pull --quiet --ff-only
printf 'versions:\n  dashboards: 1.3.1\n' >>"$demo/main/installs/globex.yaml"
git -C "$demo/main" commit --quiet -am "globex: dashboards 1.3.1 ahead of beta"
git -C "$demo/main" push --quiet origin HEAD:main
hook
wait_for globex dashboards "install hold"
sleep 3
echo "  main wants dashboards 1.3.1 on globex; its agent keeps 1.2.0 and says why:"
component globex dashboards | sed 's/^/    /'
op_status
step "the customer lifts the hold: globex converges"
printf 'apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n' >"$demo/installs/globex/customer-policy.yaml"
wait_for globex dashboards "1\\.3\\.1 Applied"
component globex dashboards | sed 's/^/  /'

step "a Rego policy on main (policies/keep-database-data.rego): no plan destroys the database's data"
git -C "$demo/main" pull --quiet --ff-only
cat >"$demo/main/policies/keep-database-data.rego" <<'REGO'
# The demo's database keeps its data in local_file.config: no plan may
# destroy it, whoever approves. Move the data out first.
package nuon.plans.demo

import rego.v1

deny contains msg if {
	input.component == "database"
	some rc in input.plan.resource_changes
	rc.address == "local_file.config"
	"delete" in rc.change.actions
	msg := sprintf("%s would be destroyed (keep-database-data.rego)", [rc.address])
}
REGO
sed -i 's#^  cidr: .*#  cidr: 10.40.0.0/16#' "$demo/main/installs/globex.yaml"
git -C "$demo/main" add --all
git -C "$demo/main" commit --quiet -m "policies: keep the database's data; globex moves again, to 10.40.0.0/16"
git -C "$demo/main" push --quiet origin HEAD:main
hook
wait_for globex database "Rejected"
echo "  globex's agent evaluated the policy on the saved plan: blocked, nothing destroyed, no approval can apply it:"
component globex database | sed 's/^/    /'
op_status
# ---- end of change control inside an install ----------------------------------

act "the end of an install"
step "nuon install delete initech: nuon server renders it deleted, its agent deletes every component, then its agent and sandbox go; its history stays"
"$nuon" install delete initech --repo "$demo/tenant.git" --dir "$demo/installs/initech" \
	--timeout 5m --log-level warn | sed 's/^/  /'
git -C "$demo/tenant.git" for-each-ref --format='  %(objectname:short) %(refname)' refs/nuon/archive/initech
git -C "$demo/tenant.git" log --format='  %h %s' -3 refs/nuon/archive/initech/status

# ---- a vendor's own plugin (plugin/, fixtures/plugins) ----------------------------
# The vendor's second app, zones (fixtures/plugins/tenant): one component,
# dns, of type plugin, which no built-in plugin applies but the vendor's
# own, zonefile (fixtures/plugins/zonefile): a Perl script that keeps DNS
# records in a zone file, speaking nuon's plugin protocol on stdin and
# stdout. zones has its own tenant repository, nuon server and install
# (acme, with a plain registry and no sandbox), so the shop above is left
# as it was. The plugin is released like any component (pushed to the
# vendor registry, signed, recorded on main), pinned on a channel,
# rendered by digest, copied by its install's agent into the install's
# registry after the signature checks out, and run by the job as its own
# process with what nuon.yaml grants it and nothing else. An upgrade is a
# release and a pin: the same agent process runs the new plugin.
act "a vendor's own plugin: released, synced by digest and run; upgraded by a pin, the agent untouched"
z=$demo/zones
# zones_status prints dns as acme's agent last reported it.
zones_status() {
	git -C "$z/tenant.git" show refs/heads/nuon/status/acme:status.json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin)["components"].get("dns", {})
err = c.get("error", "").splitlines()
ok = c.get("phase") == "Applied"
print("dns %s %s%s%s" % (c.get("version", "-"), c.get("phase", "-"), (" plugin " + c["digests"]["plugin"]) if ok else "",
      (": " + err[0]) if err else ""))'
}
# zones_wait waits until zones_status matches $1 (a grep -E pattern),
# reading the status again only when acme's agent pushed a new one.
zones_wait() {
	local seen= now
	for _ in $(seq 300); do
		now=$(git -C "$z/tenant.git" rev-parse -q --verify refs/heads/nuon/status/acme || true)
		if [[ $now != "$seen" ]]; then
			zones_status | grep -Eq "$1" && return 0
			seen=$now
		fi
		sleep 0.2
	done
	echo "demo: zones' dns is not \"$1\" after a minute: $(zones_status); its agent's log: $z/acme/agent.log" >&2
	return 1
}
# zones_release DIR: vendor CI releases the plugin in DIR as component
# dns's release (its version is the plugin's).
zones_release() {
	COSIGN_PASSWORD= "$nuon" plugin release "$1" --repository "$vendor_reg/acme/plugins/zonefile" \
		--key "$root/fixtures/keys/cosign.key" --repo "$z/tenant.git" --component dns | sed 's/^/  /'
}
# zones_pin VERSION: a pull request moves stable's pin of dns, merged.
zones_pin() {
	git -C "$z/main" pull --quiet --ff-only
	sed -i "s/^  dns: .*/  dns: $1/" "$z/main/channels/stable.yaml"
	git -C "$z/main" commit --quiet -am "stable: dns $1"
	git -C "$z/main" push --quiet origin HEAD:main
	hook "$zones_url" "$z/server/hook-secret"
}
# agent_of prints the agent's pid and the checksum of the binary it runs.
agent_of() {
	local pid
	pid=$(cat "$z/acme/agent.pid")
	# setsid execs nuon-agent in the same process: wait for it.
	for _ in $(seq 50); do [[ $(readlink "/proc/$pid/exe") == */nuon-agent ]] && break; sleep 0.1; done
	echo "pid $pid, $(readlink "/proc/$pid/exe") sha256 $(sha256sum <"/proc/$pid/exe" | cut -c1-16)…"
}

step "zones, the vendor's second app (fixtures/plugins/tenant): its component dns runs the vendor's own plugin"
git init --quiet --bare --initial-branch=main "$z/tenant.git"
git clone --quiet "$z/tenant.git" "$z/main" 2>/dev/null
cp -R "$root/fixtures/plugins/tenant/." "$z/main/"
mkdir -p "$z/main/trust" && cp "$root/fixtures/tenant/trust/requests" "$z/main/trust/"
zones_reg=$("$root/hack/registry.sh" serve "$z/registry")
sed -i "s#registry\.vendor\.example#$vendor_reg#" "$z/main/nuon.yaml"
sed -i "s#127\.0\.0\.1:5000#$zones_reg#" "$z/main/installs/acme.yaml"
git -C "$z/main" add --all
git -C "$z/main" commit --quiet -m "zones: one component, dns, applied by the zonefile plugin; stable pins 0.3.0"
git -C "$z/main" push --quiet origin HEAD:main
sed -n '/^  - name: dns/,/^    inputs:/p' "$z/main/nuon.yaml" | sed 's/^/  /'
mkdir -p "$z/server"
(umask 077 && head -c 32 /dev/urandom | base64 >"$z/server/hook-secret")
zones_addr=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
zones_url=http://$zones_addr
setsid "$nuon" server --repo "$z/tenant.git" --render-key "$root/fixtures/keys/render" --listen "$zones_addr" \
	--poll-interval 1s --hook-secret-file "$z/server/hook-secret" >"$z/server/server.log" 2>&1 </dev/null &
echo $! >"$z/server/server.pid"
for _ in $(seq 100); do curl -sf "$zones_url/readyz" >/dev/null && break; sleep 0.1; done
# acme's agent, as nuon install create starts one: nuon-agent through
# nuon server, its requests signed with its install key. The machine
# gives it the zone folder, which nuon.yaml grants the plugin (env:
# NUON_ZONE_DIR); the plugin gets no other variable of the agent's.
mkdir -p "$z/acme/zones"
NUON_ZONE_DIR=$z/acme/zones setsid "$(dirname "$nuon")/nuon-agent" agent --repo "$zones_url/tenant.git" --server-auth \
	--install acme --key "$root/fixtures/keys/acme" --trust "$demo/allowed_signers" --workdir "$z/acme/work" \
	--vendor-key "$root/fixtures/keys/cosign.pub" --interval 500ms --max-backoff 1s --log-level warn \
	>"$z/acme/agent.log" 2>&1 </dev/null &
echo $! >"$z/acme/agent.pid"
agent_before=$(agent_of)
echo "  nuon server $zones_url/tenant.git; acme's registry $zones_reg; acme's agent $agent_before"

step "vendor CI: nuon plugin release fixtures/plugins/zonefile (0.3.0): pushed, signed, recorded as dns's release on main"
zones_release "$root/fixtures/plugins/zonefile"
hook "$zones_url" "$z/server/hook-secret"
zones_wait '^dns 0\.3\.0 Applied'
echo "  nuon server rendered it; acme's agent verified the plugin's signature, copied it by digest into acme's registry, and its job ran it:"
zones_status | sed 's/^/    /'
digest=$(zones_status | sed 's/.* plugin \(sha256:[0-9a-f]*\).*/\1/')
echo "    acme's registry, nuon-acme/acme/plugins/zonefile: $digest $(curl -s -o /dev/null -w 'HTTP %{http_code}' -I \
	-H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$zones_reg/v2/nuon-acme/acme/plugins/zonefile/manifests/$digest"), tags $(
	curl -s "http://$zones_reg/v2/nuon-acme/acme/plugins/zonefile/tags/list" | python3 -c 'import json, sys; print(" ".join(json.load(sys.stdin)["tags"]))')"
echo "    $z/acme/zones/acme.shop.internal.zone:"
grep -v '^;' "$z/acme/zones/acme.shop.internal.zone" | sed 's/^/      /'
cp "$z/acme/zones/acme.shop.internal.zone" "$z/zone-0.3.0"

step "the upgrade: zonefile 0.4.0 gives a record without a TTL an hour, not five minutes; released, and a pull request pins it"
mkdir -p "$z/zonefile-0.4.0" && cp -R "$root/fixtures/plugins/zonefile/." "$z/zonefile-0.4.0/"
sed -i 's/0\.3\.0/0.4.0/' "$z/zonefile-0.4.0/plugin.json" "$z/zonefile-0.4.0/zonefile"
sed -i 's#\$ttl //= 300;#$ttl //= 3600;#' "$z/zonefile-0.4.0/zonefile"
{ diff -U0 "$root/fixtures/plugins/zonefile/zonefile" "$z/zonefile-0.4.0/zonefile" || true; } | grep -E '^[-+][^-+]' | sed 's/^/  /'
zones_release "$z/zonefile-0.4.0"
zones_pin 0.4.0
zones_wait '^dns 0\.4\.0 Applied'
# Meanwhile vendor CI releases 0.5.0, which asks for the network (below).
mkdir -p "$z/zonefile-0.5.0" && cp -R "$root/fixtures/plugins/zonefile/." "$z/zonefile-0.5.0/"
sed -i 's/0\.3\.0/0.5.0/' "$z/zonefile-0.5.0/plugin.json" "$z/zonefile-0.5.0/zonefile"
sed -i 's/"capabilities": {/"capabilities": {"network": true, /' "$z/zonefile-0.5.0/plugin.json"
zones_release "$z/zonefile-0.5.0" >"$z/release-0.5.0.log" 2>&1 &
release_050=$!
echo "  acme's agent synced 0.4.0 by its digest and ran it; the zone file, before → after:"
{ diff "$z/zone-0.3.0" "$z/acme/zones/acme.shop.internal.zone" || true; } | grep '^[<>]' | sed 's/^/    /'
echo "  nuon status, through zones' nuon server with the operator's key (and -o json: the plugin's digest, signed by acme's agent):"
zones_op=("$nuon" status --server "$zones_url" --key "$root/fixtures/keys/operator")
"${zones_op[@]}" | sed 's/^/    /'
"${zones_op[@]}" -o json | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    for c in r["components"]:
        print("    %s %s %s %s, digests.plugin %s" % (r["install"], c["name"], c["version"], c["phase"], c["digests"]["plugin"]))'
agent_after=$(agent_of)
echo "  acme's agent before: $agent_before"
echo "  acme's agent after:  $agent_after"
cp "$z/acme/zones/acme.shop.internal.zone" "$z/zone-0.4.0"
if [[ $agent_after != "$agent_before" ]]; then
	echo "demo: acme's agent is not the process that applied 0.3.0; its log: $z/acme/agent.log" >&2
	exit 1
fi
echo "  the same process, the same binary: the plugin was upgraded, the agent was not"

step "refused: zonefile 0.5.0 asks for the network, which nuon.yaml does not grant it"
wait "$release_050" || {
	echo "demo: nuon plugin release of zonefile 0.5.0 failed:" >&2
	cat "$z/release-0.5.0.log" >&2
	exit 1
}
sed -n 's/^  released /  vendor CI released it while the upgrade was shown: /p' "$z/release-0.5.0.log"
zones_pin 0.5.0
zones_wait '^dns 0\.5\.0 Failed'
zones_status | sed 's/^/  /'
if ! cmp -s "$z/zone-0.4.0" "$z/acme/zones/acme.shop.internal.zone"; then
	echo "demo: a refused plugin changed the zone file $z/acme/zones/acme.shop.internal.zone" >&2
	exit 1
fi
echo "  no request reached the plugin: the zone file is byte for byte what 0.4.0 wrote"
# ---- end of a vendor's own plugin -------------------------------------------------

act ""
printf '\nthe demo took %ds; its state is in %s\n' "$SECONDS" "$demo"
