# rezuscloud: make demo runs the product on embedded defaults, make test
# runs every test against real peers (mosquitto, tofu, simulated Talos nodes).
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/rezuscloud
TOOLS    := .tools
export REZUSCLOUD_TOFU        ?= $(CURDIR)/$(TOOLS)/bin/tofu
export REZUSCLOUD_TOFURC      ?= $(CURDIR)/$(TOOLS)/tofurc
export REZUSCLOUD_ACTIONLINT  ?= $(CURDIR)/$(TOOLS)/bin/actionlint
# packages whose tests run under the race detector
RACE_PKGS := ./internal/... ./cmd/...
TEST_TIMEOUT ?= 40m
# tests marked t.Parallel() in one package that run at once: most of their
# time is waiting for tofu, brokers and simulated boots, not CPU
TEST_PARALLEL ?= 4
# Debian packages the tests use: the tests' own brokers, mosquitto_sub to
# record what they publish, shellcheck for the workflows' run: scripts, gcc
# for the race detector (cgo)

.PHONY: all build tools test bench lint demo packages mosquitto fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/rezuscloud

# tofu v1.12.6, terraform-provider-openstack v3.4.0 and actionlint v1.7.12,
# built from the pinned wrapper modules under tools/ into .tools/ (tofu's
# from a filesystem mirror), through a build cache that every clone on this
# machine shares; a no-op when they are current.
tools:
	./tools/build.sh

# The Debian packages make test needs that are missing (installing them
# needs root).
packages:
	@missing=""; \
	{ command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; } || missing="$$missing mosquitto"; \
	command -v mosquitto_sub >/dev/null 2>&1 || missing="$$missing mosquitto-clients"; \
	command -v shellcheck >/dev/null 2>&1 || missing="$$missing shellcheck"; \
	command -v "$$($(GO) env CC)" >/dev/null 2>&1 || missing="$$missing gcc"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make test needs$$missing: run as root, or: sudo apt-get install$$missing"; exit 1; fi; \
	  echo "installing$$missing (Debian packages)"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

mosquitto: packages

test: packages tools
	$(GO) vet ./...
	$(GO) test -race -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) $(RACE_PKGS)

bench: packages tools
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzTenantFile -fuzztime 60s ./internal/tenant

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The demo needs rezuscloud and tofu only (the OpenStack demo, started by
# hand with --provider openstack, also needs make tools).
demo: build
	./tools/build.sh tofu
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" ./$(BIN) demo

clean:
	rm -rf bin
