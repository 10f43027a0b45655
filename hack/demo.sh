#!/usr/bin/env bash
# make demo: builds only what the demo needs and runs it (test/sim/cmd/demo). The demo
# needs ipmi_sim and ipmitool (Debian), etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler (hack/controlplane.sh, once, into .cache/) and kubefence's
# fence-controller and fence-agent-ipmi. The builds run side by side (KF_JOBS=1: one
# after the other): the standard library while the modules download, then Kubernetes'
# beside kubefence's.
#
# etcd is the one hack/controlplane.sh builds when .cache has it (make test builds it);
# otherwise Debian's etcd-server, unpacked into .cache (not installed: no service starts).
# Debian's 3.4 serves the demo's three nodes as well; make test builds etcd 3.6 because
# kube-apiserver serves consistent lists from its watch cache only with etcd 3.4.31 or
# 3.5.13 and later (hack/controlplane.sh). Not building it leaves both cores to
# Kubernetes' and kubefence's builds on a first run.
# Usage: hack/demo.sh BINDIR [demo flags]   (LDFLAGS: kubefence's -ldflags, as make build's)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mkdir -p "$1" && cd "$1" && pwd)
shift
# shellcheck source=hack/progress.sh
source "$root/hack/progress.sh"
progress_begin
say "make demo: a first run builds the control plane from source (about 11 minutes on 2 cores); later runs start in seconds"

kubefence() {
  local began
  began=$(kf_now)
  cd "$root"
  local gobuild_flags=("-ldflags=${LDFLAGS:-}")
  CGO_ENABLED=0 gobuild kubefence "kubefence" "$bin/" ./cmd/fence-controller ./cmd/fence-agent-ipmi ./test/sim/cmd/demo || return
  say "kubefence: built fence-controller, fence-agent-ipmi and the demo in $(kf_dur $(($(kf_now) - began)))"
}

# debian_etcd unpacks the etcd of Debian's etcd-server package into .cache/debian-etcd,
# once; apt checks the package against its signed lists.
debian_etcd() {
  local dir=$root/.cache/debian-etcd tmp began sudo
  [ -x "$dir/etcd" ] && return
  began=$(kf_now)
  say "etcd: unpacking Debian's etcd-server"
  tmp=$(mktemp -d)
  [ "$(id -u)" = 0 ] && sudo= || sudo=sudo
  # A machine whose package lists were never fetched has none to download from.
  if ! (cd "$tmp" && { apt-get download etcd-server || { $sudo apt-get update -qq && apt-get download etcd-server; }; } &&
    dpkg-deb -x etcd-server_*.deb x) >"$tmp/log" 2>&1; then
    say "etcd: apt-get download etcd-server failed:"
    tail -n 20 "$tmp/log" >>"$KF_PROGRESS/events"
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p "$dir"
  mv "$tmp/x/usr/bin/etcd" "$dir/etcd"
  rm -rf "$tmp"
  say "etcd: $("$dir/etcd" --version | head -n 1) from Debian's etcd-server in $(kf_dur $(($(kf_now) - began)))"
}

# In the foreground: apt-get may ask for sudo's password.
"$root/hack/deps.sh" demo-packages
etcd=${KUBEFENCE_CACHE:-$root/.cache}/controlplane/${KUBE_VERSION:-v1.36.3}/bin/etcd
if [ ! -x "$etcd" ]; then
  debian_etcd
  etcd=$root/.cache/debian-etcd/etcd
fi
if [ "${KF_JOBS:-2}" -gt 1 ]; then
  # Each in a subshell of its own, in the background; wait returns its status. The
  # standard library compiles while the builds fetch their modules; they wait for it.
  (gostd) &
  std=$!
  ("$root/hack/controlplane.sh" kube-apiserver kube-controller-manager kube-scheduler) &
  kube=$!
  (kubefence) &
  rest=$!
  rc=0
  wait "$std" || true
  wait "$kube" || rc=$?
  wait "$rest" || rc=$?
  [ $rc = 0 ] || exit $rc
else
  "$root/hack/controlplane.sh" kube-apiserver kube-controller-manager kube-scheduler
  (kubefence)
fi
say "ready: running the demo"
progress_end
exec "$bin/demo" -bin "$bin" -etcd "$etcd" "$@"
