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

.PHONY: all build build-demo tools test bench lint demo mosquitto pxe-deps chromium fuzz clean

all: build

# the add-on's binary: no simulators (the demo's are behind -tags demo)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/rezuscloud

# the demo's binary: the same program with the simulated nodes, the
# stand-in cloud and the embedded broker linked in
build-demo:
	$(GO) build -tags demo -ldflags "$(LDFLAGS)" -o $(BIN)-demo ./cmd/rezuscloud

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

test: mosquitto pxe-deps chromium tools
	$(GO) vet ./...
	$(GO) vet -tags demo ./cmd/...
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

bench: mosquitto pxe-deps chromium tools
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzTenantFile -fuzztime 60s ./internal/tenant
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/pxe/dhcp

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

demo: build-demo tools
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" ./$(BIN)-demo demo

clean:
	rm -rf bin
