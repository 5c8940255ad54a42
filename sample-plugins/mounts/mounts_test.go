package mounts_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/sample-plugins/mounts"
)

func injector() *mounts.Injector {
	l := logrus.New()
	l.SetOutput(testutil.Discard)
	return &mounts.Injector{Log: logrus.NewEntry(l)}
}

// TestUpgrade: across an upgrade each annotated container gets its mount
// exactly once (a second injection of the same destination would be
// refused by the runtime), and an unannotated one none.
func TestUpgrade(t *testing.T) {
	rt := testutil.StartRuntime(t, sim.Options{})
	root := testutil.ShortTempDir(t, "nhm-")
	ann := map[string]string{mounts.AnnotationPrefix + "app": "/var/lib/shared:/data:ro"}
	check := func(prefix string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			pod, err := rt.RunPodAnnotated(context.Background(), fmt.Sprintf("%s%d", prefix, i), ann)
			if err != nil {
				t.Fatal(err)
			}
			app, err := rt.CreateContainer(context.Background(), pod.Id, "app", nil)
			if err != nil {
				t.Fatal(err)
			}
			side, err := rt.CreateContainer(context.Background(), pod.Id, "sidecar", nil)
			if err != nil {
				t.Fatal(err)
			}
			if m := rt.Container(app.Id).GetMounts(); len(m) != 1 || m[0].Destination != "/data" {
				t.Errorf("%s: mounts %v, want /data once", app.Id, m)
			}
			if m := rt.Container(side.Id).GetMounts(); len(m) != 0 {
				t.Errorf("%s (not annotated): mounts %v", side.Id, m)
			}
		}
	}
	_, v1 := testutil.StartOwner(t, rt, root, "mounts", "v1", "1.0.0", injector())
	check("a")
	testutil.StartOwner(t, rt, root, "mounts", "v2", "2.0.0", injector())
	if err := v1.Stop(); err != nil {
		t.Fatal(err)
	}
	check("b")
}

func TestParse(t *testing.T) {
	m, err := mounts.Parse("/a:/b, /c:/d:ro")
	if err != nil || len(m) != 2 || m[1].Source != "/c" || m[1].Options[len(m[1].Options)-1] != "ro" {
		t.Fatalf("Parse: %v %v", m, err)
	}
	for _, bad := range []string{"", "/a", "/a:/b:rw", ":/b"} {
		if _, err := mounts.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
