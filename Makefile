# kubefence. `make demo` and `make test` install what they need: hack/deps.sh demo, or
# hack/deps.sh for everything the tests need.
GO       ?= go
BIN      := $(CURDIR)/bin
CACHE    := $(CURDIR)/.cache
PKGS     := ./...
TEST_TIMEOUT ?= 40m
# Static binaries built with -trimpath, as a release builds them; the tests build with the
# same settings so that the real-node test's release (test/realnode) reuses their compile
# cache for linux/amd64 instead of compiling everything a second time.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(shell $(GO) env GOFLAGS) -trimpath)
# The tests' pause points (pkg/testpoint) are built only under this tag: test/sim builds its
# controllers with it, and pkg/testpoint's tests run with and without it. No release target
# sets it, and hack/images refuses a binary built with it.
TESTPOINTS_TAG := kubefence_testpoints

.PHONY: all build deps test unit lint demo bench bench-gossip proto generate clean

all: build

# Every binary carries its version and revision (pkg/buildinfo), the same mechanism as
# make images and releases; the version is git describe's.
STAMP    = -X github.com/kubefence/kubefence/pkg/buildinfo.version=$(VERSION) -X github.com/kubefence/kubefence/pkg/buildinfo.revision=$(shell git rev-parse HEAD 2>/dev/null)

build:
	$(GO) build -ldflags "$(STAMP)" -o $(BIN)/ ./cmd/...

deps:
	hack/deps.sh

# All tests, including the end-to-end ones on a real kube-apiserver, etcd,
# kube-controller-manager and ipmi_sim, and on real kubelet nodes (test/realnode). go test
# runs two packages at a time: test/realnode (about 22 minutes) beside test/sim (about 20,
# its tests two at a time). Both mostly wait on Lease and leader timings; together they
# keep the whole run under 30 minutes (25 here), and their safety checks must hold under
# that load.
test: deps build
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	$(GO) test -count=1 -tags $(TESTPOINTS_TAG) ./pkg/testpoint/

# Every package test under pkg/, with no control plane started: the controller's fixture
# tests run on fake clients. The agents' tests still use their real peers (ipmi_sim, tgtd,
# moto), and deps installs and builds what every target needs, once, under .cache/.
unit: deps
	$(GO) test -count=1 ./pkg/...
	$(GO) test -count=1 -tags $(TESTPOINTS_TAG) ./pkg/testpoint/

lint:
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(TESTPOINTS_TAG) ./pkg/testpoint/
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run ./hack/checkimports
	$(GO) run ./hack/checkbounds

# Only what the demo needs: ipmi_sim and ipmitool, etcd and the control plane without
# kubelet, fence-controller and fence-agent-ipmi, built side by side with progress
# (hack/demo.sh); then the demo.
demo:
	LDFLAGS="$(STAMP)" hack/demo.sh $(BIN)

# The same story on three real kubelet nodes (test/realnode), kubefence built into its
# image and installed with helm; needs root, takes about 4 minutes here.
.PHONY: demo-cluster bench-realnode
demo-cluster: deps build
	$(GO) run ./test/realnode/cmd/demo

# Recovery on real nodes, RUNS failures per profile (default, fast and heartbeats), then LEADER_RUNS
# of the leader's own node, p50 and p99; writes docs/benchmarks.md's real-node section.
RUNS ?= 5
LEADER_RUNS ?= 3
bench-realnode: deps build
	$(GO) run ./test/realnode/cmd/demo -runs $(RUNS) -leader-runs $(LEADER_RUNS) -profiles default,fast,heartbeats -report docs/benchmarks.md

