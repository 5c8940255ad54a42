package plugin_test

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// noop is an author that handles container creations.
type noop struct{}

func (noop) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

// TestThawedInstanceReconnectsAtOnce: an instance the runtime dropped after
// its connection had worked (frozen past the request timeout) reconnects
// at once, not after the backoff: while no instance is in the runtime's
// chain every event reaches nobody. The backoff's first step is made an
// hour here, so the test fails (at its bound) if the reconnect waits it.
func TestThawedInstanceReconnectsAtOnce(t *testing.T) {
	defer plugin.SetReconnectMin(time.Hour)()
	n, err := plugintest.NewNode(plugintest.Config{
		Plugin: func(string) (interface{}, []plugin.Option) {
			return noop{}, []plugin.Option{plugin.WithLeaveTimeout(100 * time.Millisecond)}
		},
		Runtime: plugintest.RuntimeOptions{RequestTimeout: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := n.Start("1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := in.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	rt := n.Runtime()
	if err := rt.WaitPlugins(ctx, 1); err != nil {
		t.Fatal(err)
	}
	in.Freeze()
	if err := rt.Lifecycle(ctx, "frozen", 1); err != nil { // its first event waits out the request timeout
		t.Fatal(err)
	}
	if err := rt.WaitPlugins(ctx, 0); err != nil {
		t.Fatal(err)
	}
	in.Thaw()
	back, bcancel := context.WithTimeout(ctx, 10*time.Second)
	defer bcancel()
	if err := rt.WaitPlugins(back, 1); err != nil {
		t.Fatalf("the thawed instance was not back in the runtime's chain within 10 s (it waited its backoff): %v", err)
	}
	if d := in.Plugin().Stats().Disconnects; d == 0 {
		t.Fatal("the thawed instance never saw its connection dropped")
	}
}
