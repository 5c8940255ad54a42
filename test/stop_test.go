package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// steadyLoad runs pod life cycles on the node's runtime until the returned
// function is called; that function waits for the last one to finish.
func (n *node) steadyLoad() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			if err := n.rt.Lifecycle(context.Background(), fmt.Sprintf("load%d", i), 2); err != nil {
				n.t.Error(err)
				return
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// TestStoppingOwnerWaitsForSuccessor: an owner asked to stop with no
// standby running (its pod deleted; the DaemonSet re-creates it a moment
// later) keeps acting and hands over to the instance that starts next,
// instead of leaving the node without an owner: every event of a steady
// load is acted on exactly once, across the stop.
func TestStoppingOwnerWaitsForSuccessor(t *testing.T) {
	n := newNode(t)
	v1 := n.start("a-v1", "1.0.0")
	waitReady(t, v1)
	stopLoad := n.steadyLoad()

	stopped := make(chan error, 1)
	go func() { stopped <- v1.run.Stop() }()
	testutil.WaitStatus(t, v1.p, "v1 leaving", func(st handover.Status) bool { return st.Leaving })
	if v1.p.Role() != handover.RoleOwner {
		t.Fatalf("a stopping owner with no successor yet is %s, want it to keep owning", v1.p.Role())
	}
	// Events while it waits: only v1 runs, so the ledger check at the end
	// (nothing missed) means v1 acted on them.
	if err := n.rt.Lifecycle(context.Background(), "while-leaving", 2); err != nil {
		t.Fatal(err)
	}

	v2 := n.start("b-v1", "1.0.0") // the re-created pod
	if err := <-stopped; err != nil {
		t.Fatalf("v1's Run: %v", err)
	}
	waitReady(t, v2)
	if h := v1.p.Status().LastHandover; h == nil || h.ToID != "b-v1" {
		t.Fatalf("v1's last handover %v, want to b-v1", h)
	}
	stopLoad()
	rep := n.check()
	if rep.ByInstance["a-v1"] == 0 || rep.ByInstance["b-v1"] == 0 {
		t.Fatalf("acts by instance %v: want both", rep.ByInstance)
	}
}

// stuckStart is the audit plugin whose StartContainer never returns (until
// the test ends).
type stuckStart struct {
	*audit.Plugin
	entered chan struct{}
	release chan struct{}
}

func (s *stuckStart) StartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return nil
}

// TestStuckHandlerDoesNotBlockStop: an author handler that never returns
// (the runtime drops the instance after its request timeout) does not keep
// Run from returning once it is asked to stop: Run returns within the leave
// timeout, as a bare stub's Stop does.
func TestStuckHandlerDoesNotBlockStop(t *testing.T) {
	n := newNode(t)
	author := &stuckStart{Plugin: n.auditPlugin("a-v1", "1.0.0"), entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(author.release) })
	const leave = time.Second
	v1 := n.startAuthor("a-v1", "1.0.0", author, plugin.WithLeaveTimeout(leave))
	waitRole(t, v1, handover.RoleOwner)
	go func() { _ = n.rt.Lifecycle(context.Background(), "stuck", 1) }() // ends once the runtime drops v1
	<-author.entered

	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- v1.run.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("Run returned %v after the stop, with a handler still stuck", time.Since(start).Round(time.Millisecond))
	case <-time.After(leave + 5*time.Second):
		t.Fatalf("Run has not returned %v after the stop (leave timeout %v): a stuck handler blocks it", time.Since(start), leave)
	}
}

// TestFallbackTakesBackFromALeavingSuccessor: v2 took over from v1, which
// stayed as its live fallback; v2 is stopped (its pod deleted, or the
// duplicate DaemonSet removed: seed 002). v1 claims back in a new
// Synchronize while v2 still acts, instead of waiting for v2's leave
// timeout to run out: v2 hands over to v1, and every event of a steady
// load is acted on exactly once.
func TestFallbackTakesBackFromALeavingSuccessor(t *testing.T) {
	n := newNode(t)
	v1 := n.start("a-v1", "1.0.0")
	waitReady(t, v1)
	stopLoad := n.steadyLoad()
	v2 := n.start("b-v2", "2.0.0", plugin.WithLeaveTimeout(time.Minute))
	waitReady(t, v2)
	if err := v2.run.Stop(); err != nil {
		t.Fatalf("v2's Run: %v", err)
	}
	if h := v2.p.Status().LastHandover; h == nil || h.ToID != "a-v1" {
		t.Fatalf("v2 stopped with last handover %+v, want one to a-v1 (not its leave timeout)", h)
	}
	waitReady(t, v1)
	if err := n.rt.Lifecycle(context.Background(), "after", 2); err != nil {
		t.Fatal(err)
	}
	stopLoad()
	rep := n.check()
	if rep.ByInstance["a-v1"] == 0 || rep.ByInstance["b-v2"] == 0 {
		t.Fatalf("acts by instance %v: want both", rep.ByInstance)
	}
}

// ctxWatcher is the audit plugin that counts the CreateContainer requests
// whose context had already ended when the handler ran.
type ctxWatcher struct {
	*audit.Plugin
	ended atomic.Int32
}

func (w *ctxWatcher) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if ctx.Err() != nil {
		w.ended.Add(1)
	}
	return w.Plugin.CreateContainer(ctx, pod, ctr)
}

// TestLeavingOwnerHandlersGetALiveContext: an owner asked to stop keeps
// acting until its successor does, and its handlers get contexts that have
// not ended: Run's context ending is the request to leave, not the end of
// the requests the owner still serves.
func TestLeavingOwnerHandlersGetALiveContext(t *testing.T) {
	n := newNode(t)
	author := &ctxWatcher{Plugin: n.auditPlugin("a-v1", "1.0.0")}
	v1 := n.startAuthor("a-v1", "1.0.0", author)
	waitReady(t, v1)
	stopped := make(chan error, 1)
	go func() { stopped <- v1.run.Stop() }()
	testutil.WaitStatus(t, v1.p, "v1 leaving", func(st handover.Status) bool { return st.Leaving })
	if err := n.rt.Lifecycle(context.Background(), "while-leaving", 2); err != nil {
		t.Fatal(err)
	}
	if got := author.ended.Load(); got != 0 {
		t.Errorf("%d CreateContainer requests to the leaving owner had an ended context", got)
	}
	v2 := n.start("b-v1", "1.0.0")
	if err := <-stopped; err != nil {
		t.Fatalf("v1's Run: %v", err)
	}
	waitReady(t, v2)
	if rep := n.check(); rep.ByInstance["a-v1"] == 0 {
		t.Fatalf("acts by instance %v: v1 acted on nothing while leaving", rep.ByInstance)
	}
}
