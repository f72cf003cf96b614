# syntax=docker/dockerfile:1
# rezuscloud Home Assistant add-on image.
#
# Built for linux/amd64 and linux/arm64 by .github/workflows/image.yaml (the
# Home Assistant builder actions) and published as ghcr.io/rezuscloud/rezuscloud,
# the image config.yaml names. A local `docker buildx build .` gives the same
# image.
#
# Stage 1 builds rezuscloud, the pinned OpenTofu and the pinned OpenStack
# provider from source, cross-compiled on the build machine's platform.
# Every module is verified against the go.sum files committed in this
# repository (tools/tofu, tools/openstack), so the tofu binary is pinned and
# checksum-verified without downloading a release.
# Stage 2 is the Home Assistant base image (Alpine 3.24, s6-overlay v3,
# bashio), pinned to its 3.24 tag. Since Supervisor 2026.04 the base is named
# here directly; BUILD_FROM and build.yaml are no longer used.

FROM --platform=$BUILDPLATFORM golang:1.26-alpine AS build
# TARGETARCH (amd64, arm64) is set by BuildKit from --platform.
ARG TARGETARCH
ARG BUILD_VERSION=dev
ENV CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=local GOARCH=${TARGETARCH}
WORKDIR /src

COPY tools/tofu/go.mod tools/tofu/go.sum tools/tofu/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd tools/tofu && go mod download && \
    go build -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
      -o /out/bin/tofu github.com/opentofu/opentofu/cmd/tofu

COPY tools/openstack/go.mod tools/openstack/go.sum tools/openstack/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd tools/openstack && go mod download && \
    go build -ldflags "-s -w" \
      -o "/out/mirror/registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/linux_${TARGETARCH}/terraform-provider-openstack_v3.4.0" \
      github.com/terraform-provider-openstack/terraform-provider-openstack/v3

COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags "-s -w -X main.version=${BUILD_VERSION}" -o /out/bin/rezuscloud ./cmd/rezuscloud

FROM ghcr.io/home-assistant/base:3.24
ARG BUILD_ARCH
ARG BUILD_VERSION=dev
ARG TARGETARCH
# Network boot (docs/design.md §11.4) serves iPXE to the machines; the
# responder finds Alpine's build in /usr/share/ipxe (undionly.kpxe for BIOS,
# ipxe.efi for UEFI). Alpine packages it for x86 only; on arm64 the
# responder says the binaries are missing and network boot stays off.
RUN if [ "${TARGETARCH}" = "amd64" ]; then apk add --no-cache ipxe; fi
# s6 gives a stopping service 3 s by default; a tofu apply needs time to
# save its state and release its lock (config.yaml timeout: 300).
ENV S6_SERVICES_GRACETIME=280000 \
    S6_KILL_GRACETIME=5000 \
    REZUSCLOUD_TOFU_CLI_CONFIG=/usr/share/rezuscloud/tofurc
COPY --from=build /out/bin/rezuscloud /out/bin/tofu /usr/bin/
COPY --from=build /out/mirror /usr/share/rezuscloud/mirror
COPY addon/tofurc /usr/share/rezuscloud/tofurc
COPY addon/rootfs /
# Healthy while rezuscloud is connected to the MQTT broker (internal/health,
# loopback only, never published). The Supervisor restarts an unhealthy
# add-on when the user has turned its Watchdog on.
HEALTHCHECK --interval=60s --timeout=10s --start-period=120s --retries=3 \
    CMD curl -fsS --max-time 5 http://127.0.0.1:8096/healthz || exit 1
LABEL io.hass.name="rezuscloud" \
      io.hass.description="Talos Kubernetes clusters at home, on Oracle Cloud, OpenStack and bare metal, run from Home Assistant" \
      io.hass.url="https://github.com/rezuscloud/rezuscloud" \
      io.hass.version="${BUILD_VERSION}" \
      io.hass.type="app" \
      io.hass.arch="${BUILD_ARCH}" \
      org.opencontainers.image.title="rezuscloud" \
      org.opencontainers.image.description="Talos Kubernetes clusters run from Home Assistant" \
      org.opencontainers.image.version="${BUILD_VERSION}" \
      org.opencontainers.image.source="https://github.com/rezuscloud/rezuscloud"
