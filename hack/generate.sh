#!/usr/bin/env bash
# Regenerates the API's deepcopy functions and CRD YAML with a pinned controller-gen.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$root/.cache/bin
if [ ! -x "$bin/controller-gen" ]; then
  GOBIN=$bin GOFLAGS=-mod=mod go install sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0
fi
"$bin/controller-gen" object paths=./pkg/apis/...
"$bin/controller-gen" crd:crdVersions=v1 paths=./pkg/apis/... output:crd:dir=./pkg/apis/fencing/v1alpha1/crd
