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
