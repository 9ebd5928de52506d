# cairn: make targets. `make test` is the command CI runs.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned versions of the tools the tests start.
VERSITYGW_VERSION := v1.8.0

FUZZTIME ?= 10s

.PHONY: all test unit lint fuzz tools demo bench clean

all: lint test

## lint: gofmt and go vet must be clean.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## tools: build the pinned tool binaries the tests start into ./bin.
tools: $(BIN)/versitygw

$(BIN)/versitygw:
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

## unit: the race-enabled test suite.
unit: tools
	$(GO) test -race -count=1 -timeout 30m ./...

## fuzz: run each fuzz target briefly.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg; \
	  done; \
	done

## test: everything CI checks: lint, the race-enabled tests, brief fuzzing.
test: lint unit fuzz

## demo: the quickstart on an embedded etcd and a local S3 server (versitygw
## from ./bin; nothing outside this machine): capture a workspace into
## checkpoints on several threads, fork, keep the newest, sweep, and print the
## storage before and after.
demo: tools
	$(GO) run ./cmd/cairn-demo

## bench: cairn side by side with bare etcd and the bare S3 SDK, one table;
## QUICK=1 runs fewer rounds on smaller sizes, BENCHFLAGS passes more flags
## (e.g. BENCHFLAGS="-only B1,B3 -cpuprofile /tmp/prof").
bench: tools
	$(GO) build -o $(BIN)/cairn-bench ./cmd/cairn-bench
	$(BIN)/cairn-bench -v -versitygw $(BIN)/versitygw $(if $(QUICK),-quick) $(BENCHFLAGS)

clean:
	rm -rf $(BIN)
