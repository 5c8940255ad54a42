#!/usr/bin/env bash
# Runs the integration tests on a real containerd (test/e2e, see doc.go there)
# when this machine can: Linux, as root. Otherwise it says plainly why it
# skips and exits 0. Extra arguments go to `go test` (e.g. -run TestOnePlugin).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}

skip() { echo "test-e2e: SKIPPED: $*"; exit 0; }
[ -z "${NRI_HANDOVER_SKIP_E2E:-}" ] || skip "NRI_HANDOVER_SKIP_E2E is set"
[ "$(uname -s)" = Linux ] || skip "needs Linux (this is $(uname -s))"
[ "$(id -u)" = 0 ] || skip "needs root to run containerd (running as $(id -un))"
[ -d /sys/fs/cgroup ] || skip "no cgroup file system at /sys/fs/cgroup"

echo "test-e2e: integration tests on a real containerd through CRI (test/e2e)"
echo "test-e2e: the first run builds containerd with go install (2-3 minutes on 2 cores) and installs runc if missing"
exec "$GO" test -tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-20m}" ./test/e2e/ "$@"
