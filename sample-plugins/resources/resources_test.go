package resources_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/sample-plugins/resources"
)

func defaults(shares uint64) *resources.Defaults {
	l := logrus.New()
	l.SetOutput(testutil.Discard)
	return &resources.Defaults{MemoryLimit: 64 << 20, CPUShares: shares, Log: logrus.NewEntry(l)}
}

// TestUpgrade: v1 (512 shares) adjusts the containers created before the
// upgrade, v2 (1024) those after; none is refused (two instances adjusting
// one container would be "both tried to set") and each has its owner's values.
func TestUpgrade(t *testing.T) {
	rt := testutil.StartRuntime(t, sim.Options{})
	root := testutil.ShortTempDir(t, "nhr-")
	create := func(prefix string) (ids []string) {
		for i := 0; i < 3; i++ {
			pod, err := rt.RunPod(context.Background(), fmt.Sprintf("%s%d", prefix, i))
			if err != nil {
				t.Fatal(err)
			}
			c, err := rt.CreateContainer(context.Background(), pod.Id, "app", nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, c.Id)
		}
		return ids
	}
	_, v1 := testutil.StartOwner(t, rt, root, "resources", "v1", "1.0.0", defaults(512))
	before := create("a")
	testutil.StartOwner(t, rt, root, "resources", "v2", "2.0.0", defaults(1024))
	if err := v1.Stop(); err != nil {
		t.Fatal(err)
	}
	after := create("b")
	for want, ids := range map[uint64][]string{512: before, 1024: after} {
		for _, id := range ids {
			res := rt.Container(id).GetLinux().GetResources()
			if res.GetCpu().GetShares().GetValue() != want || res.GetMemory().GetLimit().GetValue() != 64<<20 {
				t.Errorf("%s: shares %d, memory %d; want %d and 64 MiB", id, res.GetCpu().GetShares().GetValue(),
					res.GetMemory().GetLimit().GetValue(), want)
			}
		}
	}
	if st := rt.Stats(); st.FailedCreates != 0 {
		t.Errorf("refused creations: %v", st.CreateErrors)
	}
}
