// Package e2e holds the integration tests of nri-handover on a real
// containerd, driven through CRI as the kubelet drives it. They are behind
// the build tag "e2e", need Linux and root, and set up and tear down
// everything themselves (containerd, runc, an image, pods):
//
//	make test-e2e                       # or, by hand:
//	go test -tags e2e -count=1 -v -timeout 20m ./test/e2e/
//
// TestMain installs what is missing (containerd built with `go install` into
// a cache directory keyed by version, runc from Debian), starts a private
// containerd with NRI on its own socket under a temporary directory, imports
// a one-binary image, and tears it all down afterwards, also when a test
// fails, the run is interrupted, or the test timeout approaches. A run that
// was killed outright leaves a directory that the next run cleans up.
//
// Environment:
//
//	NRI_HANDOVER_E2E_CACHE       cache of built binaries (default ~/.cache/nri-handover/e2e)
//	NRI_HANDOVER_E2E_CONTAINERD  containerd version to build (default v2.2.9)
//	NRI_HANDOVER_E2E_KEEP=1      keep the temporary directory (logs, ledgers) after the run
//	NRI_HANDOVER_E2E_BENCH_OUT   file to write the benchmark's markdown table to
//	NRI_HANDOVER_E2E_BENCH_ROUNDS rounds of the latency benchmark (default 5)
//	NRI_HANDOVER_E2E_BENCHSTAT_OUT file to write every container's latency to, in Go's benchmark format (make bench-e2e)
//	NRI_HANDOVER_SKIP_E2E=1      make test-e2e skips the suite (run.sh)
//
// The harnessed plugins run with the race detector in the functional tests;
// the benchmark (TestLatencyBenchmark, docs/benchmarks.md) uses plain builds.
package e2e
