#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine, once:
# Debian packages for the real peers, and etcd and the Kubernetes control plane built from source.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
need=()
command -v ipmi_sim >/dev/null || need+=(openipmi)
command -v ipmitool >/dev/null || need+=(ipmitool)
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
# The release's arm64 image: its binaries and ipmitool run under qemu-aarch64-static in the
# tests (hack/images, test/realnode).
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  if [ "$(id -u)" != 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# make debian-lock and its test read the arm64 packages' records from apt (nothing arm64
# is installed).
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "apt: adding the arm64 architecture's package lists"
  if [ "$(id -u)" != 0 ]; then sudo=sudo; else sudo=; fi
  $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq
fi
"$root/hack/controlplane.sh"
# helm, as a user installs the chart (test/realnode); built from the Helm version that
# deploy/render pins, so chart rendering and installs agree.
helm=$root/.cache/bin/helm
if [ ! -x "$helm" ]; then
  echo "helm: building (once; about 2 minutes cold)"
  mkdir -p "$root/.cache/bin"
  helm_version=$(cd "$root/deploy/render" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
  (cd "$root/deploy/render" && GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version" -o "$helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$helm.tmp" "$helm"
fi
# The kubernetes-csi external-attacher, beside the real-node cluster's control plane
# (test/realnode): Kubernetes' own attach path for the test's CSI driver. Built in a
# throw-away module so that it stays out of kubefence's go.mod.
ATTACHER_VERSION=${ATTACHER_VERSION:-v4.13.0}
attacher=$root/.cache/bin/csi-attacher
if [ ! -x "$attacher" ]; then
  echo "csi-attacher $ATTACHER_VERSION: building (once; about 4 minutes cold)"
  src=$root/.cache/csi-attacher-src
  mkdir -p "$src" "$root/.cache/bin"
  (
    cd "$src"
    printf 'module kubefence.local/csiattacher\n\ngo 1.25\n\nrequire github.com/kubernetes-csi/external-attacher/v4 %s\n' "$ATTACHER_VERSION" >go.mod
    printf '//go:build tools\n\npackage csiattacher\n\nimport _ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"\n' >tools.go
    GOFLAGS=-mod=mod GOWORK=off go mod tidy >/dev/null 2>&1 || true
    GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$attacher.tmp" \
      github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
  )
  mv "$attacher.tmp" "$attacher"
fi
# The peers of the external remediation and NetworkFence tests (test/sim), from the Go
# module proxy at pinned versions: the CustomResourceDefinitions of Cluster API's
# Machine, Cluster and MachineHealthCheck (what a MachineHealthCheck's request names),
# and of csi-addons; and the csi-addons controller itself, built in a throw-away module
# as the attacher is.
CAPI_VERSION=${CAPI_VERSION:-v1.11.3}
CSI_ADDONS_VERSION=${CSI_ADDONS_VERSION:-v0.12.0}
module_dir() { (cd "$(mktemp -d)" && GOFLAGS=-mod=mod GOWORK=off go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); }
capi_crds=$root/.cache/crds/cluster-api-$CAPI_VERSION
if [ ! -d "$capi_crds" ]; then
  dir=$(module_dir "sigs.k8s.io/cluster-api@$CAPI_VERSION")
  mkdir -p "$capi_crds.tmp"
  cp "$dir"/config/crd/bases/cluster.x-k8s.io_{machines,clusters,machinehealthchecks}.yaml "$capi_crds.tmp/"
  mv "$capi_crds.tmp" "$capi_crds"
fi
addons_crds=$root/.cache/crds/csi-addons-$CSI_ADDONS_VERSION
if [ ! -d "$addons_crds" ]; then
  dir=$(module_dir "github.com/csi-addons/kubernetes-csi-addons@$CSI_ADDONS_VERSION")
  mkdir -p "$addons_crds.tmp"
  cp "$dir"/config/crd/bases/*.yaml "$addons_crds.tmp/"
  mv "$addons_crds.tmp" "$addons_crds"
fi
addons=$root/.cache/bin/csi-addons-manager-$CSI_ADDONS_VERSION
if [ ! -x "$addons" ]; then
  echo "csi-addons controller $CSI_ADDONS_VERSION: building (once; about 4 minutes cold)"
  src=$root/.cache/csi-addons-src
  mkdir -p "$src" "$root/.cache/bin"
  (
    cd "$src"
    printf 'module kubefence.local/csiaddons\n\ngo 1.23.0\n' >go.mod
    GOFLAGS=-mod=mod GOWORK=off go get "github.com/csi-addons/kubernetes-csi-addons/cmd/manager@$CSI_ADDONS_VERSION"
    GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$addons.tmp" \
      github.com/csi-addons/kubernetes-csi-addons/cmd/manager
  )
  mv "$addons.tmp" "$addons"
fi
# Cluster API's MachineHealthCheck controller alone (test/sim/mhc, a module of its own so
# that Cluster API's dependencies stay out of go.mod), for the MachineHealthCheck e2e
# test; rebuilt when its sources change.
mhc=$root/.cache/bin/mhc-controller
mhc_stamp=$(cat "$root"/test/sim/mhc/{main.go,go.mod,go.sum} | sha256sum | cut -c1-16)
if [ ! -x "$mhc" ] || [ "$(cat "$mhc.stamp" 2>/dev/null)" != "$mhc_stamp" ]; then
  echo "MachineHealthCheck controller (Cluster API $CAPI_VERSION): building (once; about 3 minutes cold)"
  mkdir -p "$root/.cache/bin"
  (cd "$root/test/sim/mhc" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$mhc.tmp" .)
  mv "$mhc.tmp" "$mhc"
  echo "$mhc_stamp" >"$mhc.stamp"
fi
