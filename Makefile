# nuon — see README.md. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
# Heavy tools are cached outside the clone, keyed by version.
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/nuon
DEMO_DIR ?= .demo
BIN := bin

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Terraform runs offline against providers built from the Go module proxy.
TF_PROVIDERS := $(CACHE)/terraform-providers/local-2.9.0-random-3.9.0
export TF_CLI_CONFIG_FILE := $(TF_PROVIDERS)/terraformrc
export NUON_TF_CLI_CONFIG := $(TF_CLI_CONFIG_FILE)

.PHONY: tf-providers
tf-providers: ## build the terraform providers for offline use (cached in $(CACHE))
	hack/tf-providers.sh $(TF_PROVIDERS)

# hashicorp/aws cannot be built offline, but its schema can: tools/tfaws
# serves the schema of aws 6.25.0 (from npm @cdktf/provider-aws) for
# terraform validate and terraform test with mock_provider. Its terraformrc
# also lists the local/random mirror, so one config serves all three.
TF_AWS := $(CACHE)/terraform-providers/aws-6.25.0
export NUON_TF_AWS_CLI_CONFIG := $(TF_AWS)/terraformrc

.PHONY: tf-aws
tf-aws: tf-providers ## build the schema-only hashicorp/aws 6.25.0 provider for validate and mock tests (cached in $(CACHE))
	hack/tf-aws.sh $(TF_AWS) $(TF_PROVIDERS)/mirror

# The CloudFormation resource specification (npm @aws-cdk/cfnspec), which
# the customer's stack template is checked against.
CFNSPEC := $(CACHE)/cfnspec/2.72.1/specification.json
export NUON_CFNSPEC := $(CFNSPEC)

.PHONY: cfnspec
cfnspec: ## fetch the CloudFormation resource specification for the stack tests (cached in $(CACHE))
	hack/cfnspec.sh $(CFNSPEC)

.PHONY: build
build: ## build bin/nuon, bin/nuon-agent and bin/nuon-plugin-exec (static: it runs inside a vendor plugin's own image)
	$(GO) build -o $(BIN)/ ./cmd/nuon ./cmd/nuon-agent
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/nuon-plugin-exec

.PHONY: demo
demo: build tf-providers kube-binaries registry ## the sample tenant on local defaults: nuon server renders it, each install's agent converges through the server (DEMO_DIR=.demo)
	hack/demo.sh $(BIN)/nuon $(DEMO_DIR)

.PHONY: demo-up
demo-up: build tf-providers kube-binaries registry ## the demo, left running: installs, agents, nuon server (and its fleet view) and the vendor registry stay up; source DEMO_DIR/env to reach them (docs/operators-guide.md)
	hack/demo.sh --up $(BIN)/nuon $(DEMO_DIR)

.PHONY: demo-down
demo-down: ## stop what demo-up left running (DEMO_DIR keeps the repository and state)
	hack/demo.sh --down $(DEMO_DIR)

.PHONY: demo-guide
demo-guide: build tf-providers kube-binaries registry ## run every step of docs/operators-guide.md, in order, against a fresh demo-up (TestOperatorsGuide with NUON_GUIDE_WALKTHROUGH=1; ~4 min, steps timed in its log)
	NUON_GUIDE_WALKTHROUGH=1 $(GO) test -count=1 -timeout 20m -run '^TestOperatorsGuide$$' -v ./cmd/nuon

# The stock cosign CLI, built from the Go module cache at the version
# go.mod requires, so a test can prove that `cosign verify-attestation`
# accepts the provenance nuon build writes.
COSIGN_VERSION := v2.6.5
COSIGN := $(CACHE)/cosign/$(COSIGN_VERSION)/cosign
export NUON_COSIGN := $(COSIGN)

.PHONY: cosign
cosign: ## build the cosign CLI for the provenance compatibility test (cached in $(CACHE); a few minutes the first time)
	@test -x $(COSIGN) || GOBIN=$(dir $(COSIGN)) $(GO) install github.com/sigstore/cosign/v2/cmd/cosign@$(COSIGN_VERSION)

.PHONY: test
test: tf-providers tf-aws cfnspec kube-binaries kube-node registry sshd chromium cosign ## run every test (real git servers, terraform, OCI registries, a kube-apiserver and a real node on loopback)
	NUON_REQUIRE_TOOLS=1 $(GO) test -race -count=1 -timeout 30m ./...
	cd tools/tfaws && GOWORK=off $(GO) test -count=1 ./...

