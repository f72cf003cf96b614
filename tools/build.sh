#!/usr/bin/env bash
# Builds the pinned tools from the wrapper modules in tools/ into .tools/
# (git-ignored):
#   .tools/bin/tofu          OpenTofu v1.12.6           (make demo, make test)
#   .tools/mirror/registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/<os>_<arch>/terraform-provider-openstack_v3.4.0
#   .tools/tofurc            a CLI config that installs providers only from that mirror
#   .tools/bin/actionlint    actionlint v1.7.12, which make test runs over .github/workflows
#   .tools/bin/kube-apiserver, kube-scheduler   Kubernetes v1.37.2 (internal/testenv.StartKube)
#   .tools/bin/etcd          etcd v3.7.3, their storage
#
# Usage: tools/build.sh [tofu] [openstack] [actionlint] [kube] (no names: all)
#
# Each build is kept in a cache shared by every clone on this machine,
# keyed by its wrapper module (go.mod and go.sum), the flags and the
# platform: $REZUSCLOUD_TOOLS_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/rezuscloud/tools.
# A second clone, or a clean checkout, copies (hard-links) the binaries
# from there in a second instead of compiling them again. Idempotent:
# nothing is done when .tools/ is current.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/.tools
# GOFLAGS=-json (or any other) must not change what go env prints
os=$(GOFLAGS='' go env GOOS) arch=$(GOFLAGS='' go env GOARCH)
cache=${REZUSCLOUD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rezuscloud/tools}
mkdir -p "$out/bin" "$cache"

# place SRC DST: DST becomes SRC's contents (a hard link when the cache is
# on the same file system, else a copy), replaced atomically.
place() {
  mkdir -p "$(dirname "$2")"
  ln -f "$1" "$2.tmp" 2>/dev/null || cp -f "$1" "$2.tmp"
  mv -f "$2.tmp" "$2"
}

# build NAME DIR PKG OUTFILE LDFLAGS ESTIMATE: OUTFILE is go build PKG in
# the wrapper module DIR, taken from the cache when it holds this version.
build() {
  local name=$1 dir=$2 pkg=$3 file=$4 ldflags=$5 estimate=$6
  local sum key cached start secs
  sum=$( { cat "$dir/go.mod" "$dir/go.sum"; echo "$ldflags $os $arch"; } | sha256sum | cut -c1-16)
  key="$name-$os-$arch-$sum"
  cached="$cache/$key/$(basename "$file")"
  if [ -x "$file" ] && [ "$(cat "$out/stamps/$name" 2>/dev/null)" = "$key" ]; then
    echo "tools: $name is current"
    return
  fi
  # a checkout built before the cache existed: its binary seeds the cache
  if [ ! -x "$cached" ] && [ -x "$file" ] &&
     [ "$(cat "$out/stamps/$name" 2>/dev/null)" = "$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -d' ' -f1)" ]; then
    mkdir -p "$cache/$key"
    cp -f "$file" "$cached.tmp.$$" && mv -f "$cached.tmp.$$" "$cached"
  fi
  if [ ! -x "$cached" ]; then
    echo "tools: building $name from source: $estimate on 2 shared cores, once per machine;"
    echo "tools:   later clones take it from $cache"
    start=$(date +%s)
    mkdir -p "$cache/$key"
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$cached.tmp.$$" "$pkg")
    mv -f "$cached.tmp.$$" "$cached"
    secs=$(( $(date +%s) - start ))
    echo "tools: built $name in $((secs / 60))m$((secs % 60))s"
  else
    echo "tools: $name from the cache ($cache/$key)"
  fi
  place "$cached" "$file"
  mkdir -p "$out/stamps"
  echo "$key" > "$out/stamps/$name"
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(tofu openstack actionlint kube)
kubeflags="-s -w -X k8s.io/component-base/version.gitVersion=v1.37.2"
for name in "${want[@]}"; do
  case $name in
    tofu)
      build tofu "$root/tools/tofu" github.com/opentofu/opentofu/cmd/tofu "$out/bin/tofu" \
        "-s -w -X github.com/opentofu/opentofu/version.dev=no" "10 to 25 minutes (under a minute when Go's build cache has it)"
      TF_CLI_CONFIG_FILE=/dev/null "$out/bin/tofu" version | sed -n 1p ;;
    openstack)
      build openstack "$root/tools/openstack" github.com/terraform-provider-openstack/terraform-provider-openstack/v3 \
        "$out/mirror/registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/${os}_${arch}/terraform-provider-openstack_v3.4.0" \
        "-s -w" "2 to 4 minutes (1 after tofu)"
      # the CLI config exists only with the provider it points at: without
      # it, `rezuscloud demo --provider openstack` says to run make tools
      cat > "$out/tofurc.tmp" <<RC
provider_installation {
  filesystem_mirror {
    path    = "$out/mirror"
    include = ["registry.opentofu.org/*/*"]
  }
}
RC
      mv "$out/tofurc.tmp" "$out/tofurc" ;;
    actionlint)
      build actionlint "$root/tools/actionlint" github.com/rhysd/actionlint/cmd/actionlint "$out/bin/actionlint" \
        "-s -w" "under a minute" ;;
    kube)
      build kube-apiserver "$root/tools/kube" k8s.io/kubernetes/cmd/kube-apiserver "$out/bin/kube-apiserver" \
        "$kubeflags" "10 to 35 minutes (17 CPU-minutes)"
      build kube-scheduler "$root/tools/kube" k8s.io/kubernetes/cmd/kube-scheduler "$out/bin/kube-scheduler" \
        "$kubeflags" "2 to 12 minutes (after kube-apiserver)"
      build etcd "$root/tools/etcd" go.etcd.io/etcd/server/v3 "$out/bin/etcd" "-s -w" "2 to 5 minutes"
      "$out/bin/kube-apiserver" --version ;;
    *)
      echo "tools: unknown tool $name (tofu, openstack, actionlint, kube)" >&2
      exit 2 ;;
  esac
done
