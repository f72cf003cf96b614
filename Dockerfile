# syntax=docker/dockerfile:1
# rezuscloud Home Assistant add-on image.
#
# Stage 1 builds rezuscloud, the pinned OpenTofu and the pinned OpenStack
# provider from source. Every module is verified against the go.sum files
# committed in this repository (tools/tofu, tools/openstack), so the tofu
# binary is pinned and checksum-verified without downloading a release.
# Stage 2 is the Home Assistant base image (s6-overlay v3, bashio).

ARG BUILD_FROM=ghcr.io/home-assistant/base:3.21

FROM --platform=$BUILDPLATFORM golang:1.26-alpine AS build
ARG BUILD_ARCH=amd64
ARG BUILD_VERSION=dev
ENV CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=local
WORKDIR /src
RUN case "$BUILD_ARCH" in \
      aarch64) echo arm64 > /goarch ;; \
      amd64) echo amd64 > /goarch ;; \
      *) echo "unsupported BUILD_ARCH $BUILD_ARCH" >&2; exit 1 ;; \
    esac

COPY tools/tofu/go.mod tools/tofu/go.sum tools/tofu/
RUN cd tools/tofu && go mod download && \
    GOARCH=$(cat /goarch) go build -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
      -o /out/bin/tofu github.com/opentofu/opentofu/cmd/tofu

COPY tools/openstack/go.mod tools/openstack/go.sum tools/openstack/
RUN cd tools/openstack && go mod download && \
    GOARCH=$(cat /goarch) go build -ldflags "-s -w" \
      -o "/out/mirror/registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/linux_$(cat /goarch)/terraform-provider-openstack_v3.4.0" \
      github.com/terraform-provider-openstack/terraform-provider-openstack/v3

COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY internal/ internal/
RUN GOARCH=$(cat /goarch) go build -ldflags "-s -w -X main.version=${BUILD_VERSION}" -o /out/bin/rezuscloud ./cmd/rezuscloud

FROM ${BUILD_FROM}
ARG BUILD_ARCH=amd64
ARG BUILD_VERSION=dev
# s6 gives a stopping service 3 s by default; a tofu apply needs time to
# save its state and release its lock (config.yaml timeout: 300).
ENV S6_SERVICES_GRACETIME=280000 \
    S6_KILL_GRACETIME=5000 \
    REZUSCLOUD_TOFU_CLI_CONFIG=/usr/share/rezuscloud/tofurc
COPY --from=build /out/bin/rezuscloud /out/bin/tofu /usr/bin/
COPY --from=build /out/mirror /usr/share/rezuscloud/mirror
COPY addon/tofurc /usr/share/rezuscloud/tofurc
COPY addon/rootfs /
COPY addon/icon.png addon/logo.png /usr/share/rezuscloud/
LABEL io.hass.version="${BUILD_VERSION}" \
      io.hass.type="app" \
      io.hass.arch="${BUILD_ARCH}" \
      org.opencontainers.image.title="rezuscloud" \
      org.opencontainers.image.source="https://github.com/rezuscloud/rezuscloud"
