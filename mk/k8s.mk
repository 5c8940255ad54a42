# A one-node Kubernetes cluster of real components (kube-apiserver,
# controller-manager, scheduler, kubelet built from k8s.io/kubernetes,
# Debian's etcd) on a containerd of its own: the shipped manifests and chart
# rolled out under a workload (deploy/k8s_*_test.go, see README.md).
# Needs Linux and root; elsewhere it says why it skips and succeeds.
# Warm it takes 6 to 8 minutes on 2 cores (the Kubernetes build adds
# about 8.5 cold); three full runs in a row were green on 2026-12-04 with
# the workload's rate asserted (>= 2 pods/s per rollout; docs/benchmarks.md).
TEST_EXTRA += test-k8s

.PHONY: test-k8s
## test-k8s: the shipped DaemonSet and chart on a real node: rollouts, seeds 000 and 002.
test-k8s:
	@GO="$(GO)" bash test/k8s/run.sh
