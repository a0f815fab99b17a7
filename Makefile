# drascope: `make build`, `make test`. Everything comes from the Go module proxy.

GO      ?= go
BIN     := $(CURDIR)/bin
# Static, reproducible binaries: no cgo (the image's base,
# distroless/static, has no libc) and no paths of the build machine in
# them (build says so itself, whatever the environment). Everything else
# builds the same way by default, the Kubernetes tools and the test
# binaries too, so that they all share one build cache; only the race
# detector needs cgo (test-unit with -race).
export CGO_ENABLED ?= 0
export GOFLAGS ?= -buildvcs=false -trimpath

# The scheduler's compatibility-version machinery (--emulated-version) takes
# the binary version from gitVersion, so gitVersion must stay the Kubernetes
# version drascope links; drascope's own version (VERSION, which is
# CHANGELOG.md's newest entry and the chart's appVersion: make verify checks)
# rides along as build metadata, and the commit says which build it is.
K8S_VERSION      := $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes)
DRASCOPE_VERSION ?= $(shell cat VERSION)
GIT_COMMIT       ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_TREE_STATE   ?= $(shell test -z "$$(git status --porcelain 2>/dev/null)" && echo clean || echo dirty)
BUILD_DATE       ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG      := k8s.io/component-base/version
LDFLAGS := -X $(VERSION_PKG).gitVersion=$(K8S_VERSION)+drascope.$(DRASCOPE_VERSION) \
           -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) \
           -X $(VERSION_PKG).gitTreeState=$(GIT_TREE_STATE) \
           -X $(VERSION_PKG).buildDate=$(BUILD_DATE)

# Integration tests: the package, and how long it may run.
INTEGRATION_TIMEOUT ?= 30m

.PHONY: all build helm test test-unit test-monitoring test-chart test-integration perf perf-smoke perf-scale perf-docs sandbox-doc tools sandbox generate verify clean help

all: build

help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## Build bin/drascope-scheduler, bin/kubectl-dra and bin/drascope-sandbox (static, -trimpath, version stamped).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/drascope-scheduler ./cmd/scheduler
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kubectl-dra ./cmd/kubectl-dra
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/drascope-sandbox ./cmd/sandbox

SANDBOX_FLAGS ?=

# BIN is an absolute path, so that the recipes below may cd; this rule lets
# make bin/promtool, make bin/drascope-alerts, ... work as the docs and the
# sandbox's messages write them.
bin/%: $(BIN)/% ;

sandbox: build tools $(BIN)/drascope-alerts ## Run the whole product on a local control plane, with a demo (SANDBOX_FLAGS=--help for flags).
	$(BIN)/drascope-sandbox $(SANDBOX_FLAGS)

# The control plane the integration tests run against, built from the exact
# versions go.mod pins (etcd is the version k8s.io/kubernetes requires).
tools: $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kubectl $(BIN)/kwok $(BIN)/kwok-stages.yaml ## Build etcd, kube-apiserver, kube-controller-manager, kubectl and kwok into bin/.

# Kubernetes binaries carry the version they are built from.
K8S_LDFLAGS := -X $(VERSION_PKG).gitVersion=$(K8S_VERSION)

$(BIN)/etcd: go.mod go.sum
	$(GO) build -o $@ go.etcd.io/etcd/server/v3

