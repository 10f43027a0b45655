#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet once, from the Go module
# proxy, in throw-away modules under .cache/ (neither k8s.io/kubernetes nor etcd enters kubefence's
# own go.mod).
# Usage: hack/controlplane.sh [BINDIR]   (default: .cache/controlplane/v1.36.3/bin)
#
# etcd is built rather than taken from Debian: Debian's etcd-server is 3.4.23, too old for
# kube-apiserver 1.36 to serve consistent lists from its watch cache (it needs 3.4.31 or
# 3.5.13 and later), so every consistent LIST would decode the whole resource from etcd —
# not what a production control plane does.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
STAGING_VERSION=${STAGING_VERSION:-v0.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${KUBEFENCE_CACHE:-$root/.cache}
work=$cache/controlplane/$KUBE_VERSION
bin=${1:-$work/bin}
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# Every binary reports its version, as a release does: without it they say
# v0.0.0-master+$Format:%H$, kubelets register as v0.0.0, and helm refuses a chart with a
# kubeVersion constraint.
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
export GOFLAGS=-mod=mod GOWORK=off

if [ ! -x "$bin/etcd" ]; then
  echo "etcd $ETCD_VERSION: building (once; under a minute)"
  mkdir -p "$work/etcd-src" "$bin"
  (
    cd "$work/etcd-src"
    printf 'module kubefence.local/etcd\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >go.mod
    printf '//go:build tools\n\npackage etcd\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
    go mod tidy >/dev/null 2>&1 || true
    go build -trimpath -ldflags='-s -w' -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$bin/etcd.tmp" "$bin/etcd"
  )
fi

missing=()
for c in "${cmds[@]}"; do
  # A binary built before the version stamp is rebuilt (only its link step runs again).
  if [ ! -x "$bin/$c" ] || ! "$bin/$c" --version 2>/dev/null | grep -qx "Kubernetes $KUBE_VERSION"; then missing+=("$c"); fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "control plane $KUBE_VERSION with etcd $("$bin/etcd" --version | head -1 | awk '{print $3}'): cached in $bin"
  exit 0
fi

mkdir -p "$work/src" "$bin"
cd "$work/src"
echo "control plane $KUBE_VERSION: building ${missing[*]} (once; about 5-7 minutes cold)"
go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" >/dev/null
modfile=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBE_VERSION.mod
{
  echo "module kubefence.local/controlplane"
  echo
  echo "go 1.25"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  # Every staging module k8s.io/kubernetes replaces with ./staging is pinned to its published
  # version; sample-cli-plugin is refused by the proxy and unused by the binaries.
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$modfile" |
    awk '{print $1}' | grep -v '^k8s.io/sample-cli-plugin$' |
    while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done
} >go.mod
cat >tools.go <<'GO'
//go:build tools

package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
go mod tidy >/dev/null 2>&1 || true
for c in "${missing[@]}"; do
  # kubelet needs cgo (as in a release); the others are built the same way so they share
  # the build cache.
  CGO_ENABLED=1 go build -trimpath -ldflags="$ldflags" -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$bin/$c.tmp" "$bin/$c"
done
echo "control plane $KUBE_VERSION: built into $bin"
