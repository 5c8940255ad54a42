package test

import (
	"context"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// catchUpAuthor adjusts every container it creates and reports the
// containers each of its Synchronize calls is handed.
type catchUpAuthor struct {
	version string
	synced  chan<- []string
}

func (a *catchUpAuthor) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("CATCHUP", a.version)
	return adj, nil, nil
}

func (a *catchUpAuthor) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	ids := []string{}
	for _, c := range ctrs {
		ids = append(ids, c.Id)
	}
	a.synced <- ids
	return nil, nil
}

// catchUp is the kit's author factory for catchUpAuthor.
func catchUp(synced chan<- []string) func(string) (interface{}, []plugin.Option) {
	return func(v string) (interface{}, []plugin.Option) {
		return &catchUpAuthor{version: v, synced: synced}, nil
	}
}

// TestPromotedOwnerCatchesUp: a container created while nobody acted (the
// owner was frozen, so the runtime went on without it, then the owner died)
// is not left unprocessed: its retired predecessor, promoted outside any
// Synchronize, replaces its runtime connection and the new connection's
// Synchronize hands the author that container.
func TestPromotedOwnerCatchesUp(t *testing.T) {
	synced := make(chan []string, 16)
	n, ctx := kitNode(t, "catchup", catchUp(synced), plugintest.RuntimeOptions{RequestTimeout: 300 * time.Millisecond})
	v1 := startOwner(t, ctx, n, "1.0.0")
	<-synced                             // v1's first Synchronize
	v2 := startOwner(t, ctx, n, "2.0.0") // v1 stays, retired: the fallback
	<-synced                             // v2's Synchronize, as it took over
	pod, err := n.Runtime().RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}

	v2.Freeze() // the runtime times out on it and creates the container without it
	orphan, err := n.Runtime().CreateContainer(ctx, pod.Id, "created-while-frozen", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := orphan.GetAnnotations()["stamp.nri-handover.io/catchup"]; ok {
		t.Fatal("the container was stamped although its owner was frozen")
	}
	v2.Crash()

	for {
		select {
		case ids := <-synced:
			if slices.Contains(ids, orphan.Id) {
				if v1.Plugin().Role() != handover.RoleOwner {
					t.Fatalf("v1 caught up as %v, want owner", v1.Plugin().Role())
				}
				// Caught up once: the next owner's author is not handed
				// it again (it still carries no stamp).
				startOwner(t, ctx, n, "3.0.0")
				if ids := lastSynced(synced); slices.Contains(ids, orphan.Id) {
					t.Fatalf("v3's Synchronize was handed %s again: %v", orphan.Id, ids)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("container %s, created while nobody acted, was never handed to the author", orphan.Id)
		}
	}
}

// lastSynced returns the containers of the last Synchronize reported.
func lastSynced(synced <-chan []string) []string {
	var last []string
	for {
		select {
		case ids := <-synced:
			last = ids
		default:
			return last
		}
	}
}

// TestUnstampedContainersHandedOnce: containers that existed before the
// plugin ran carry no stamp; the first owner's author is handed them in
// Synchronize, and no later owner's author is handed them again.
func TestUnstampedContainersHandedOnce(t *testing.T) {
	synced := make(chan []string, 16)
	n, ctx := kitNode(t, "catchup", catchUp(synced), plugintest.RuntimeOptions{})
	pod, err := n.Runtime().RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	before, err := n.Runtime().CreateContainer(ctx, pod.Id, "before-the-plugin", nil)
	if err != nil {
		t.Fatal(err)
	}
	startOwner(t, ctx, n, "1.0.0")
	if ids := <-synced; !slices.Contains(ids, before.Id) {
		t.Fatalf("v1's Synchronize was not handed %s: %v", before.Id, ids)
	}
	for _, v := range []string{"2.0.0", "3.0.0"} {
		startOwner(t, ctx, n, v)
		if ids := lastSynced(synced); ids == nil || slices.Contains(ids, before.Id) {
			t.Fatalf("%s's Synchronize: %v; want it called, without %s", v, ids, before.Id)
		}
	}
}

// testLog is where a plugintest node's instances log: stderr with -v.
func testLog(t *testing.T) io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return nil
}
