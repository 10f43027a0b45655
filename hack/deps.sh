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
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  if [ "$(id -u)" != 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
"$root/hack/controlplane.sh"
