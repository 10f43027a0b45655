#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian machine, once: Debian packages
# for the real peers, and tools built from the Go module proxy into .cache/.
#
#   hack/deps.sh demo   what make demo needs: ipmi_sim and ipmitool, etcd, kube-apiserver,
#                       kube-controller-manager and kube-scheduler (demo-packages: only the
#                       Debian packages)
#   hack/deps.sh        what make test needs: that, the Debian packages of the other real
#                       peers, kubelet, helm, the kubernetes-csi external-attacher, the
#                       csi-addons controller and Cluster API's MachineHealthCheck controller,
#                       and the cosign CLI
#   hack/deps.sh cosign only the cosign CLI (make release with COSIGN_KEY)
#
# Each step says when it starts and ends; Go builds show packages compiled and time left.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/progress.sh
source "$root/hack/progress.sh"
mode=${1:-test}
case $mode in
demo | demo-packages | test | cosign) ;;
*)
  echo "usage: hack/deps.sh [demo|demo-packages|test|cosign]" >&2
  exit 2
  ;;
esac
progress_begin

# debs installs the Debian packages that provide what is missing.
debs() {
  need=()
  command -v ipmi_sim >/dev/null || need+=(openipmi)
  command -v ipmitool >/dev/null || need+=(ipmitool)
  if [ "$mode" = test ]; then
    command -v tgtd >/dev/null && command -v iscsi-readcapacity16 >/dev/null || need+=(tgt libiscsi-bin)
    # The real ClusterLabs agents (fence_ipmilan, fence_redfish) behind the exec agent.
    command -v fence_ipmilan >/dev/null || need+=(fence-agents)
    # promtool, for the unit tests of the chart's alerts (deploy/render/alerts_test.go).
    command -v promtool >/dev/null || need+=(prometheus)
    # The real-node cluster (test/realnode): each node's container runtime, CNI bridge, the
    # kube-proxy stand-in's DNAT rule, and a busybox for its workloads.
    command -v containerd >/dev/null || need+=(containerd)
    command -v runc >/dev/null || need+=(runc)
    [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
    command -v iptables >/dev/null || need+=(iptables)
    [ -x /bin/busybox ] || need+=(busybox-static)
    # The release's arm64 image: its binaries and ipmitool run under qemu-aarch64-static in
    # the tests (hack/images, test/realnode).
    command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
  fi
  if [ ${#need[@]} = 0 ]; then
    [ "$mode" = demo ] || say "Debian packages: installed" # demo-packages said so
    return
  fi
  local began sudo=
  began=$(kf_now)
  say "Debian packages: installing ${need[*]}"
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >"$KF_PROGRESS/apt.log" 2>&1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$KF_PROGRESS/apt.log" 2>&1 ||
    { tail -n 20 "$KF_PROGRESS/apt.log" >&2; return 1; }
  say "Debian packages: installed in $(kf_dur $(($(kf_now) - began)))"
}

# throwaway writes a module of its own in dir that requires module@version, so that a tool
# builds at its own pinned versions and stays out of kubefence's go.mod.
throwaway() {
  mkdir -p "$1"
  printf 'module kubefence.local/%s\n\ngo 1.25\n\nrequire %s %s\n' "$(basename "$1")" "$2" "$3" >"$1/go.mod"
}

# tool NAME LABEL DIR OUT PKG: go build PKG in DIR into OUT (once), GOFLAGS as set.
tool() {
  local name=$1 label=$2 dir=$3 out=$4 pkg=$5 began
  began=$(kf_now)
  say "$label: building (once)"
  mkdir -p "$(dirname "$out")"
  local gobuild_flags=(-ldflags=-s\ -w)
  (cd "$dir" && CGO_ENABLED=0 gobuild "$name" "$label" "$out.tmp" "$pkg") || return
  mv "$out.tmp" "$out"
  say "$label: built in $(kf_dur $(($(kf_now) - began)))"
}

# build_cosign builds the cosign CLI from its pinned module (hack/tools/cosign, a module
# of its own so that cosign's dependencies stay out of go.mod) into .cache/bin: make
# release signs with it, and the tests run docs/getting-started.md's verify commands with
# it. Rebuilt when the pinned module changes.
build_cosign() {
  local out=$root/.cache/bin/cosign stamp version began
  stamp=$(cat "$root"/hack/tools/cosign/{go.mod,go.sum} | sha256sum | cut -c1-16)
  [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ] && return
  version=$(cd "$root/hack/tools/cosign" && GOWORK=off go list -m -f '{{.Version}}' github.com/sigstore/cosign/v2)
  say "cosign $version: building (once)"
  began=$(kf_now)
  mkdir -p "$(dirname "$out")"
  (
    cd "$root/hack/tools/cosign"
    gobuild_flags=(-mod=readonly -buildvcs=false -trimpath "-ldflags=-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$version")
    GOWORK=off CGO_ENABLED=0 gobuild cosign "cosign $version" "$out.tmp" github.com/sigstore/cosign/v2/cmd/cosign
  ) || return
  mv "$out.tmp" "$out"
  echo "$stamp" >"$out.stamp"
  say "cosign $version: built in $(kf_dur $(($(kf_now) - began)))"
}

if [ "$mode" = cosign ]; then
  build_cosign
  exit 0
fi
debs
[ "$mode" != demo-packages ] || exit 0
if [ "$mode" = demo ]; then
  "$root/hack/controlplane.sh" etcd kube-apiserver kube-controller-manager kube-scheduler
  exit 0
fi
# make debian-lock and its test read the arm64 packages' records from apt (nothing arm64
# is installed).
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  say "apt: adding the arm64 architecture's package lists"
  [ "$(id -u)" = 0 ] && sudo= || sudo=sudo
  $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq >"$KF_PROGRESS/apt.log" 2>&1
fi
"$root/hack/controlplane.sh"
# The oldest Kubernetes the chart admits (its kubeVersion), for the real-node test that
# runs on it (test/realnode: OldestKubeVersion); etcd is the one above.
KUBE_VERSION=v1.31.13 STAGING_VERSION=v0.31.13 "$root/hack/controlplane.sh" kube-apiserver kube-controller-manager kube-scheduler kubelet
export GOWORK=off
cache=$root/.cache
# helm, as a user installs the chart (test/realnode); built from the Helm version that
# deploy/render pins, so chart rendering and installs agree.
helm=$cache/bin/helm
if [ ! -x "$helm" ]; then
  helm_version=$(cd "$root/deploy/render" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
  say "helm $helm_version: building (once)"
  began=$(kf_now)
  mkdir -p "$cache/bin"
  (
    cd "$root/deploy/render"
    gobuild_flags=(-mod=mod -buildvcs=false "-ldflags=-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version")
    CGO_ENABLED=0 gobuild helm "helm" "$helm.tmp" helm.sh/helm/v3/cmd/helm
  ) || exit
  mv "$helm.tmp" "$helm"
  say "helm $helm_version: built in $(kf_dur $(($(kf_now) - began)))"
fi
# The kubernetes-csi external-attacher, beside the real-node cluster's control plane
# (test/realnode): Kubernetes' own attach path for the test's CSI driver.
ATTACHER_VERSION=${ATTACHER_VERSION:-v4.13.0}
attacher=$cache/bin/csi-attacher
if [ ! -x "$attacher" ]; then
  throwaway "$cache/csi-attacher-src" github.com/kubernetes-csi/external-attacher/v4 "$ATTACHER_VERSION"
  GOFLAGS="-mod=mod -buildvcs=false" tool attacher "csi-attacher $ATTACHER_VERSION" "$cache/csi-attacher-src" "$attacher" \
    github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
fi
# The peers of the external remediation and NetworkFence tests (test/sim), from the Go
# module proxy at pinned versions: the CustomResourceDefinitions of Cluster API's
# Machine, Cluster and MachineHealthCheck (what a MachineHealthCheck's request names),
# and of csi-addons; and the csi-addons controller itself, built in a throw-away module
# as the attacher is.
CAPI_VERSION=${CAPI_VERSION:-v1.11.3}
CSI_ADDONS_VERSION=${CSI_ADDONS_VERSION:-v0.12.0}
module_dir() { (cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$1" 2>/dev/null | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); }
capi_crds=$cache/crds/cluster-api-$CAPI_VERSION
if [ ! -d "$capi_crds" ]; then
  dir=$(module_dir "sigs.k8s.io/cluster-api@$CAPI_VERSION")
  mkdir -p "$capi_crds.tmp"
  cp "$dir"/config/crd/bases/cluster.x-k8s.io_{machines,clusters,machinehealthchecks}.yaml "$capi_crds.tmp/"
  mv "$capi_crds.tmp" "$capi_crds"
  say "Cluster API $CAPI_VERSION CRDs: copied"
fi
addons_crds=$cache/crds/csi-addons-$CSI_ADDONS_VERSION
if [ ! -d "$addons_crds" ]; then
  dir=$(module_dir "github.com/csi-addons/kubernetes-csi-addons@$CSI_ADDONS_VERSION")
  mkdir -p "$addons_crds.tmp"
  cp "$dir"/config/crd/bases/*.yaml "$addons_crds.tmp/"
  mv "$addons_crds.tmp" "$addons_crds"
  say "csi-addons $CSI_ADDONS_VERSION CRDs: copied"
fi
addons=$cache/bin/csi-addons-manager-$CSI_ADDONS_VERSION
if [ ! -x "$addons" ]; then
  throwaway "$cache/csi-addons-src" github.com/csi-addons/kubernetes-csi-addons "$CSI_ADDONS_VERSION"
  GOFLAGS="-mod=mod -buildvcs=false" tool addons "csi-addons controller $CSI_ADDONS_VERSION" "$cache/csi-addons-src" "$addons" \
    github.com/csi-addons/kubernetes-csi-addons/cmd/manager
fi
# Cluster API's MachineHealthCheck controller alone (test/sim/mhc, a module of its own so
# that Cluster API's dependencies stay out of go.mod), for the MachineHealthCheck e2e
# test; rebuilt when its sources change.
mhc=$cache/bin/mhc-controller
mhc_stamp=$(cat "$root"/test/sim/mhc/{main.go,go.mod,go.sum} | sha256sum | cut -c1-16)
if [ ! -x "$mhc" ] || [ "$(cat "$mhc.stamp" 2>/dev/null)" != "$mhc_stamp" ]; then
  GOFLAGS="-mod=readonly -buildvcs=false" tool mhc "MachineHealthCheck controller (Cluster API $CAPI_VERSION)" "$root/test/sim/mhc" "$mhc" .
  echo "$mhc_stamp" >"$mhc.stamp"
fi
build_cosign
say "deps: everything make test needs is in $cache"
