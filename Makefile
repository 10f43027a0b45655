# kubefence. `make demo` and `make test` install what they need (hack/deps.sh).
GO       ?= go
BIN      := $(CURDIR)/bin
CACHE    := $(CURDIR)/.cache
PKGS     := ./...
TEST_TIMEOUT ?= 25m

.PHONY: all build deps test unit lint demo bench proto generate clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

deps:
	hack/deps.sh

# All tests, including the end-to-end ones on a real kube-apiserver, etcd,
# kube-controller-manager and ipmi_sim.
test: deps build
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# Only the packages that need no external peer.
unit:
	$(GO) test -count=1 ./pkg/policy/... ./pkg/fencer/... ./pkg/detector/... ./pkg/apis/...

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	../shared/tools/check-imports

demo: deps build
	$(GO) run ./test/sim/cmd/demo -bin $(BIN)

# Benchmarks with the iteration counts that keep each under a minute here; figures are
# recorded in the issue notes and docs with the command that produced them.
bench: deps build
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./pkg/policy/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/detector/
	$(GO) test -run '^$$' -bench StatusWarm -benchtime 2000x ./pkg/plugin/
	$(GO) test -run '^$$' -bench ColdStart -benchtime 20x ./pkg/plugin/
	$(GO) test -run '^$$' -bench FenceLatency -benchtime 50x ./pkg/agent/ipmi/
	$(GO) test -run '^$$' -bench FenceMoto -benchtime 100x ./pkg/agent/cloud/

proto:
	hack/proto.sh

generate:
	hack/generate.sh

clean:
	rm -rf $(BIN)
	@echo "kept $(CACHE) (control plane build); remove it by hand to rebuild from scratch"
