# Integration tests on a real containerd through CRI: test/e2e (see doc.go).
# Needs Linux and root; elsewhere it says why it skips and succeeds.
TEST_EXTRA += test-e2e

.PHONY: test-e2e
## test-e2e: real containerd, real pods: upgrades under load, failures, stamps, latency.
test-e2e:
	@GO="$(GO)" bash test/e2e/run.sh
