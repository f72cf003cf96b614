# rezuscloud: make demo runs the product on embedded defaults, make test
# runs every test against real peers (mosquitto, tofu, simulated Talos nodes,
# a Kubernetes API server, scheduler and etcd).
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/rezuscloud
TOOLS    := .tools
export REZUSCLOUD_TOFU        ?= $(CURDIR)/$(TOOLS)/bin/tofu
export REZUSCLOUD_TOFURC     ?= $(CURDIR)/$(TOOLS)/tofurc
# packages whose tests run under the race detector
RACE_PKGS := ./internal/... ./cmd/...
TEST_TIMEOUT ?= 40m

.PHONY: all build tools test bench lint demo mosquitto fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/rezuscloud

# tofu v1.12.6 and terraform-provider-openstack v3.4.0 (a filesystem mirror),
# and the Kubernetes test peers kube-apiserver and kube-scheduler v1.37.2 and
# etcd v3.7.3, built from the pinned wrapper modules under tools/ into
# .tools/; a no-op when they are current.
tools:
	./tools/build.sh

# mosquitto (the tests' own brokers) and mosquitto-clients (the end-to-end
# tests record every message with mosquitto_sub), from Debian's packages.
mosquitto:
	@{ command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; } && command -v mosquitto_sub >/dev/null 2>&1 || \
	  { echo "installing mosquitto and mosquitto-clients"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto mosquitto-clients; }

test: mosquitto tools
	$(GO) vet ./...
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

bench: mosquitto tools
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzTenantFile -fuzztime 60s ./internal/tenant

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

demo: build tools
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" ./$(BIN) demo

clean:
	rm -rf bin
