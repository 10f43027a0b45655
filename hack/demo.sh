#!/usr/bin/env bash
# make demo: builds only what the demo needs and runs it (test/sim/cmd/demo). The demo
# needs ipmi_sim and ipmitool (Debian), etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler (hack/controlplane.sh, once, into .cache/) and kubefence's
# fence-controller and fence-agent-ipmi. The builds run side by side (KF_JOBS=1: one
# after the other): the standard library while the modules download, then Kubernetes'
# beside etcd's and kubefence's.
# Usage: hack/demo.sh BINDIR [demo flags]   (LDFLAGS: kubefence's -ldflags, as make build's)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mkdir -p "$1" && cd "$1" && pwd)
shift
# shellcheck source=hack/progress.sh
source "$root/hack/progress.sh"
progress_begin
say "make demo: a first run builds the control plane from source (about 10 minutes on 2 cores); later runs start in seconds"

kubefence() {
  local began
  began=$(kf_now)
  cd "$root"
  local gobuild_flags=("-ldflags=${LDFLAGS:-}")
  CGO_ENABLED=0 gobuild kubefence "kubefence" "$bin/" ./cmd/fence-controller ./cmd/fence-agent-ipmi ./test/sim/cmd/demo || return
  say "kubefence: built fence-controller, fence-agent-ipmi and the demo in $(kf_dur $(($(kf_now) - began)))"
}

# In the foreground: apt-get may ask for sudo's password.
"$root/hack/deps.sh" demo-packages
if [ "${KF_JOBS:-2}" -gt 1 ]; then
  # Each in a subshell of its own, in the background; wait returns its status. The
  # standard library compiles while the builds fetch their modules; they wait for it.
  (gostd) &
  std=$!
  ("$root/hack/controlplane.sh" kube-apiserver kube-controller-manager kube-scheduler) &
  kube=$!
  ("$root/hack/controlplane.sh" etcd && kubefence) &
  rest=$!
  rc=0
  wait "$std" || true
  wait "$kube" || rc=$?
  wait "$rest" || rc=$?
  [ $rc = 0 ] || exit $rc
else
  "$root/hack/deps.sh" demo
  (kubefence)
fi
say "ready: running the demo"
progress_end
exec "$bin/demo" -bin "$bin" "$@"
