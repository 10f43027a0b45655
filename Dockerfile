# syntax=docker/dockerfile:1
# One image with every kubefence binary: fence-controller and kubefence-config-init in
# /usr/local/bin, the fence agents in /usr/libexec/kubefence/agents (the chart's pluginDir),
# with their SHA256SUMS. Static Go builds on distroless, non-root.
#
#   docker build -t kubefence/kubefence:dev .                         # default: distroless
#   docker build --target ipmitool -t kubefence/kubefence:dev-ipmitool .   # adds ipmitool
#
# The IPMI agent's lanplus provider runs ipmitool, which distroless lacks; its Redfish
# provider, the cloud agent and the controller need nothing else. Use the ipmitool target
# for IPMI over LAN (locally or as a remote agent).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build <<BUILD
set -eu
export CGO_ENABLED=0 GOOS="$TARGETOS" GOARCH="$TARGETARCH"
ldflags="-s -w -X github.com/kubefence/kubefence/pkg/buildinfo.version=${VERSION}"
mkdir -p /out/bin /out/agents
go build -trimpath -buildvcs=false -ldflags "$ldflags" -o /out/bin/fence-controller ./cmd/fence-controller
go build -trimpath -buildvcs=false -ldflags "$ldflags" -o /out/bin/kubefence-config-init ./deploy/image/config-init
for a in ipmi cloud iscsi exec; do
  go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "/out/agents/fence-agent-$a" "./cmd/fence-agent-$a"
done
cd /out/agents && sha256sum fence-agent-* > SHA256SUMS
BUILD

FROM debian:bookworm-slim AS ipmitool
RUN apt-get update && apt-get install -y --no-install-recommends ipmitool ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/agents/ /usr/libexec/kubefence/agents/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fence-controller"]

FROM gcr.io/distroless/static-debian12:nonroot AS kubefence
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/agents/ /usr/libexec/kubefence/agents/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fence-controller"]
