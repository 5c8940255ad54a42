package plugintest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/plugin"
)

// stopper is an author plugin with two handlers and a Configure that
// narrows its subscription to one of them.
type stopper struct{ narrow bool }

func (s *stopper) Configure(context.Context, string, string, string) (api.EventMask, error) {
	if !s.narrow {
		return 0, nil
	}
	var m api.EventMask
	m.Set(api.Event_STOP_CONTAINER)
	return m, nil
}

func (*stopper) StopContainer(context.Context, *api.PodSandbox, *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (*stopper) RunPodSandbox(context.Context, *api.PodSandbox) error { return nil }

func newNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	if cfg.Plugin == nil {
		cfg.Plugin = func(string) (interface{}, []plugin.Option) { return &stopper{}, nil }
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func start(t *testing.T, n *Node, version string) *Instance {
	t.Helper()
	in, err := n.Start(version)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := in.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	return in
}

func lifecycles(t *testing.T, n *Node, pods int) {
	t.Helper()
	if err := n.Lifecycles(context.Background(), pods, 2); err != nil {
		t.Fatal(err)
	}
}

// status asks an instance's handover service for its status, within d.
func status(in *Instance, d time.Duration) (*hapi.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cl, err := protocol.Dial(ctx, in.socket)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Status(ctx, &hapi.StatusRequest{})
}

// The kit subscribes as the author's plugin would and compares only those
// events; it sees what reached the handlers, and what did not.
func TestNodeLedgerFollowsTheAuthorsSubscription(t *testing.T) {
	for _, narrow := range []bool{false, true} {
		n := newNode(t, Config{Plugin: func(string) (interface{}, []plugin.Option) { return &stopper{narrow: narrow}, nil }})
		start(t, n, "1.0.0")
		lifecycles(t, n, 2)
		res, err := n.Check()
		if err != nil {
			t.Fatal(err)
		}
		// 2 pods of 2 containers: 4 creates, 4 stops, and 2 pods run
		// unless Configure narrowed the subscription to stops.
		want := 10
		if narrow {
			want = 8
		}
		if !res.OK() || res.Events.Events != want || res.Events.Acted != want {
			t.Fatalf("narrow %v: %v; want %d events acted on once", narrow, res.Err(), want)
		}
	}
}

// The ledger catches a duplicate: the same event acted on by two
// instances (here recorded by hand, as a broken harness would).
func TestNodeCheckFindsDuplicatesAndMisses(t *testing.T) {
	n := newNode(t, Config{})
	start(t, n, "1.0.0")
	lifecycles(t, n, 1)
	log := n.Runtime().IssuedLog()
	n.Ledger().Record(log[0].Event, log[0].ID, "intruder", "9.9.9")
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || res.Events.Duplicates != 1 || res.Events.Missed != 0 {
		t.Fatalf("got %v, want exactly one duplicate", res.Events)
	}
}

// Crash: the instance's runtime connection and handover socket close
// without a handover (it never retires), and its predecessor takes over.
func TestInstanceCrash(t *testing.T) {
	n := newNode(t, Config{})
	v1 := start(t, n, "1.0.0")
	v2 := start(t, n, "2.0.0")
	lifecycles(t, n, 2)

	v2.Crash()
	if v2.Running() {
		t.Fatal("Run did not return")
	}
	if role := v2.Plugin().Role(); role != handover.RoleOwner {
		t.Fatalf("crashed owner's role %v: it left (a clean stop retires)", role)
	}
	if _, err := status(v2, failAfter); !errors.Is(err, protocol.ErrNoInstance) {
		t.Fatalf("crashed instance's handover socket: %v, want ErrNoInstance", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := v1.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	lifecycles(t, n, 2)
	if err := n.Verify(); err != nil {
		t.Fatal(err)
	}
}

// Freeze: neither the runtime nor the peers get an answer; the runtime
// drops the instance after its request timeout; after Thaw it reconnects.
func TestInstanceFreeze(t *testing.T) {
	n := newNode(t, Config{Runtime: RuntimeOptions{RequestTimeout: 200 * time.Millisecond}})
	rt := n.Runtime()
	v1 := start(t, n, "1.0.0")
	waitPlugins(t, rt, 1)

	v1.Freeze()
	if _, err := status(v1, 100*time.Millisecond); err == nil {
		t.Fatal("a frozen instance's handover service answered")
	}
	lifecycles(t, n, 1) // its first event waits out the request timeout
	waitPlugins(t, rt, 0)
	if st := rt.Stats(); st.Timeouts["10-plugintest"] == 0 {
		t.Fatalf("no request to the frozen instance timed out: %+v", st.PluginErrorTexts)
	}

	v1.Thaw()
	waitPlugins(t, rt, 1)
	if _, err := status(v1, failAfter); err != nil {
		t.Fatalf("thawed instance's handover service: %v", err)
	}
	if d := v1.Plugin().Stats().Disconnects; d == 0 {
		t.Fatal("the thawed instance never saw its connection dropped")
	}
}

func TestNodeUpgradeAndRollbackStopThePreviousOwner(t *testing.T) {
	n := newNode(t, Config{})
	v1 := start(t, n, "1.0.0")
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	v2, err := n.Upgrade(ctx, "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if v1.Running() || n.Owner() != v2 {
		t.Fatalf("after the upgrade: v1 running %v, owner %v", v1.Running(), n.Owner())
	}
	v3, err := n.Rollback(ctx, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if v2.Running() || n.Owner() != v3 || v3.ID() != "i02-v1.0.0" {
		t.Fatalf("after the rollback: v2 running %v, owner %v (%s)", v2.Running(), n.Owner(), v3.ID())
	}
	if _, err := NewNode(Config{}); err == nil {
		t.Fatal("NewNode without a constructor")
	}
}

// Containers created while no instance serves the plugin carry no stamp:
// Check counts each of them.
func TestNodeCheckCountsUnstampedContainers(t *testing.T) {
	n := newNode(t, Config{})
	v1 := start(t, n, "1.0.0")
	lifecycles(t, n, 1)
	if err := v1.Stop(); err != nil {
		t.Fatal(err)
	}
	lifecycles(t, n, 3) // 6 containers nobody sees
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if res.Unstamped != 6 || len(res.StampProblems) != 6 || res.Events.Missed == 0 {
		t.Fatalf("unstamped %d, problems %v, missed %d; want 6, 6, > 0", res.Unstamped, res.StampProblems, res.Events.Missed)
	}
	// No instance was connected while they lived: none could be handed.
	if res.Unseen != 6 || res.CaughtUp != 0 || res.UnprocessedCount != 0 {
		t.Fatalf("unseen %d, caught up %d, unprocessed %v; want 6, 0, none", res.Unseen, res.CaughtUp, res.Unprocessed)
	}

	// One created and left running while no instance is connected: the
	// next owner's author is handed it at its Synchronize, once.
	ctx := context.Background()
	pod, err := n.Runtime().RunPod(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Runtime().CreateContainer(ctx, pod.Id, "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Runtime().StartContainer(ctx, c.Id); err != nil {
		t.Fatal(err)
	}
	start(t, n, "2.0.0")
	res, err = n.Check()
	if err != nil {
		t.Fatal(err)
	}
	cu := n.CatchUps()
	if len(cu) != 1 || cu[0].ID != c.Id || cu[0].Instance != "i01-v2.0.0" {
		t.Fatalf("catch-ups %+v, want %s handed to i01-v2.0.0", cu, c.Id)
	}
	if res.Unstamped != 7 || res.Unseen != 6 || res.CaughtUp != 1 || res.UnprocessedCount != 0 || len(res.HandedTwice) != 0 {
		t.Fatalf("unstamped %d, unseen %d, caught up %d, unprocessed %v, handed twice %v; want 7, 6, 1, none, none",
			res.Unstamped, res.Unseen, res.CaughtUp, res.Unprocessed, res.HandedTwice)
	}
	if s := n.Runtime().Syncs(); len(s) == 0 || !s[len(s)-1].OK || len(s[len(s)-1].Containers) != 1 || s[len(s)-1].Containers[0] != c.Id {
		t.Fatalf("syncs %+v, want the last to list %s", s, c.Id)
	}
}

// A newcomer whose owner is frozen gets no answer to its request to
// yield, and takes over as from an unresponsive owner.
func TestNewcomerTakesOverFromAFrozenOwner(t *testing.T) {
	n := newNode(t, Config{})
	v1 := start(t, n, "1.0.0")
	v1.Freeze()
	v2 := start(t, n, "2.0.0")
	if st := v2.Plugin().Status(); !strings.Contains(st.Reason, "unresponsive") {
		t.Fatalf("newcomer owns with reason %q, want the owner unresponsive", st.Reason)
	}
	v1.Thaw()
}
