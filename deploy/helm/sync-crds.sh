#!/usr/bin/env bash
# Copies the NodeFence CRD from its single source (pkg/apis/fencing/v1alpha1/crd, generated
# by controller-gen) into the chart. deploy/render's tests fail when the copy is stale.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../../pkg/apis/fencing/v1alpha1/crd"
dst="$here/kubefence/crds"
rm -f "$dst"/*.yaml
cp "$src"/*.yaml "$dst"/