$(BIN)/kube-apiserver: go.mod go.sum
	$(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(BIN)/kube-controller-manager: go.mod go.sum
	$(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kube-controller-manager

# KWOK has a module of its own (hack/kwok): its Kubernetes dependencies are
# another minor version. Its stage files (node Ready with heartbeats, pods
# Running, deletions finished) come from the same module version.
KWOK_STAGES := node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
               pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml

$(BIN)/kwok: hack/kwok/go.mod hack/kwok/go.sum
	cd hack/kwok && $(GO) build -o $@ sigs.k8s.io/kwok/cmd/kwok

$(BIN)/kwok-stages.yaml: hack/kwok/go.mod hack/kwok/go.sum
	@mkdir -p $(BIN)
	dir=$$(cd hack/kwok && $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok) && \
	for f in $(KWOK_STAGES); do echo '---'; cat "$$dir/kustomize/stage/$$f"; done > $@

$(BIN)/kubectl: go.mod go.sum
	$(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kubectl

test: test-unit test-monitoring test-chart test-integration perf-smoke ## Run all tests (unit, monitoring rules, Helm chart, integration on a real apiserver, scheduler_perf smoke).

# In CI every unit test runs three times under the race detector, so that
# a test that depends on timing or races shows itself before it lands
# (about 9 minutes on the 2-core CI machine, against 2 for one plain run).
UNIT_FLAGS ?= $(if $(CI),-race -count=3,)

test-unit: ## Unit tests: no servers (UNIT_FLAGS='-race -count=3' as in CI).
	CGO_ENABLED=$(if $(findstring -race,$(UNIT_FLAGS)),1,$(CGO_ENABLED)) $(GO) test $(UNIT_FLAGS) ./apis/... ./pkg/... ./internal/... ./cmd/... ./test/perf/results/... ./hack/verifydocs/...

# promtool has a module of its own (hack/prometheus), so that Prometheus'
# dependencies never move the Kubernetes build. The same module's test
# parses every PromQL expression of the rules and the dashboard and checks
# the metrics they name against manifests/monitoring/metric-names.txt, which
# internal/monitoring's test keeps equal to the scheduler's registry.
$(BIN)/promtool: hack/prometheus/go.mod hack/prometheus/go.sum
	cd hack/prometheus && $(GO) build -o $@ github.com/prometheus/prometheus/cmd/promtool

# drascope-alerts (hack/prometheus/cmd/drascope-alerts) evaluates rules as
# promtool test rules does, with Prometheus' rule manager and PromQL engine
# but none of promtool's service discovery (client-go, the cloud SDKs): the
# sandbox's alert step and the integration test use it, and its test checks
# it against the expectations of manifests/monitoring/tests, which
# test-monitoring runs through promtool itself.
$(BIN)/drascope-alerts: hack/prometheus/go.mod hack/prometheus/go.sum $(wildcard hack/prometheus/alerteval/*.go hack/prometheus/cmd/drascope-alerts/*.go)
	cd hack/prometheus && $(GO) build -o $@ ./cmd/drascope-alerts

test-monitoring: $(BIN)/promtool ## Prometheus rules (promtool test rules) and the dashboard's PromQL, against the metrics the scheduler registers.
	$(BIN)/promtool check rules manifests/monitoring/rules.yaml
	$(BIN)/promtool test rules manifests/monitoring/tests/*.yaml
	cd hack/prometheus && $(GO) test -count=1 ./...

# Helm has a module of its own (hack/helm), like promtool. Its test keeps
# charts/drascope's rendered objects equal to kubectl kustomize of
# manifests/ for each mode.
$(BIN)/helm: hack/helm/go.mod hack/helm/go.sum
	cd hack/helm && $(GO) build -o $@ helm.sh/helm/v4/cmd/helm

helm: $(BIN)/helm ## Build Helm into bin/ from the Go module proxy (for charts/drascope).

test-chart: $(BIN)/helm $(BIN)/kubectl ## The Helm chart: helm lint, and helm template equal to kubectl kustomize of manifests/ for each mode.
	cd hack/helm && DRASCOPE_BIN_DIR=$(BIN) $(GO) test -count=1 ./...

test-integration: build tools $(BIN)/drascope-alerts $(BIN)/helm ## Integration tests on real etcd + kube-apiserver.
	DRASCOPE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout $(INTEGRATION_TIMEOUT) ./test/integration/... $(if $(CI),-v,)

# scheduler_perf (test/perf): every workload runs with upstream's in-tree
# DynamicResources and with DRAScope in one process; the table comes from
# test/perf/report. scheduler_perf starts etcd from PATH. Its log goes to
# output.log beside the results (PERF_OUT/<set>/). etcd's data goes under
# PERF_TMPDIR, memory where the machine has /dev/shm: on disk, a stalled
# fsync (seen: 1.2 s) can cut one run's throughput tenfold and say nothing
# about either scheduler.
#
# PERF_WORKLOADS narrows a run to the workloads whose sub-benchmark name
# (TestCase_workload) matches, as go test -bench does; PERF_FLAGS passes
# harness flags, e.g. -perf-pairs=4 to run each workload four times with each
# scheduler; an even number runs each scheduler first as often as second
# (docs/perf.md, "Pairs, order and noise"), e.g.
#   make perf PERF_WORKLOADS=SchedulingWithResourceClaimTemplate_2000pods_200nodes PERF_FLAGS=-perf-pairs=4 PERF_OUT=_output/perf-pairs
# -perf-variants=drascope,drascope-bestfit runs only the variants named (the
# report then has no upstream column for those workloads), e.g. BestFit
# against FirstFit at scale:
#   make perf-scale PERF_WORKLOADS=SteadyStateAtScale_nearlyfull_2000nodes PERF_FLAGS='-perf-pairs=2 -perf-variants=drascope,drascope-bestfit'
# Every run writes a CPU profile of its measured phase (-perf-cpuprofile):
# the report's scheduler CPU per pod is read from it.
PERF_OUT     ?= $(CURDIR)/_output/perf
PERF_TMPDIR  ?= $(if $(wildcard /dev/shm/.),/dev/shm,$(or $(TMPDIR),/tmp))
PERF_TIMEOUT ?= 6h
PERF_FLAGS   ?=
PERF_WORKLOADS ?=
# Absolute, because the run starts in test/perf.
override PERF_OUT := $(abspath $(PERF_OUT))

# scheduler_perf's in-process kube-apiserver reads fixtures beside its own
# source, which it finds from runtime.Caller; under -trimpath that path is
# relative, and upstream then joins it to TEST_SRCDIR/TEST_WORKSPACE (its
# seam for Bazel's trimmed builds). The module cache holds that source.
PERF_SRCDIR = TEST_SRCDIR=$(shell $(GO) env GOMODCACHE) TEST_WORKSPACE=.

# run-perf <set> <label filter>
define run-perf
	rm -rf $(PERF_OUT)/$(1) && mkdir -p $(PERF_OUT)/$(1)
	@echo "scheduler_perf: $(1) workloads; log in $(PERF_OUT)/$(1)/output.log"
	cd test/perf && PATH=$(BIN):$$PATH TMPDIR=$(PERF_TMPDIR) $(PERF_SRCDIR) $(GO) test . -run '^$$' -bench 'BenchmarkPerfScheduling$(if $(PERF_WORKLOADS),/$(PERF_WORKLOADS))' -benchtime 1x -timeout $(PERF_TIMEOUT) \
		-args -perf-scheduling-label-filter=$(2) -data-items-dir=$(PERF_OUT)/$(1) -perf-cpuprofile $(PERF_FLAGS) >$(PERF_OUT)/$(1)/output.log 2>&1 || \
		{ grep -E -B2 -A8 -- '^\s*--- FAIL|ERROR|Error running' $(PERF_OUT)/$(1)/output.log | tail -n 120; echo "scheduler_perf failed; full log: $(PERF_OUT)/$(1)/output.log"; exit 1; }
	$(GO) run ./test/perf/report $(PERF_OUT)/$(1) | tee $(PERF_OUT)/$(1)/table.md
endef

perf: $(BIN)/etcd ## scheduler_perf performance workloads, upstream vs DRAScope (long; the table of docs/perf.md).
	$(call run-perf,performance,performance)

perf-smoke: $(BIN)/etcd ## scheduler_perf short workloads, upstream vs DRAScope (checks the harness, not speed).
	$(call run-perf,smoke,short)

# PERF_SCALE_LABELS=scale5000 runs the 5000-node full cluster instead.
PERF_SCALE_LABELS ?= scale
perf-scale: $(BIN)/etcd ## scheduler_perf nearly full and full clusters at 500 and 2000 nodes, upstream vs DRAScope (docs/perf.md: "At scale").
	$(call run-perf,scale,$(PERF_SCALE_LABELS))

sandbox-doc: build tools $(BIN)/drascope-alerts ## Rewrite docs/sandbox.md's transcript from a run of the demo (TestSandboxDemo).
	DRASCOPE_UPDATE_SANDBOX_DOC=1 DRASCOPE_BIN_DIR=$(BIN) $(GO) test -count=1 ./test/integration -run '^TestSandboxDemo$$'

perf-docs: ## Rewrite the docs' perf tables (<!-- report ... --> blocks) from the summaries in test/perf/summaries.
	$(GO) test -count=1 ./test/perf/results -run TestDocsTablesArePrintedFromSummaries -args -update

generate: ## Regenerate deepcopy, conversion and defaulting code, the ResourcePool clientset, listers and informers, and manifests/monitoring's generated files.
	hack/update-codegen.sh
	$(GO) test -count=1 ./internal/monitoring -args -update

# Linters have a module of their own (hack/lint), so that their
# golang.org/x/tools never moves the Kubernetes build.
$(BIN)/staticcheck: hack/lint/go.mod hack/lint/go.sum
	cd hack/lint && $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

$(BIN)/goimports: hack/lint/go.mod hack/lint/go.sum
	cd hack/lint && $(GO) build -o $@ golang.org/x/tools/cmd/goimports

# Hand-written Go files; generated ones are checked by regenerating them.
GO_DIRS    := apis pkg cmd test hack internal
GO_SOURCES  = $(shell find $(wildcard $(GO_DIRS)) -name '*.go' -not -name 'zz_generated.*' -not -path 'pkg/generated/*')

verify: $(BIN)/staticcheck $(BIN)/goimports ## Fail if generated code or go.mod is stale, a doc names an internal work round or links to a missing file or heading, a file is not gofmt/goimports clean, or go vet or staticcheck find a problem.
	hack/verify-codegen.sh
	hack/verify-version.sh
	$(GO) run ./hack/verifydocs
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $(wildcard $(GO_DIRS))); \
	  if [ -n "$$out" ]; then echo "Not gofmt'd (run gofmt -w on them):"; echo "$$out"; exit 1; fi
	@out=$$($(BIN)/goimports -local github.com/drascope/drascope -l $(GO_SOURCES)); \
	  if [ -n "$$out" ]; then echo "Imports not grouped as goimports -local github.com/drascope/drascope groups them:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck $$($(GO) list ./... | grep -v /pkg/generated/)

clean:
	rm -rf $(BIN)
