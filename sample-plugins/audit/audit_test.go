package audit

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

type records []string

func (r *records) Record(event, id string) error { *r = append(*r, event+" "+id); return nil }

// TestCreateContainerSkipsPluginPods: a workload container gets the
// variable; a container of a pod labelled as an NRI plugin's does not, and
// both events are recorded.
func TestCreateContainerSkipsPluginPods(t *testing.T) {
	rec := &records{}
	p := &Plugin{Version: "1.2.3", Recorder: rec}
	for _, tc := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"app": "web"}, 1},
		{map[string]string{PluginPodLabel: PluginPodValue, "app.kubernetes.io/name": "nri-audit"}, 0},
	} {
		adj, _, err := p.CreateContainer(context.Background(), &api.PodSandbox{Labels: tc.labels}, &api.Container{Id: "c"})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, kv := range adj.GetEnv() {
			if kv.GetKey() == EnvVar && kv.GetValue() == "1.2.3" {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("pod labels %v: %s set %d times, want %d", tc.labels, EnvVar, n, tc.want)
		}
	}
	if len(*rec) != 2 {
		t.Errorf("records %v, want both CreateContainer events", *rec)
	}
}
