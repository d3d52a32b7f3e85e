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
