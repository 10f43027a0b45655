#!/usr/bin/env bash
# Regenerates, from the API types in pkg/apis, with pinned generators:
# - deepcopy functions and the CRD YAML (controller-gen);
# - the typed NodeFence clientset, listers and informers under pkg/generated
#   (k8s.io/code-generator at the client-go version in go.mod).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$root/.cache/bin
if [ ! -x "$bin/controller-gen" ]; then
  GOBIN=$bin GOFLAGS=-mod=mod go install sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0
fi
"$bin/controller-gen" object paths=./pkg/apis/...
"$bin/controller-gen" crd:crdVersions=v1 paths=./pkg/apis/... output:crd:dir=./pkg/apis/fencing/v1alpha1/crd

# code-generator's version follows client-go's (v0.X.Y for both).
cgv=$(go list -m -f '{{.Version}}' k8s.io/client-go)
cg=$bin/code-generator-$cgv
for gen in client-gen lister-gen informer-gen; do
  [ -x "$cg/$gen" ] || GOBIN=$cg GOFLAGS=-mod=mod go install "k8s.io/code-generator/cmd/$gen@$cgv"
done
mod=github.com/kubefence/kubefence
api=$mod/pkg/apis/fencing/v1alpha1
out=pkg/generated
header=hack/boilerplate.go.txt
rm -rf "$out"
"$cg/client-gen" --go-header-file "$header" --clientset-name versioned --input-base "" --input "$api" \
  --output-pkg "$mod/$out/clientset" --output-dir "$out/clientset"
"$cg/lister-gen" --go-header-file "$header" --output-pkg "$mod/$out/listers" --output-dir "$out/listers" "$api"
"$cg/informer-gen" --go-header-file "$header" --versioned-clientset-package "$mod/$out/clientset/versioned" \
  --listers-package "$mod/$out/listers" --output-pkg "$mod/$out/informers" --output-dir "$out/informers" "$api"
