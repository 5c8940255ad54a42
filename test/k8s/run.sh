#!/usr/bin/env bash
# Runs the Kubernetes node suite (deploy/k8s_*_test.go, build tag k8s): a
# one-node cluster of real components on a containerd of its own, the
# shipped DaemonSet and chart rolled out by the real DaemonSet controller
# under a workload, and the seeds' two failures replayed. Needs Linux and
# root; elsewhere it says plainly why it skips and exits 0. Extra
# arguments go to `go test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}

skip() { echo "test-k8s: SKIPPED: $*"; exit 0; }
[ -z "${NRI_HANDOVER_SKIP_K8S:-}" ] || skip "NRI_HANDOVER_SKIP_K8S is set"
[ "$(uname -s)" = Linux ] || skip "needs Linux (this is $(uname -s))"
[ "$(id -u)" = 0 ] || skip "needs root to run containerd and the kubelet (running as $(id -un))"
[ -d /sys/fs/cgroup ] || skip "no cgroup file system at /sys/fs/cgroup"

echo "test-k8s: a one-node Kubernetes cluster on a real containerd (deploy/k8s_*_test.go)"
echo "test-k8s: the first run builds Kubernetes ${K8S_VERSION:-v1.36.3} from the module proxy (about 8.5 minutes on 2 cores), containerd and the CNI plugins"
# Build the components first, outside the test's timeout.
GO="$GO" bash test/k8s/build-k8s.sh >/dev/null
cd deploy
"$GO" vet -tags k8s .
# The steps wait on conditions, each with a bound of its own; on an idle
# 2-core machine they take about 9 minutes. The overall timeout leaves room
# for a machine that other jobs load (pods then take tens of seconds to
# start); TestMain tears the node down 45 s before it expires.
exec "$GO" test -tags k8s -count=1 -v -run "${K8S_RUN:-TestKubernetesNode}" -timeout "${K8S_TIMEOUT:-30m}" . "$@"
