#!/usr/bin/env bash
# Regenerates pkg/plugin/agentpb from pkg/plugin/proto/agent.proto, and
# test/sim/csiaddons/sidecarpb from test/sim/csiaddons/proto/sidecar.proto.
# The code generators are pinned so that regenerating on any machine gives
# byte-identical output; they live in .cache/bin, outside GOPATH/bin.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/.cache/bin"
PROTOC_GEN_GO_VERSION="v1.36.12"
PROTOC_GEN_GO_GRPC_VERSION="v1.5.1"

cd "${ROOT}"
mkdir -p "${BIN}"

# install_plugin NAME MODULE VERSION installs NAME unless the pinned version is there.
install_plugin() {
	local name="$1" module="$2" version="$3"
	if [[ -x "${BIN}/${name}" ]] &&
		[[ "$(go version -m "${BIN}/${name}" | awk '$1 == "mod" { print $3 }')" == "${version}" ]]; then
		return
	fi
	GOBIN="${BIN}" go install "${module}@${version}"
}

install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "${PROTOC_GEN_GO_VERSION}"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "${PROTOC_GEN_GO_GRPC_VERSION}"

if ! command -v protoc >/dev/null 2>&1; then
	sudo=""
	[[ "$(id -u)" -ne 0 ]] && sudo="sudo"
	${sudo} apt-get update
	${sudo} apt-get install -y --no-install-recommends protobuf-compiler
fi

PATH="${BIN}:${PATH}" protoc \
	--proto_path=pkg/plugin/proto \
	--go_out=pkg/plugin/agentpb --go_opt=paths=source_relative \
	--go-grpc_out=pkg/plugin/agentpb --go-grpc_opt=paths=source_relative \
	agent.proto

gofmt -l pkg/plugin/agentpb

# The csi-addons sidecar's NetworkFence service, for test/sim's test CSI driver.
PATH="${BIN}:${PATH}" protoc \
	--proto_path=test/sim/csiaddons/proto \
	--go_out=test/sim/csiaddons/sidecarpb --go_opt=paths=source_relative \
	--go-grpc_out=test/sim/csiaddons/sidecarpb --go-grpc_opt=paths=source_relative \
	sidecar.proto
