//go:build k8s

package deploy_test

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// criOps are the CRI calls whose latency the report compares: what the
// kubelet asks containerd for each workload pod (NRI plugins sit in the
// sandbox and container ones).
var criOps = []string{"run_podsandbox", "create_container", "start_container", "stop_container", "remove_container",
	"stop_podsandbox", "remove_podsandbox"}

// criSample is the kubelet's cumulative CRI latency histogram
// (kubelet_runtime_operations_duration_seconds) at one moment: per
// operation, the count and the sum of durations in seconds.
type criSample map[string][2]float64

// criSample reads the kubelet's metrics through the API server's node
// proxy, trying for up to two minutes (a loaded node answers slowly).
func (c *cluster) criSample() (criSample, error) {
	var err error
	for try := 0; try < 4; try++ {
		var s criSample
		if s, err = c.criSampleOnce(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func (c *cluster) criSampleOnce() (criSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := c.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + nodeName + "/proxy/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kubelet metrics: %w", err)
	}
	const name = "kubelet_runtime_operations_duration_seconds_"
	out := criSample{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) {
			continue
		}
		kind, rest, ok := strings.Cut(l[len(name):], "{")
		if !ok || (kind != "sum" && kind != "count") {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		op := ""
		for _, kv := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "operation_type" {
				op = strings.Trim(v, `"`)
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if op == "" || err != nil {
			continue
		}
		e := out[op]
		if kind == "count" {
			e[0] = f
		} else {
			e[1] = f
		}
		out[op] = e
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kubelet metrics: no %s series", name)
	}
	return out, nil
}

// criWindow accumulates the CRI calls made between pairs of samples.
type criWindow map[string][2]float64

// add adds what happened between the samples from and to.
func (w criWindow) add(from, to criSample) {
	for op, b := range to {
		a := from[op]
		e := w[op]
		e[0] += b[0] - a[0]
		e[1] += b[1] - a[1]
		w[op] = e
	}
}

// mean returns the mean latency of op in the window and how many calls.
func (w criWindow) mean(op string) (time.Duration, int) {
	e := w[op]
	if e[0] <= 0 {
		return 0, 0
	}
	return time.Duration(e[1] / e[0] * float64(time.Second)), int(e[0])
}

// criTable is the report's table of CRI latency with no rollout against
// during the rollouts.
func criTable(base, during criWindow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| CRI call (kubelet -> containerd, mean) | no rollout | during rollouts |\n|---|---|---|\n")
	ops := criOps
	for _, op := range ops {
		m0, n0 := base.mean(op)
		m1, n1 := during.mean(op)
		fmt.Fprintf(&b, "| %s | %.1f ms (%d calls) | %.1f ms (%d calls) |\n", op,
			float64(m0)/float64(time.Millisecond), n0, float64(m1)/float64(time.Millisecond), n1)
	}
	return b.String()
}
