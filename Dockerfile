# syntax=docker/dockerfile:1
# The kubefence image for those who build with Docker. `make images` builds the same image
# without any container engine (hack/images, with go-containerregistry) and is what the
# project uses and tests; keep the two alike. One image holds everything:
# fence-controller and kubefence-config-init in /usr/local/bin, the fence agents in
# /usr/libexec/kubefence/agents (the chart's pluginDir) with their SHA256SUMS, and
# ipmitool, which the IPMI agent's lanplus provider runs, plus the CA certificates for
# Redfish and the cloud APIs. Static Go builds, run as nonroot 65532:65532.
# `make images` starts from scratch with the build machine's Debian ipmitool and its
# libraries; this file starts from debian:bookworm-slim and installs the package.
#
# Tag it as `make images` does: the chart's appVersion, the tag the Helm chart pulls by
# default, and git describe's version:
#
#   v=$(git describe --tags --always --dirty)
#   app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/helm/kubefence/Chart.yaml)
#   docker build --build-arg VERSION=$v --build-arg REVISION=$(git rev-parse HEAD) \
#     -t kubefence/kubefence:$app -t kubefence/kubefence:$v .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build <<BUILD
set -eu
export CGO_ENABLED=0 GOOS="$TARGETOS" GOARCH="$TARGETARCH"
ldflags="-s -w -X github.com/kubefence/kubefence/pkg/buildinfo.version=${VERSION} -X github.com/kubefence/kubefence/pkg/buildinfo.revision=${REVISION}"
mkdir -p /out/bin /out/agents
go build -trimpath -buildvcs=false -ldflags "$ldflags" -o /out/bin/fence-controller ./cmd/fence-controller
go build -trimpath -buildvcs=false -ldflags "$ldflags" -o /out/bin/kubefence-config-init ./deploy/image/config-init
for a in ipmi cloud iscsi exec; do
  go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "/out/agents/fence-agent-$a" "./cmd/fence-agent-$a"
done
cd /out/agents && sha256sum fence-agent-ipmi fence-agent-cloud fence-agent-iscsi fence-agent-exec > SHA256SUMS
BUILD

FROM debian:bookworm-slim AS kubefence
RUN apt-get update && apt-get install -y --no-install-recommends ipmitool ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd -g 65532 nonroot && useradd -u 65532 -g 65532 -d /home/nonroot -m -s /sbin/nologin nonroot
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/agents/ /usr/libexec/kubefence/agents/
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title=kubefence \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.source=https://github.com/kubefence/kubefence
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fence-controller"]
