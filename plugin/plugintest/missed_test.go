package plugintest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// waitHanded waits until the node's catch-ups handed container id.
func waitHanded(t *testing.T, n *Node, id string) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, cu := range n.CatchUps() {
			if cu.ID == id {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s was never handed to an author (catch-ups %v)", id, n.CatchUps())
		}
		<-tick.C
	}
}

// A container created while the only instance synchronizes (after the
// runtime listed the containers for its Synchronize, before the append:
// containerd issue 13698, cri-o issue 10090) reaches nobody and is listed
// to nobody. The owner then acts on its StopContainer: that later event of
// an unstamped container no instance processed is a missed creation, and
// the owner hands it to the author as unprocessed, once (its removal
// afterwards hands nothing more).
func TestMissedCreationHandedOnce(t *testing.T) {
	n := newNode(t, Config{Runtime: RuntimeOptions{Mode: ModeCRIO}})
	rt := n.Runtime()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	pod, err := rt.RunPod(ctx, "pod") // no instance yet: reaches nobody
	if err != nil {
		t.Fatal(err)
	}
	type made struct {
		c   *api.Container
		err error
	}
	late := make(chan made, 1)
	var once sync.Once
	rt.mu.Lock()
	rt.afterSync = func() {
		once.Do(func() {
			c, err := rt.CreateContainer(context.Background(), pod.Id, "late", nil)
			late <- made{c, err}
		})
	}
	rt.mu.Unlock()
	start(t, n, "1.0.0")
	var m made
	select {
	case m = <-late:
	case <-ctx.Done():
		t.Fatal("no container was created inside the sync callback")
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	waitPlugins(t, rt, 1)
	if err := rt.StopContainer(ctx, m.c.Id); err != nil {
		t.Fatal(err)
	}
	waitHanded(t, n, m.c.Id)
	if err := rt.RemoveContainer(ctx, m.c.Id); err != nil {
		t.Fatal(err)
	}
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if res.Unstamped != 1 || res.CaughtUp != 1 || res.UnprocessedCount != 0 || len(res.HandedTwice) != 0 {
		t.Fatalf("unstamped %d, caught up %d, unprocessed %v, handed twice %v; want 1, 1, none, none",
			res.Unstamped, res.CaughtUp, res.Unprocessed, res.HandedTwice)
	}
}
