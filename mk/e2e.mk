# Integration tests on a real containerd through CRI: test/e2e (see doc.go).
# Needs Linux and root; elsewhere it says why it skips and succeeds.
TEST_EXTRA += test-e2e

.PHONY: test-e2e
## test-e2e: real containerd, real pods: upgrades under load, failures, stamps, latency.
test-e2e:
	@GO="$(GO)" bash test/e2e/run.sh

.PHONY: bench-e2e
## bench-e2e: the latency benchmark on a real containerd alone (CreateContainer+StartContainer: no plugin, bare stub, harness), BENCH_E2E_ROUNDS rounds; every container's latency in bench-e2e.out for benchstat (-col /plugin).
BENCH_E2E_ROUNDS ?= 5
bench-e2e:
	@NRI_HANDOVER_E2E_BENCH_ROUNDS=$(BENCH_E2E_ROUNDS) NRI_HANDOVER_E2E_BENCHSTAT_OUT=$(CURDIR)/bench-e2e.out \
		GO="$(GO)" bash test/e2e/run.sh -run '^TestLatencyBenchmark$$'
	@echo "results in bench-e2e.out; compare the harness and no plugin with the bare stub: go run golang.org/x/perf/cmd/benchstat@latest -col /plugin bench-e2e.out"