.PHONY: vet
vet: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## run every fuzz target on its own for FUZZTIME each (CI: FUZZTIME=7s)
	hack/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: tf-providers tf-aws cfnspec kube-binaries registry sshd ## run the benchmarks (figures in BENCHMARKS.md)
	NUON_REQUIRE_TOOLS=1 $(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 -timeout 60m ./...

# ---- Kubernetes -------------------------------------------------------------
# A real kube-apiserver, kube-controller-manager and etcd, and kubectl of the
# same version, built from the Go module proxy in their own module
# (tools/kube) and cached outside the clone by version, all four in one
# folder. Only what is missing is built. Tests and benchmarks find them
# through NUON_KUBE_ASSETS (internal/kubetest); the demo and the local
# sandbox start them with kube-up.
KUBE_VERSION := v1.37.1
KUBE_ASSETS  := $(CACHE)/kube/$(KUBE_VERSION)
KUBE_DIR     ?= $(DEMO_DIR)/kube
export NUON_KUBE_ASSETS := $(KUBE_ASSETS)

.PHONY: kube-binaries
kube-binaries: ## build kube-apiserver, kube-controller-manager, etcd and kubectl of one version (cached in $(CACHE)/kube/VERSION; ~11-14 min cold)
	hack/kube-binaries.sh $(KUBE_ASSETS)

.PHONY: kube-up
kube-up: kube-binaries ## start a local kube-apiserver and kube-controller-manager in KUBE_DIR; prints its kubeconfig
	@hack/kube-up.sh $(KUBE_ASSETS) $(KUBE_DIR)

.PHONY: kube-down
kube-down: ## stop what kube-up started
	hack/kube-down.sh $(KUBE_DIR)

# A real node for the kubetest API server: kubelet (from tools/kube, like
# the API server), containerd and the CNI plugins from the Go module proxy,
# the pods' pause program, and Debian's runc; cached outside the clone by
# version. internal/kubetest's StartNode runs them (NUON_KUBE_NODE_ASSETS,
# else this folder); make test builds them, so a missing node fails there.
KUBE_NODE_ASSETS := $(CACHE)/kube-node/$(KUBE_VERSION)-containerd-v2.4.2-cni-v1.10.0
export NUON_KUBE_NODE_ASSETS := $(KUBE_NODE_ASSETS)

.PHONY: kube-node
kube-node: ## build kubelet, containerd and CNI plugins for a real node on loopback, install runc (cached in $(CACHE)/kube-node/VERSIONS; about 3.5 CPU-minutes cold after kube-binaries, plus the kubelet's build)
	hack/kube-node.sh $(KUBE_NODE_ASSETS)


# ---- Artifacts: OCI registries ----------------------------------------------
# Debian's docker-registry (Distribution 2.8) for the builder, sync and demo
# tests: internal/oci/ocitest starts it on loopback, with TLS and basic auth as
# ECR has them (openssl, htpasswd). Without it those tests skip, unless CI is
# set or they run under make test or make bench, when they fail
# (internal/testenv).
.PHONY: registry
registry: ## install docker-registry, htpasswd and openssl for the registry tests (apt-get)
	hack/registry.sh install

.PHONY: bench-fleet
bench-fleet: ## render 1,000, 10,000 and 100,000 installs cold and re-render one, then re-render one 10 times in-process (NUON_BENCH_FLEET lists the sizes; make bench runs 1,000 and 10,000); then the soak: NUON_BENCH_SOAK_INSTALLS (100,000) installs through the real server for a simulated week, NUON_BENCH_SOAK_CHANGES per mille changing a day: repository growth per install per day, loose objects, maintenance time, poll p99 during maintenance; then NUON_BENCH_MILLION (1,000,000; 0 skips) installs with the built binary beside 1,000: cold render, server start and memory, bytes per poll and push, a one-install change through the server, the fleet view (the repositories cached in ~/.cache/nuon/bench); then on the same repositories a writer and a read replica: signed polls of NUON_BENCH_FLEET_WORKERS (32) workers × 32 installs for NUON_BENCH_FLEET_SECONDS (10) against each (polls/s, p50/p99, CPU and bytes per poll, RSS), the replica's lag behind a main change (refresh every NUON_BENCH_FLEET_REFRESH, 500ms; waiting NUON_BENCH_FLEET_LAG_MINUTES, 10), and a rollout's status write-back: NUON_BENCH_FLEET_PUSHERS (32) pushing one signed status each for distinct installs for NUON_BENCH_FLEET_SECONDS or NUON_BENCH_FLEET_PUSHES (pushes/s, p50/p99, CPU and bytes per push, writer RSS, the whole fleet's write-back time; NUON_BENCH_FLEET_ONLY=polls or pushes runs one part, NUON_BENCH_FLEET_REPLICA=0 skips the replica)
	NUON_BENCH_FLEET=$${NUON_BENCH_FLEET:-1000,10000,100000} $(GO) test -run='^$$' -bench='^BenchmarkRenderFleet$$' -benchtime=1x -count=1 -timeout 60m ./renderer
	NUON_BENCH_FLEET=$${NUON_BENCH_FLEET:-1000,10000,100000} $(GO) test -run='^$$' -bench='^BenchmarkRerender$$' -benchtime=10x -count=1 -timeout 60m ./renderer
	NUON_BENCH_SOAK_INSTALLS=$${NUON_BENCH_SOAK_INSTALLS:-100000} $(GO) test -run='^$$' -bench='^BenchmarkFleetSoak$$' -benchtime=1x -count=1 -timeout 120m ./server
	NUON_BENCH_MILLION=$${NUON_BENCH_MILLION:-1000000} $(GO) test -run='^$$' -bench='^BenchmarkMillion$$' -benchtime=1x -count=1 -timeout 120m ./cmd/nuon
	NUON_BENCH_MILLION=$${NUON_BENCH_MILLION:-1000000} $(GO) test -run='^$$' -bench='^BenchmarkMillionFleet$$' -benchtime=1x -count=1 -timeout 120m ./cmd/nuon

.PHONY: bench-sync
bench-sync: registry ## artifact sync vs crane copy at 1 GB (NUON_BENCH_SYNC_MB) and a no-op sync of 50 artifacts
	NUON_REQUIRE_TOOLS=1 NUON_BENCH_SYNC_MB=$${NUON_BENCH_SYNC_MB:-1024} $(GO) test -run='^$$' -bench='SyncVsCrane|NoopSync' -benchtime=1x -count=1 -timeout 60m ./agent/sync


.PHONY: bench-server
bench-server: ## the tenant server's benchmarks: polls, fetches, status write-back for 60 s (NUON_BENCH_PUSH_SECONDS), render on change; the nuon server binary under idle-poll load for 30 s (NUON_BENCH_POLL_SECONDS, NUON_BENCH_POLL_WORKERS, NUON_BENCH_POLL_INSTALLS, NUON_BENCH_POLL_RATE, NUON_BENCH_POLL_IDLE) and under 10,000 hostile connections and the 249 MiB command list (NUON_BENCH_HOSTILE_CONNS, NUON_BENCH_HOSTILE_SECONDS, NUON_BENCH_HOSTILE_ATTACKS)
	NUON_BENCH_PUSH_SECONDS=$${NUON_BENCH_PUSH_SECONDS:-60} $(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 -timeout 30m ./server
	NUON_BENCH_POLL_SECONDS=$${NUON_BENCH_POLL_SECONDS:-30} $(GO) test -run='^$$' -bench='^BenchmarkServerPolls$$' -benchtime=1x -count=1 -timeout 30m ./cmd/nuon
	ulimit -n $$(ulimit -Hn) && $(GO) test -run='^$$' -bench='^BenchmarkServerHostile$$' -benchtime=1x -count=1 -timeout 30m ./cmd/nuon

.PHONY: bench-rollout
bench-rollout: ## staged rollouts through the real server and controller: a release that succeeds end to end at 10,000 and 100,000 installs (NUON_BENCH_ROLLOUT_SIZES; make bench runs 10,000) with a main change's cost at those sizes; a release halted and rolled back by wave 2's failing status at 10,000 (NUON_BENCH_ROLLOUT_INSTALLS); the rollout page at 100,000
	NUON_BENCH_ROLLOUT_SIZES=$${NUON_BENCH_ROLLOUT_SIZES:-10000,100000} $(GO) test -run='^$$' -bench='^Benchmark(RolloutSuccess|RolloutMainChange)$$' -benchtime=1x -count=1 -timeout 180m ./server
	$(GO) test -run='^$$' -bench='^Benchmark(RolloutHalt|RolloutPage)$$' -benchtime=1x -count=1 -timeout 60m ./server

.PHONY: chromium
chromium: ## install Debian's chromium for the fleet view's headless browser test (apt-get)
	hack/chromium.sh install

# ---- Git over SSH -----------------------------------------------------------
# Debian's openssh-server for the SSH git tests: internal/gittest starts sshd
# on loopback with its own configuration, host key and authorized keys.
# Without it those tests skip, unless CI is set, when they fail.
.PHONY: sshd
sshd: ## install openssh-server for the SSH git tests (apt-get)
	hack/sshd.sh install
