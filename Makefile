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
build: ## build bin/nuon
	$(GO) build -o $(BIN)/nuon ./cmd/nuon

.PHONY: demo
demo: build tf-providers ## render the sample tenant and converge its installs on local defaults (DEMO_DIR=.demo)
	hack/demo.sh $(BIN)/nuon $(DEMO_DIR)

.PHONY: test
test: tf-providers ## run every test (real git, terraform and registries on loopback)
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
bench: tf-providers ## run the benchmarks (figures in BENCHMARKS.md)
	$(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 -timeout 60m ./...
