# rezuscloud: make demo runs the product on embedded defaults, make test
# runs every test against real peers (mosquitto, tofu, simulated Talos nodes,
# a Kubernetes API server, scheduler and etcd).
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
# for the race detector (cgo), postgresql for the state store's tests (they
# start their own server with initdb in a temporary folder)

.PHONY: all build build-demo tools test bench lint demo packages mosquitto pxe-deps chromium fuzz clean

all: build

# the add-on's binary: no simulators (the demo's are behind -tags demo)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/rezuscloud

# the demo's binary: the same program with the simulated nodes, the
# stand-in cloud and the embedded broker linked in
build-demo:
	$(GO) build -tags demo -ldflags "$(LDFLAGS)" -o $(BIN)-demo ./cmd/rezuscloud

# tofu v1.12.6, terraform-provider-openstack v3.4.0, actionlint v1.7.12 and
# the Kubernetes test peers (kube-apiserver, kube-scheduler v1.37.2, etcd
# v3.7.3), built from the pinned wrapper modules under tools/ into .tools/
# (tofu's providers as a filesystem mirror), through a build cache that every
# clone on this machine shares; a no-op when they are current.
tools:
	./tools/build.sh

# The Debian packages make test needs that are missing (installing them
# needs root).
packages:
	@missing=""; \
	{ command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; } || missing="$$missing mosquitto"; \
	command -v mosquitto_sub >/dev/null 2>&1 || missing="$$missing mosquitto-clients"; \
	command -v shellcheck >/dev/null 2>&1 || missing="$$missing shellcheck"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v "$$($(GO) env CC)" >/dev/null 2>&1 || missing="$$missing gcc"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make test needs$$missing: run as root, or: sudo apt-get install$$missing"; exit 1; fi; \
	  echo "installing$$missing (Debian packages)"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

mosquitto: packages

# The network-boot and IPMI tests' real peers, from Debian's packages:
# dnsmasq (the LAN's DHCP server), QEMU with its iPXE ROMs and OVMF (the
# machines), the iPXE binaries the responder serves, a kernel for the VMs
# to boot, and OpenIPMI's ipmi_sim (the BMC).
PXE_DEBS := dnsmasq-base qemu-system-x86 seabios ipxe-qemu ipxe ovmf openipmi linux-image-cloud-amd64
pxe-deps:
	@command -v dnsmasq >/dev/null 2>&1 && command -v qemu-system-x86_64 >/dev/null 2>&1 && command -v ipmi_sim >/dev/null 2>&1 && \
	  test -e /usr/lib/ipxe/ipxe.efi && test -e /usr/lib/ipxe/qemu/pxe-virtio.rom && test -e /usr/share/OVMF/OVMF_CODE_4M.fd && \
	  ls /boot/vmlinuz-* >/dev/null 2>&1 || \
	  { echo "installing $(PXE_DEBS)"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PXE_DEBS); }


# chromium (the panel's browser tests drive it headless with chromedp), from
# Debian's packages.
chromium:
	@command -v chromium >/dev/null 2>&1 || \
	  { echo "installing chromium"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test: packages pxe-deps chromium tools
	$(GO) vet ./...
	$(GO) vet -tags demo ./cmd/...
	$(GO) test -race -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) $(RACE_PKGS)

bench: packages pxe-deps chromium tools
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzTenantFile -fuzztime 60s ./internal/tenant
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/pxe/dhcp

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The demo needs the demo's binary and tofu only (the OpenStack demo, started
# by hand with --provider openstack, also needs make tools).
demo: build-demo
	./tools/build.sh tofu
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" ./$(BIN)-demo demo

clean:
	rm -rf bin
