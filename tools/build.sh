#!/usr/bin/env bash
# Builds the pinned tofu and OpenStack provider from the wrapper modules in
# tools/ into .tools/ (git-ignored), laid out as a tofu filesystem mirror:
#   .tools/bin/tofu
#   .tools/mirror/registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/<os>_<arch>/terraform-provider-openstack_v3.4.0
#   .tools/tofurc   (a CLI config that installs providers only from that mirror)
# Idempotent: a binary is rebuilt only when its wrapper module changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/.tools
os=$(go env GOOS) arch=$(go env GOARCH)
mkdir -p "$out/bin" "$out/stamps"

# build NAME DIR PKG OUTFILE [ldflags]: go build PKG in the wrapper DIR unless
# OUTFILE is newer than DIR's go.mod and go.sum.
build() {
  local name=$1 dir=$2 pkg=$3 file=$4 ldflags=${5:-"-s -w"}
  local stamp="$out/stamps/$name" sum
  sum=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -d' ' -f1)
  if [ -x "$file" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
    echo "tools: $name is current"
    return
  fi
  echo "tools: building $name (a cold build takes minutes)"
  mkdir -p "$(dirname "$file")"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$file.tmp" "$pkg")
  mv "$file.tmp" "$file"
  echo "$sum" > "$stamp"
}

build tofu "$root/tools/tofu" github.com/opentofu/opentofu/cmd/tofu "$out/bin/tofu" \
  "-s -w -X github.com/opentofu/opentofu/version.dev=no"
build openstack "$root/tools/openstack" github.com/terraform-provider-openstack/terraform-provider-openstack/v3 \
  "$out/mirror/registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/${os}_${arch}/terraform-provider-openstack_v3.4.0"

cat > "$out/tofurc.tmp" <<RC
provider_installation {
  filesystem_mirror {
    path    = "$out/mirror"
    include = ["registry.opentofu.org/*/*"]
  }
}
RC
mv "$out/tofurc.tmp" "$out/tofurc"
TF_CLI_CONFIG_FILE="$out/tofurc" "$out/bin/tofu" version | sed -n 1p

# Kubernetes test peers (internal/testenv.StartKube): kube-apiserver and
# kube-scheduler v1.37.2 from tools/kube, etcd v3.7.3 from tools/etcd, into
# .tools/bin. A cold kube-apiserver build takes about 6.5 minutes on 2 cores.
kubeflags="-s -w -X k8s.io/component-base/version.gitVersion=v1.37.2"
build kube-apiserver "$root/tools/kube" k8s.io/kubernetes/cmd/kube-apiserver "$out/bin/kube-apiserver" "$kubeflags"
build kube-scheduler "$root/tools/kube" k8s.io/kubernetes/cmd/kube-scheduler "$out/bin/kube-scheduler" "$kubeflags"
build etcd "$root/tools/etcd" go.etcd.io/etcd/server/v3 "$out/bin/etcd"
"$out/bin/kube-apiserver" --version
