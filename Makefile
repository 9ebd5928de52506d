# cairn: make targets. `make test` is the command CI runs.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned versions of the tools the tests start.
VERSITYGW_VERSION := v1.8.0
# Pinned code generators of the Connect API (make proto).
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
PROTO_TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go
# The accessibility checker the console's browser tests inject (npm axe-core).
AXE_CORE_VERSION := 4.14.1
# The linter make lint runs beside go vet.
STATICCHECK_VERSION := v0.8.2

FUZZTIME ?= 10s

.PHONY: all test unit lint docs docs-check release fuzz tools proto proto-check debian-etcd integration campaign cluster demo bench bench-regions bench-scale clean ts ts-bench test-contended

# testsum counts the events of go test -json: every test target ends with one
# line, N passed, N failed (, N skipped), and shows the whole output of what
# failed. The events of the last run are kept in $(RESULTS).
TESTSUM := $(BIN)/testsum
RESULTS := $(BIN)/test-events

$(TESTSUM): $(wildcard internal/testsum/*.go)
	@$(GO) build -o $@ ./internal/testsum

# PKGS narrows unit (and test) to some packages, e.g. make unit PKGS=./keys/...
# The default lists the two longest packages first (go test starts them in
# the order listed, two at a time on two cores), so that the short packages
# fill whichever slot frees first instead of leaving the longest to run alone
# at the end.
PKGS ?= ./integration/... ./etcdstore/... ./...

# run-unit and run-fuzz are the steps of unit, fuzz and test; each keeps its
# events in $(RESULTS).
#
# UNITP is go test's -p: how many test binaries build, link and run at once.
# One more than the cores: the longest packages (integration, etcdstore)
# spend much of their time waiting on etcd's fsyncs, timers and child
# processes, and with -p equal to the cores they would hold both slots while
# every other package waited to be linked.
UNITP ?= $(shell echo $$(( $$(nproc) + 1 )))
define run-unit
mkdir -p $(RESULTS) && rm -f $(RESULTS)/unit.json && set -o pipefail && \
$(GO) test -race -count=1 -json -p $(UNITP) -timeout 30m $(PKGS) 2>&1 | $(TESTSUM) -log $(RESULTS)/unit.json
endef
define run-fuzz
mkdir -p $(RESULTS) && rm -f $(RESULTS)/fuzz.json && \
GO=$(GO) FUZZTIME=$(FUZZTIME) TESTSUM=$(TESTSUM) TESTSUM_LOG=$(RESULTS)/fuzz.json bash scripts/fuzz.sh
endef
# FUZZWORK keeps the fuzzing test binaries that make test builds ahead, at
# the lowest CPU priority, while the unit tests run (scripts/fuzz.sh build);
# its log is $(RESULTS)/fuzz-build.log.
FUZZWORK := $(BIN)/fuzzwork

all: lint test

## lint: gofmt, go vet and staticcheck must be clean, and gen/ and the
## manual's flag tables fresh.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(MAKE) --no-print-directory proto-check
	$(MAKE) --no-print-directory docs-check

## docs: regenerate the flag tables of docs/ from the binaries' --help
## (go generate ./docs).
docs:
	$(GO) generate ./docs

## docs-check: fail when a flag table of docs/ is stale against --help.
docs-check:
	$(GO) run ./internal/flagdoc -check

## proto: regenerate the Go code of the Connect API (gen/) from proto/.
proto: $(PROTO_TOOLS)
	$(BIN)/buf lint proto
	rm -rf gen/cairn && $(BIN)/buf generate

## proto-check: fail when gen/ is stale against proto/.
proto-check: $(PROTO_TOOLS)
	BIN=$(BIN) bash scripts/proto-check.sh

# NODE_MODULES is the TypeScript client's node_modules, installed by npm ci
# from the committed lockfile once, and again only when the lockfile changes
# (the file npm ci writes, touched once it has finished): lint's buf, ts and
# ts-bench share it.
NODE_MODULES := clients/typescript/node_modules/.package-lock.json
$(NODE_MODULES): clients/typescript/package-lock.json
	@echo "npm ci in clients/typescript: the TypeScript client's dependencies and buf $(BUF_VERSION), from the lockfile"
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# buf comes prebuilt from the npm registry, as the TypeScript client's
# lockfile pins it (@bufbuild/buf, the same version as BUF_VERSION): compiling
# it from source would cost minutes of every clean CI run.
$(BIN)/buf: $(NODE_MODULES)
	@grep -q '"@bufbuild/buf": "$(BUF_VERSION:v%=%)"' clients/typescript/package.json || \
	  { echo "clients/typescript/package.json does not pin @bufbuild/buf $(BUF_VERSION:v%=%) (BUF_VERSION)"; exit 1; }
	mkdir -p $(BIN) && ln -sf $(CURDIR)/clients/typescript/node_modules/.bin/buf $(BIN)/buf

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-connect-go:
	GOBIN=$(BIN) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)

## tools: build the pinned tool binaries the tests start into ./bin, and
## install Debian's etcd 3.4 for the compatibility test.
tools: $(BIN)/versitygw debian-etcd $(BIN)/axe.min.js

# axe-core's browser build, which the console's browser tests inject into
# each page (internal/console, TestBrowser).
$(BIN)/axe.min.js:
	@mkdir -p $(BIN)/axe-tmp && cd $(BIN)/axe-tmp && npm pack --silent axe-core@$(AXE_CORE_VERSION) >/dev/null && \
	  tar -xzf axe-core-$(AXE_CORE_VERSION).tgz package/axe.min.js && mv package/axe.min.js $@ && cd .. && rm -rf axe-tmp

# progress.sh says what a long go step fetches and builds, at least every
# ten seconds (see the script).
PROGRESS := GO=$(GO) bash scripts/progress.sh

# The built versitygw is kept per version and Go toolchain in the user's
# cache directory (the Go build cache keeps its compiled packages, but not the
# linked program: linking it again costs half a minute in every fresh clone);
# ./bin/versitygw is a copy of it.
VERSITYGW_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cairn/versitygw-$(VERSITYGW_VERSION)-$(shell $(GO) env GOVERSION GOOS GOARCH | paste -sd-)

$(BIN)/versitygw:
	@if [ ! -x $(VERSITYGW_CACHE)/versitygw ]; then \
	  mkdir -p $(VERSITYGW_CACHE) && GOBIN=$(VERSITYGW_CACHE) $(PROGRESS) "building versitygw $(VERSITYGW_VERSION) into $(VERSITYGW_CACHE): the S3 server the integration suite, the cluster and the demo start (the first time, its modules are downloaded and it is compiled: minutes)" \
	    install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	fi
	@mkdir -p $(BIN) && cp $(VERSITYGW_CACHE)/versitygw $@.tmp && mv $@.tmp $@

# Debian's etcd-server package: etcd 3.4, the oldest server the integration
# suite checks the store against (TestConformanceOnDebianEtcd34).
DEBIAN_ETCD := /usr/bin/etcd

## debian-etcd: install Debian's etcd-server when it is missing. That needs
## root on Debian; anywhere else it says what to do, and the test that needs
## the server fails until then (it never skips).
debian-etcd:
	@if [ -x $(DEBIAN_ETCD) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's etcd-server (etcd 3.4) for the integration suite"; \
	  apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server; \
	else \
	  echo "make tools: $(DEBIAN_ETCD) is missing, and etcd-server can only be installed here as root on Debian."; \
	  echo "  Run: sudo apt-get install etcd-server   (or set CAIRN_DEBIAN_ETCD to an etcd 3.4 binary)."; \
	  echo "  Until then TestConformanceOnDebianEtcd34 in ./integration fails."; \
	fi

## unit: the race-enabled test suite.
unit: tools $(TESTSUM)
	@s=0; ( $(run-unit) ) || s=$$?; $(TESTSUM) -summary $(RESULTS)/unit.json; exit $$s

## fuzz: run each fuzz target briefly.
fuzz: $(TESTSUM)
	@s=0; ( $(run-fuzz) ) || s=$$?; $(TESTSUM) -summary $(RESULTS)/fuzz.json; exit $$s

## test-contended: the race-enabled tests of the packages that depend on
## timing, with CONTENDERS busy-loop processes (default 2, one per core of a
## 2-core machine) taking CPU beside them, as a loaded machine would.
CONTENDERS ?= 2
CONTENDED_PKGS ?= ./integration/... ./etcdstore/... ./sweep/... ./internal/sidecar/... ./conformance/...
test-contended: tools $(TESTSUM)
	@mkdir -p $(RESULTS) && rm -f $(RESULTS)/contended.json
	@s=0; CONTENDERS=$(CONTENDERS) bash scripts/contended.sh \
	  bash -c 'set -o pipefail; $(GO) test -race -count=1 -json -p $(UNITP) -timeout 40m $(CONTENDED_PKGS) 2>&1 | $(TESTSUM) -log $(RESULTS)/contended.json' || s=$$?; \
	  $(TESTSUM) -summary $(RESULTS)/contended.json; exit $$s

## integration: the integration suite alone: separate etcd processes, the
## fault campaign, etcd 3.4, TLS and authentication, the compose file. `make
## unit` runs it too.
integration: tools
	$(GO) test -race -count=1 -timeout 20m -v ./integration/...

## campaign: a longer fault campaign; DURATION is a Go duration, e.g.
## make campaign DURATION=30m
DURATION ?= 10m
campaign: tools
	CAIRN_CAMPAIGN=$(DURATION) $(GO) test -race -count=1 -timeout 0 -v -run '^(TestFaultCampaign|TestOnlineSweepDuringFaults)$$' ./integration/

## cluster: three etcd members and versitygw on loopback, the topology of
## docker-compose.yml as local processes; prints the endpoints and runs until
## Ctrl-C, which stops it (exit status 0). It needs versitygw only; the etcd
## members are built from this module.
## CLUSTER_ARGS=--regions starts the three-region test bed instead (round
## trips of 70, 140 and 100 ms between regions A, B and C).
CLUSTER_ARGS ?=
cluster: $(BIN)/versitygw
	@$(PROGRESS) "building the cluster program into ./bin/cluster" build -o $(BIN)/cluster ./integration/cmd/cluster
	@$(BIN)/cluster $(CLUSTER_ARGS)

## ts: the TypeScript client (clients/typescript): its dependencies from the
## lockfile (npm ci, when the lockfile is newer than node_modules), the
## generated code is fresh, tsc --noEmit, and its tests against a cairnd
## the tests build and start.
ts: $(NODE_MODULES)
	cd clients/typescript && npm run check

## test: everything CI checks: lint, the race-enabled tests, brief fuzzing,
## the TypeScript client; it ends with the tally of the Go tests and fuzz
## targets (the TypeScript runner prints its own counts before it).
test: lint tools $(TESTSUM)
	@mkdir -p $(RESULTS) && rm -f $(RESULTS)/unit.json $(RESULTS)/fuzz.json
	@echo "building the fuzzing test binaries at nice 19 beside the unit tests (log: $(RESULTS)/fuzz-build.log)"
	@FUZZWORK=$(FUZZWORK) GO=$(GO) nice -n 19 bash scripts/fuzz.sh build >$(RESULTS)/fuzz-build.log 2>&1 & fb=$$!; \
	  s=0; ( $(run-unit) ) || s=$$?; wait $$fb || true; \
	  if [ $$s = 0 ]; then ( export FUZZWORK=$(FUZZWORK); $(run-fuzz) ) && $(MAKE) --no-print-directory ts && $(MAKE) --no-print-directory bench-scale || s=$$?; fi; \
	  $(TESTSUM) -summary $(RESULTS)/unit.json $(RESULTS)/fuzz.json; exit $$s

## demo: the quickstart on an embedded etcd and a local S3 server (nothing
## outside this machine): capture a workspace into checkpoints on several
## threads, fork, keep the newest, sweep, and print the storage before and
## after. The S3 server is the in-process one `cairn dev` also runs (gofakes3),
## so the first run compiles one program; S3=versitygw runs the pinned
## versitygw process the integration tests use instead (built into ./bin).
S3 ?= gofakes3
demo: $(if $(filter versitygw,$(S3)),$(BIN)/versitygw)
	@$(PROGRESS) "building the demo into ./bin/cairn-demo (the first time this compiles an embedded etcd server and the S3 client and server)" \
	  build -o $(BIN)/cairn-demo ./cmd/cairn-demo
	@$(BIN)/cairn-demo -s3=$(S3)

## bench: cairn side by side with bare etcd and the bare S3 SDK, one table;
## QUICK=1 runs fewer rounds on smaller sizes (B1, B2 as full), BENCHFLAGS passes more flags
## (e.g. BENCHFLAGS="-only B1,B3 -cpuprofile /tmp/prof"). BENCH_MEMLIMIT is the Go runtime's soft
## memory limit for the bench process (GOMEMLIMIT): B16 at 10^5 kept checkpoints holds about 10 GiB
## in the harness, more than a 24 GiB host can give it without one; the collector then works harder
## (docs/performance.md, "Packed keys, and a sweeper process of its own").
BENCH_MEMLIMIT ?= 8GiB
bench: $(BIN)/versitygw
	$(GO) build -o $(BIN)/cairn-bench ./cmd/cairn-bench
	GOMEMLIMIT=$(BENCH_MEMLIMIT) $(BIN)/cairn-bench -v -versitygw $(BIN)/versitygw $(if $(QUICK),-quick) $(BENCHFLAGS)
	$(MAKE) ts-bench
	$(MAKE) bench-regions

## bench-scale: the incremental sweep's scale harness (rows B16 to B18,
## internal/bench/scale.go) as a test at SCALE_KEPT kept checkpoints (default
## 10,000, CI's size), without the race detector, under which 10^4 takes
## too long on two cores: it prints the figures and fails only on a
## correctness fact (the sweep deleted exactly the full walk's garbage, a
## restart read nothing, a compaction cost one range read), never on a time.
## make bench runs B16 at 10^4, 3·10^4 and 10^5 (cairn-bench -b16-kept).
SCALE_KEPT ?= 10000
bench-scale:
	$(GO) test -count=1 -timeout 20m -run '^TestScale$$' -v ./internal/bench/ -args -scale.kept=$(SCALE_KEPT)

## bench-regions: rows B12 to B15 (what each operation costs from each region)
## on the three-region test bed: TestRegions/Costs with SAMPLES samples a
## figure (the unit tests run it with 7); CONFORMANCE=1 then runs the
## contract's suites with local reads on a test bed of a tenth of the delays
## (TestRegionsConformance, several minutes).
SAMPLES ?= 31
bench-regions:
	$(GO) test -count=1 -timeout 30m -run 'TestRegions/(TestBed|Costs)$$' -v ./integration/ -args -regions.samples=$(SAMPLES) | \
	  grep -E '^\s+(regions_costs_test|regions_test).go|B1[2-5] |^(---|ok|FAIL|PASS)'
	$(if $(CONFORMANCE),$(GO) test -count=1 -timeout 60m -run 'TestRegionsConformance' ./integration/ -args -regions.conformance)

## ts-bench: B10 with its TypeScript row: the Go client's and the TypeScript
## client's append p50 (200 entries) through cairnd, side by side.
ts-bench: $(BIN)/versitygw $(NODE_MODULES)
	cd clients/typescript && npm run build
	$(GO) build -o $(BIN)/cairn-bench ./cmd/cairn-bench
	$(BIN)/cairn-bench -v -versitygw $(BIN)/versitygw -only B10 $(if $(QUICK),-quick) -b10-cmd "node clients/typescript/dist/bench/append.js"

## release: cairn, cairnd and sweeper for linux/amd64, linux/arm64 and
## darwin/arm64 (-trimpath, version and revision stamped; VERSION defaults to
## git describe), packed with SHA256SUMS into dist/VERSION (git ignores
## dist/); then the Dockerfile's images (IMAGE_REPO/cairnd, IMAGE_REPO/sweeper)
## when a docker daemon answers, else a message that they were skipped.
release:
	GO=$(GO) bash scripts/release.sh

clean:
	rm -rf $(BIN)
