#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet once, from
# the Go module proxy, in throw-away modules under .cache/ (neither k8s.io/kubernetes nor etcd
# enters kubefence's own go.mod), into .cache/controlplane/$KUBE_VERSION/bin.
# Usage: hack/controlplane.sh [COMPONENT...]   (default: all six, with kubectl for the
# runbooks' commands; make demo needs etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler)
#
# etcd is built rather than taken from Debian: Debian's etcd-server is 3.4.23, too old for
# kube-apiserver 1.36 to serve consistent lists from its watch cache (it needs 3.4.31 or
# 3.5.13 and later), so every consistent LIST would decode the whole resource from etcd —
# not what a production control plane does.
#
# etcd and the Kubernetes binaries build side by side (KF_JOBS=1: one after the other). All
# are static (CGO_ENABLED=0, as Kubernetes releases build the control plane) and without
# -trimpath, as make build builds kubefence, so that every build of make demo shares one
# compile of the standard library; the kubelet too, so that it shares the control plane's
# compiled packages (nothing of it needs cgo here: no NSS, no libpfm).
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
STAGING_VERSION=${STAGING_VERSION:-v0.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${KUBEFENCE_CACHE:-$root/.cache}
work=$cache/controlplane/$KUBE_VERSION
bin=$work/bin
# shellcheck source=hack/progress.sh
source "$root/hack/progress.sh"
# Every binary reports its version, as a release does: without it they say
# v0.0.0-master+$Format:%H$, kubelets register as v0.0.0, and helm refuses a chart with a
# kubeVersion constraint.
minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
# No VCS stamp: these are third-party tools built inside kubefence's tree, not kubefence.
export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off

build_etcd() {
  say "etcd $ETCD_VERSION: building (once)"
  local began
  began=$(kf_now)
  mkdir -p "$work/etcd-src" "$bin"
  cd "$work/etcd-src"
  printf 'module kubefence.local/etcd\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >go.mod
  local gobuild_flags=(-ldflags=-s\ -w)
  CGO_ENABLED=0 gobuild etcd "etcd" "$bin/etcd.tmp" go.etcd.io/etcd/server/v3 || return
  mv "$bin/etcd.tmp" "$bin/etcd"
  say "etcd $ETCD_VERSION: built in $(kf_dur $(($(kf_now) - began)))"
}

# build_kube builds the named commands of k8s.io/kubernetes in one go build, so that they
# share one compile of their common packages and link side by side.
build_kube() {
  say "Kubernetes $KUBE_VERSION: building $* (once)"
  local began
  began=$(kf_now)
  mkdir -p "$work/src" "$bin"
  cd "$work/src"
  # k8s.io/kubernetes' own go.mod, for the list of its staging modules.
  local modfile
  modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" 2>/dev/null | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "module kubefence.local/controlplane"
    echo
    echo "go 1.25"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # Every staging module k8s.io/kubernetes replaces with ./staging is pinned to its
    # published version; sample-cli-plugin is refused by the proxy and unused by the binaries.
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$modfile" |
      awk '{print $1}' | grep -v '^k8s.io/sample-cli-plugin$' |
      while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done
  } >go.mod
  local pkgs=() c
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  local gobuild_flags=("-ldflags=$ldflags")
  CGO_ENABLED=0 gobuild kube "Kubernetes" "$bin/new/" "${pkgs[@]}" || return
  for c in "$@"; do mv "$bin/new/$c" "$bin/$c"; done
  rmdir "$bin/new"
  say "Kubernetes $KUBE_VERSION: built $* in $(kf_dur $(($(kf_now) - began)))"
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
etcd=0
kube=()
for c in "${want[@]}"; do
  case $c in
  etcd) [ -x "$bin/etcd" ] || etcd=1 ;;
  kube-apiserver | kube-controller-manager | kube-scheduler | kubelet)
    # A binary built before the version stamp is rebuilt (only its link step runs again).
    if [ ! -x "$bin/$c" ] || ! "$bin/$c" --version 2>/dev/null | grep -qx "Kubernetes $KUBE_VERSION"; then kube+=("$c"); fi
    ;;
  kubectl)
    if [ ! -x "$bin/$c" ] || ! "$bin/$c" version --client 2>/dev/null | grep -qx "Client Version: $KUBE_VERSION"; then kube+=("$c"); fi
    ;;
  *)
    echo "hack/controlplane.sh: unknown component $c" >&2
    exit 2
    ;;
  esac
done
progress_begin
if [ $etcd = 0 ] && [ ${#kube[@]} = 0 ]; then
  say "etcd and Kubernetes $KUBE_VERSION (${want[*]}): cached in $bin"
  exit 0
fi
# Each build runs in a subshell of its own (it changes directory), in the background when
# both are needed; wait returns its status.
if [ $etcd = 1 ] && [ ${#kube[@]} -gt 0 ] && [ "${KF_JOBS:-2}" -gt 1 ]; then
  (build_etcd) &
  etcd_pid=$!
  (build_kube "${kube[@]}") &
  kube_pid=$!
  rc=0
  wait "$kube_pid" || rc=$?
  wait "$etcd_pid" || rc=$?
  exit $rc
fi
if [ $etcd = 1 ]; then (build_etcd); fi
if [ ${#kube[@]} -gt 0 ]; then (build_kube "${kube[@]}"); fi
