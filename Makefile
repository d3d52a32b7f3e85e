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

.PHONY: build
build: ## build bin/nuon and bin/nuon-agent
	$(GO) build -o $(BIN)/ ./cmd/nuon ./cmd/nuon-agent

.PHONY: demo
demo: build tf-providers kube-binaries registry ## render the sample tenant and converge its installs on local defaults (DEMO_DIR=.demo)
	hack/demo.sh $(BIN)/nuon $(DEMO_DIR)

.PHONY: test
test: tf-providers kube-binaries registry ## run every test (real git servers, terraform, OCI registries and a kube-apiserver on loopback)
	$(GO) test -race -count=1 -timeout 30m ./...

.PHONY: vet
vet: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; done

.PHONY: bench
bench: tf-providers kube-binaries registry ## run the benchmarks (figures in BENCHMARKS.md)
	$(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 -timeout 60m ./...

# ---- Kubernetes -------------------------------------------------------------
# A real kube-apiserver and etcd, built from the Go module proxy in their own
# module (tools/kube) and cached outside the clone by version. Tests find them
# through NUON_KUBE_ASSETS (internal/kubetest); the demo starts one with
# kube-up.
KUBE_VERSION := v1.37.1
KUBE_ASSETS  := $(CACHE)/kube/$(KUBE_VERSION)
KUBE_DIR     ?= $(DEMO_DIR)/kube
export NUON_KUBE_ASSETS := $(KUBE_ASSETS)

.PHONY: kube-binaries
kube-binaries: ## build kube-apiserver and etcd for tests (cached in $(CACHE); ~11 min cold)
	hack/kube-binaries.sh $(KUBE_ASSETS)

.PHONY: kube-up
kube-up: kube-binaries ## start a local kube-apiserver in KUBE_DIR; prints its kubeconfig
	@hack/kube-up.sh $(KUBE_ASSETS) $(KUBE_DIR)

.PHONY: kube-down
kube-down: ## stop the kube-apiserver kube-up started
	hack/kube-down.sh $(KUBE_DIR)


# ---- Artifacts: OCI registries ----------------------------------------------
# Debian's docker-registry (Distribution 2.8) for the builder, sync and demo
# tests: internal/oci/ocitest starts it on loopback, with TLS and basic auth as
# ECR has them (openssl, htpasswd). Without it those tests skip, unless CI is
# set, when they fail.
.PHONY: registry
registry: ## install docker-registry, htpasswd and openssl for the registry tests (apt-get)
	hack/registry.sh install

.PHONY: bench-fleet
bench-fleet: ## render 1,000, 10,000 and 100,000 installs cold and re-render one (NUON_BENCH_FLEET lists the sizes; make bench runs 1,000 and 10,000)
	NUON_BENCH_FLEET=$${NUON_BENCH_FLEET:-1000,10000,100000} $(GO) test -run='^$$' -bench='^BenchmarkRenderFleet$$' -benchtime=1x -count=1 -timeout 60m ./renderer

.PHONY: bench-sync
bench-sync: registry ## artifact sync vs crane copy at 1 GB (NUON_BENCH_SYNC_MB) and a no-op sync of 50 artifacts
	NUON_BENCH_SYNC_MB=$${NUON_BENCH_SYNC_MB:-1024} $(GO) test -run='^$$' -bench='SyncVsCrane|NoopSync' -benchtime=1x -count=1 -timeout 60m ./agent/sync


.PHONY: bench-server
bench-server: ## the tenant server's benchmarks: polls, fetches, status write-back for 60 s (NUON_BENCH_PUSH_SECONDS), render on change
	NUON_BENCH_PUSH_SECONDS=$${NUON_BENCH_PUSH_SECONDS:-60} $(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 -timeout 30m ./server