# Benchmarks with the iteration counts that keep each under a few minutes here; each says
# how long it took. Figures are recorded in docs/benchmarks.md with the command that
# produced them. IncidentCost runs the floor, the controller, the floor with
# the controller's record and the floor whose last writes wait for every release, one
# after the other (153 s for 1 and 100 incidents on 2026-11-26, and the 1,000-incident
# round on its own, 108 s); IncidentCreate creates incidents
# with and without the status the API server drops (about 50 s);
# ControllerScale runs the controller over 100 and 5,000 nodes.
bench: deps build
	hack/timed.sh $(GO) test -run '^$$' -bench . -benchtime 2000x ./pkg/policy/
	hack/timed.sh $(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/detector/
	hack/timed.sh $(GO) test -run '^$$' -bench Cluster -benchmem ./pkg/controller/
	hack/timed.sh $(GO) test -run '^$$' -bench StatusWarm -benchtime 2000x ./pkg/plugin/
	hack/timed.sh $(GO) test -run '^$$' -bench ColdStart -benchtime 20x ./pkg/plugin/
	hack/timed.sh $(GO) test -run '^$$' -bench FenceLatency -benchtime 50x ./pkg/fenceagent/ipmi/
	hack/timed.sh $(GO) test -run '^$$' -bench FenceConcurrent -benchtime 3x ./pkg/fenceagent/ipmi/
	hack/timed.sh $(GO) test -run '^$$' -bench FenceMoto -benchtime 100x ./pkg/fenceagent/cloud/
	hack/timed.sh $(GO) test -run '^$$' -bench Takeover -benchtime 10x ./test/sim/
	hack/timed.sh $(GO) test -run '^$$' -bench 'IncidentCost/incidents=(1|100)$$' -benchtime 10x ./test/sim/
	hack/timed.sh $(GO) test -run '^$$' -bench 'IncidentCost/incidents=1000$$' -benchtime 1x -timeout 60m ./test/sim/
	hack/timed.sh $(GO) test -run '^$$' -bench IncidentCreate -benchtime 10x ./test/sim/
	hack/timed.sh $(GO) test -run '^$$' -bench CrashAtLeaderStart -benchtime 1x ./test/sim/
	hack/timed.sh $(GO) test -run '^$$' -bench 'ControllerScale/nodes=(100|5000)$$' -benchtime 1x -timeout 60m ./test/sim/

# The node agents' gossip simulated in one process (pkg/nodeagent/gossipsim_test.go): 1,000
# and 5,000 members on memberlist's in-memory network with the agents' own configuration,
# their memberlist periods slowed down so that two cores keep up. Prints, in the agents'
# real time, how long until every member holds all, the bytes a member sends, its memory,
# and how long until a killed member is declared dead by all; docs/benchmarks.md has the
# figures. 1,000 take about 4 minutes here; 5,000 stop at the run's heap limit (12 GiB)
# after a few: they do not fit in one process on this machine.
bench-gossip:
	hack/timed.sh $(GO) test -run '^$$' -bench 'GossipSim/members=(1000|5000)$$' -benchtime 1x -timeout 90m ./pkg/nodeagent/

# Each fuzz target for FUZZTIME (default 60s) from its seed corpus; `make test` runs the
# seeds alone. A crasher lands in testdata/fuzz/ and becomes a test case.
FUZZTIME ?= 60s
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeConfig$$' -fuzztime $(FUZZTIME) ./pkg/configfile/
	$(GO) test -run '^$$' -fuzz '^FuzzStatusWithinCRD$$' -fuzztime $(FUZZTIME) ./pkg/incidents/

proto:
	hack/proto.sh

generate:
	hack/generate.sh

clean:
	rm -rf $(BIN)
	@echo "kept $(CACHE) (control plane build); remove it by hand to rebuild from scratch"

# --- Deploy and operate -----------------------------------------------------------------
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE   ?= kubefence/kubefence

.PHONY: manifests test-deploy docs images

# The chart's CRD copy from pkg/apis, then deploy/manifests/kubefence.yaml rendered with
# Helm's Go library (deploy/render is its own module: helm stays out of go.mod), with the
# image of the latest release (deploy/release-values.yaml) when there is one.
manifests:
	deploy/helm/sync-crds.sh
	cd deploy/render && $(GO) run . -chart ../helm/kubefence -out ../manifests/kubefence.yaml

# Fails when deploy/manifests or the chart's CRD copy is stale; renders every option.
test-deploy:
	cd deploy/render && $(GO) test -count=1 ./...

test: test-deploy

# docs/configuration.md from the config types' doc comments.
docs:
	$(GO) run ./hack/configdoc -in pkg/apis/fencing/v1alpha1/config_types.go -out docs/configuration.md

# One architecture's kubefence image, without a container engine (hack/images,
# go-containerregistry): the binaries built static, trimmed and stamped, ipmitool with its
# libraries, the CA bundle and os-release from the Debian packages of
# hack/images/debian.lock, from scratch. Tagged $(IMAGE):<chart appVersion> (what the chart
# pulls by default) and $(IMAGE):$(VERSION). Writes $(BIN)/kubefence-image.tar (docker load,
# ctr images import); PUSH=1 pushes to $(IMAGE) instead (docker login's credentials),
# INSECURE=1 over plain HTTP; IMAGE_ARCH=arm64 builds the arm64 image.
PUSH       ?=
INSECURE   ?=
IMAGE_ARCH ?= amd64
images:
	$(GO) run ./hack/images -arch=$(IMAGE_ARCH) -version=$(VERSION) -revision=$(shell git rev-parse HEAD 2>/dev/null) \
		$(if $(PUSH),-push $(IMAGE),-repo $(IMAGE) -out $(BIN)/kubefence-image.tar) $(if $(INSECURE),-insecure)

# A release: make release VERSION=vX.Y.Z REGISTRY=ghcr.io/kubefence (docs/getting-started.md).
#  1. hack/images: the image index (linux/amd64 and linux/arm64) of the newest commit of
#     what the image is built from, its Debian files from hack/images/debian.lock, with an
#     SPDX SBOM attached to each platform image, pushed to $(REGISTRY)/kubefence under
#     VERSION and the chart's appVersion (VERSION without its v);
#  2. deploy/render: the chart, version = appVersion = VERSION without its v, its values
#     naming the image's registry and digest, pushed to oci://$(REGISTRY)/charts/kubefence;
#     and Chart.yaml, deploy/release-values.yaml, deploy/manifests and deploy/kustomize of
#     this checkout (or of RELEASE_TREE) updated to the release, to commit and tag.
# CHANGELOG.md needs a section "## VERSION" first. INSECURE=1: the registry speaks plain
# HTTP; ALLOW_DIRTY=1 releases uncommitted changes (the revision says -dirty). Go is
# pinned to RELEASE_GO (GOTOOLCHAIN) so that one commit gives the same digests anywhere.
# COSIGN_KEY (a cosign key file, env://VAR or a KMS URI; a key file's password from
# COSIGN_PASSWORD in the environment) signs, with the cosign CLI that hack/deps.sh cosign
# builds, the index and its images, the SBOMs and the chart, and attaches the SLSA
# provenance to the index and the chart, before each is tagged; COSIGN_TLOG=1 also
# uploads to Rekor. Without COSIGN_KEY the release is not signed, and says so.
#  3. hack/plugin: `kubectl fence`'s archives for PLUGIN_PLATFORMS, their checksums and,
#     when every platform is packed, the krew manifest (deploy/krew/fence.yaml filled in).
# Writes $(BIN)/release/VERSION: release.json, provenance.json, the SBOMs, the chart's .tgz,
# plugin/.
REGISTRY     ?=
RELEASE_GO   ?= go1.26.8
RELEASE_TREE ?= $(CURDIR)
RELEASE_DIR   = $(BIN)/release/$(VERSION)
COSIGN       ?= $(CURDIR)/.cache/bin/cosign
PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64
COSIGN_KEY   ?=
COSIGN_TLOG  ?=
SIGN_FLAGS    = $(if $(COSIGN_KEY),-cosign=$(COSIGN) -key=$(COSIGN_KEY) $(if $(COSIGN_TLOG),-tlog)) $(if $(INSECURE),-insecure)
.PHONY: release debian-lock
release:
	@test -n "$(REGISTRY)" || { echo "make release: set REGISTRY, e.g. REGISTRY=ghcr.io/kubefence"; exit 2; }
	$(if $(COSIGN_KEY),hack/deps.sh cosign)
	GOTOOLCHAIN=$(RELEASE_GO) hack/timed.sh $(GO) run ./hack/images release -version=$(VERSION) -registry=$(REGISTRY) \
		-out=$(RELEASE_DIR) $(if $(ALLOW_DIRTY),-allow-dirty) $(SIGN_FLAGS)
	cd deploy/render && GOTOOLCHAIN=$(RELEASE_GO) $(GO) run . release -image=$(RELEASE_DIR)/release.json -tree=$(RELEASE_TREE) \
		$(if $(COSIGN_KEY),-untagged)
	$(if $(COSIGN_KEY),GOTOOLCHAIN=$(RELEASE_GO) $(GO) run ./hack/images sign-chart -release=$(RELEASE_DIR) $(SIGN_FLAGS))
	GOTOOLCHAIN=$(RELEASE_GO) $(GO) run ./hack/plugin -version=$(VERSION) -revision=$(shell git rev-parse HEAD 2>/dev/null) \
		-platforms=$(PLUGIN_PLATFORMS) -out=$(RELEASE_DIR)/plugin

# hack/images/debian.lock from this machine's apt, on purpose: the current Debian versions of
# ipmitool, the packages of the libraries it loads, base-files and ca-certificates, for
# amd64 and arm64 (apt must know arm64: dpkg --add-architecture arm64 && apt-get update).
debian-lock:
	$(GO) run ./hack/images lock

# Randomized scenarios on the simulated cluster: run i uses seed SEED+i; a failing seed
# replays with RUNS=1. Every run is judged by the invariant checker (test/sim/invariants.go).
# PLANT=nofloor builds the controller with a planted bug (test/sim/planted.go): runs fail.
SEED ?= 1
RUNS ?= 10
PLANT ?=
.PHONY: chaos bench-report
chaos: deps
	$(GO) run ./test/sim/cmd/chaos -seed $(SEED) -runs $(RUNS) $(if $(PLANT),-plant $(PLANT))

# Controller disturbances (replica deletions, rollout restarts, frozen replicas) beside
# PDB-guarded and short-toleration pods on three real kubelet nodes that all stay alive:
# any NodeFence or BMC power request fails it. make test runs 4 rounds.
# PLANT=nofloor builds the image's controller with a planted bug (test/sim/planted.go).
ROUNDS ?= 20
.PHONY: chaos-realnode
chaos-realnode: deps build
	KUBEFENCE_REALNODE_SEED=$(SEED) KUBEFENCE_REALNODE_ROUNDS=$(ROUNDS) KUBEFENCE_REALNODE_PLANT=$(PLANT) $(GO) test -count=1 -timeout 60m \
		-run '^TestDisturbancesNeverFenceHealthyRealNodes$$' -v ./test/realnode

# Recovery times on a 100-node simulated cluster, default and fast profiles, side by side
# with Kubernetes alone, and the fast profile with node agents; writes docs/benchmarks.md
# (about 11 minutes on 2 cores).
bench-report: deps
	KUBEFENCE_BENCH_REPORT=docs/benchmarks.md $(GO) test -count=1 -timeout 90m -run TestBenchmarkReport -v ./test/sim
