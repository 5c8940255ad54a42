# nri-handover — see README.md. Every target works on a fresh clone.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 300x
BENCHCOUNT ?= 6

.PHONY: all build demo test test-race vet lint bench proto proto-check clean

# Larger parts (model checking, real-containerd tests, deployment checks)
# bring their own targets and add themselves to TEST_EXTRA.
TEST_EXTRA :=
-include mk/*.mk

all: build test

# The samples that port a stub plugin (README): each built on the harness
# and on the bare NRI stub (nri-NAME-bare), from the same source.
SAMPLES := logger resources mounts validator

build:
	$(GO) build $(PKGS)
	$(GO) build -o bin/ ./cmd/nri-handover ./sample-plugins/audit/cmd/nri-audit \
		$(foreach s,$(SAMPLES),./sample-plugins/$(s)/cmd/nri-$(s) ./sample-plugins/$(s)/cmd/nri-$(s)-bare)

## demo: in-process NRI runtime, sample plugin upgraded v1 -> v2 and rolled back under load.
demo:
	$(GO) run ./cmd/nri-handover demo

## test: vet, then every test with the race detector (the command CI runs),
## then the tests that drive an upstream race on purpose without it
## (files built with !race: see plugin/quietstop_test.go).
NORACE_TESTS := '^(TestQuietStopGivesUpWhileTheRuntimeRegistersNothing|TestMissedCreationOfAKilledOwnerIsHandedByTheNext)$$'
test: vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(GO) test -count=1 -run $(NORACE_TESTS) ./plugin/ ./plugin/plugintest/
	@for t in $(TEST_EXTRA); do $(MAKE) --no-print-directory $$t || exit 1; done

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || \
		{ echo "gofmt needed on:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

lint: vet proto-check

## bench: Go benchmarks (test/bench and the packages' own); compare runs with benchstat.
# The memory benchmarks start an instance against 10,000 containers per op:
# they run once per count (-benchtime 1x), after the others. A storm op is a
# whole rollout of 3,000 events: STORMTIME ops per count.
BENCH_MEMORY := ^Benchmark(Memory|RSS)$$
BENCH_STORM  := ^BenchmarkStorm$$
STORMTIME    ?= 5x
bench:
	$(GO) test -run '^$$' -bench . -skip '$(BENCH_MEMORY)|$(BENCH_STORM)' -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) $(PKGS) | tee bench.out
	$(GO) test -run '^$$' -bench '$(BENCH_STORM)' -benchmem -count $(BENCHCOUNT) -benchtime $(STORMTIME) ./test/bench | tee -a bench.out
	$(GO) test -run '^$$' -bench '$(BENCH_MEMORY)' -benchmem -count $(BENCHCOUNT) -benchtime 1x ./test/bench | tee -a bench.out
	@echo "results in bench.out; compare two runs with: go run golang.org/x/perf/cmd/benchstat@latest old.out bench.out"

## proto: regenerate internal/protocol/api from handover.proto (needs protoc: apt-get install protobuf-compiler).
proto:
	protoc --proto_path=internal/protocol/api \
		--plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" \
		--go_out=. --go_opt=module=github.com/nri-handover/nri-handover \
		--plugin=protoc-gen-go-ttrpc="$$($(GO) tool -n protoc-gen-go-ttrpc)" \
		--go-ttrpc_out=. --go-ttrpc_opt=module=github.com/nri-handover/nri-handover \
		internal/protocol/api/handover.proto

## proto-check: fail if the committed generated code is stale.
proto-check:
	@if command -v protoc >/dev/null; then $(MAKE) -s proto && git diff --exit-code internal/protocol/api; \
	else echo "protoc not installed; skipping proto-check"; fi

clean:
	rm -rf bin
