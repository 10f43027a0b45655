#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler once, from the Go module proxy, in a
# throw-away module under .cache/ (k8s.io/kubernetes never enters kubefence's own go.mod).
# Usage: hack/controlplane.sh [BINDIR]   (default: .cache/controlplane/v1.36.3/bin)
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
STAGING_VERSION=${STAGING_VERSION:-v0.36.3}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${KUBEFENCE_CACHE:-$root/.cache}
work=$cache/controlplane/$KUBE_VERSION
bin=${1:-$work/bin}
cmds=(kube-apiserver kube-controller-manager kube-scheduler)

missing=()
for c in "${cmds[@]}"; do [ -x "$bin/$c" ] || missing+=("$c"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "control plane $KUBE_VERSION: cached in $bin"
  exit 0
fi

mkdir -p "$work/src" "$bin"
cd "$work/src"
export GOFLAGS=-mod=mod GOWORK=off
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
)
GO
go mod tidy >/dev/null 2>&1 || true
for c in "${missing[@]}"; do
  go build -trimpath -ldflags='-s -w' -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$bin/$c.tmp" "$bin/$c"
done
echo "control plane $KUBE_VERSION: built into $bin"
