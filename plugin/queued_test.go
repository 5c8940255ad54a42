package plugin_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// syncBuffer is a log sink safe for the instances' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ownerWatch asks the owner name who answers as owner, as the Kubernetes
// suite's monitor does (deploy/k8s_observe_test.go), every millisecond,
// and keeps the longest time in which nobody did.
type ownerWatch struct {
	mu      sync.Mutex
	longest time.Duration
	since   time.Time // start of the current time without an answering owner
	stop    chan struct{}
	done    chan struct{}
}

func watchOwner(sock string) *ownerWatch {
	w := &ownerWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			ok := answersAsOwner(sock)
			now := time.Now()
			w.mu.Lock()
			switch {
			case !ok && w.since.IsZero():
				w.since = now
			case ok && !w.since.IsZero():
				w.longest = max(w.longest, now.Sub(w.since))
				w.since = time.Time{}
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return w
}

func answersAsOwner(sock string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl, err := protocol.Dial(ctx, sock)
	if err != nil {
		return false
	}
	defer cl.Close()
	st, err := cl.Status(ctx, &hapi.StatusRequest{})
	return err == nil && st.GetRole() == hapi.Role_ROLE_OWNER
}

// end stops the watch and returns the longest time without an answering
// owner (one still going on counts up to now).
func (w *ownerWatch) end() time.Duration {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.since.IsZero() {
		w.longest = max(w.longest, time.Since(w.since))
	}
	return w.longest
}

// seed002Node starts a node whose runtime runs in mode, with an instance
// a that owns, then an instance b that takes over from it; a stays as b's
// live fallback, retired, its connection in the runtime's chain: seed
// 002's two copies of the DaemonSet.
func seed002Node(t *testing.T, mode plugintest.Mode, logs *syncBuffer) (n *plugintest.Node, a, b *plugintest.Instance) {
	t.Helper()
	n, err := plugintest.NewNode(plugintest.Config{
		Plugin:  func(string) (interface{}, []plugin.Option) { return noop{}, nil },
		Runtime: plugintest.RuntimeOptions{Mode: mode},
		Log:     logs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a's own stop, at the test's end, needs no long wait for a successor.
	if a, err = n.Start("1.0.0", plugin.WithLeaveTimeout(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err = n.Start("1.0.0"); err != nil { // the default leave timeout, 10 s
		t.Fatal(err)
	}
	if err := b.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Runtime().WaitPlugins(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if r := a.Plugin().Role(); r != handover.RoleRetired {
		t.Fatalf("the first instance is %s after the second took over, want retired", r)
	}
	return n, a, b
}

// TestLeavingOwnerYieldsToAQueuedSuccessor reproduces seed 002 of the
// Kubernetes suite in-process: the owning instance b is stopped while the
// runtime's plugin-sync block is held until b's Run returns (the kubelet's
// CRI StopContainer of b's own pod, containerd issue 14083), with a, its
// retired predecessor, running, under a steady load. a claims back in a
// new connection, which the runtime registers but cannot synchronize
// before b exits. b must not wait for that claim (its leave timeout, 10 s)
// nor for a quiet stop (quietSyncWait, 2 s): a tells b that its new
// connection is queued, b yields outside any Synchronize and exits, and a
// owns at once, its connection in the chain acting until the new one is
// synchronized. Every event is acted on exactly once throughout.
//
// In mode containerd the load's CRI calls wait behind the queued
// synchronization, as on the Kubernetes node; in mode cri-o events flow
// through the whole window.
//
// Before (the same test on the tree without Queued): Run of b returned
// after 12.0 s in both modes (the leave timeout, then the quiet stop);
// nobody answered as owner for 2.0 s in mode containerd (as seed 002
// measured on the node), 0 s in mode cri-o (a's connection took the
// released register at the next event, rule 5, and a was promoted).
func TestLeavingOwnerYieldsToAQueuedSuccessor(t *testing.T) {
	for _, mode := range []plugintest.Mode{plugintest.ModeContainerd, plugintest.ModeCRIO} {
		t.Run(string(mode), func(t *testing.T) { leavingOwnerYieldsToAQueuedSuccessor(t, mode) })
	}
}

func leavingOwnerYieldsToAQueuedSuccessor(t *testing.T, mode plugintest.Mode) {
	logs := &syncBuffer{}
	n, a, b := seed002Node(t, mode, logs)
	defer func() {
		if t.Failed() {
			t.Logf("instances' logs:\n%s", logs.String())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := n.Runtime()
	stopLoad := n.Load(ctx, 2, 1)

	release := rt.HoldPluginSync()
	defer release()
	go func() {
		<-b.Done() // the process exited: the kubelet's stop ends
		release()
	}()
	owners := watchOwner(filepath.Join(n.HandoverDir(), "plugintest", "owner.sock"))
	start := time.Now()
	if err := b.Stop(); err != nil {
		t.Fatalf("b's Run: %v", err)
	}
	took := time.Since(start)
	if err := a.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	// a's new connection replaces its old one once synchronized.
	if err := rt.WaitPlugins(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := n.Lifecycles(ctx, 2, 2); err != nil { // events through a's new connection
		t.Fatal(err)
	}
	noOwner := owners.end()
	if err := stopLoad(); err != nil {
		t.Fatal(err)
	}
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mode %s: b's Run returned %v after the stop; longest without an answering owner %v; %s; declared %d",
		mode, took.Round(time.Millisecond), noOwner.Round(time.Millisecond), res.Events.String(), len(n.Declarations()))
	if err := res.Err(); err != nil {
		t.Errorf("%v\ndeliveries from 100 ms before the stop on (event, id, start, acted by):\n%s",
			err, deliveriesAround(n, start.Add(-100*time.Millisecond), time.Now()))
		return
	}
	if took > time.Second {
		t.Errorf("b's Run returned %v after the stop, want well below the quiet stop's 2 s and the leave timeout's 10 s", took.Round(time.Millisecond))
	}
	if noOwner > 500*time.Millisecond {
		t.Errorf("nobody answered as owner for %v, want about nothing", noOwner.Round(time.Millisecond))
	}
	if st := b.Plugin().Status(); st.LastHandover == nil || st.LastHandover.ToID != a.ID() || !strings.Contains(st.Reason, "queued") {
		t.Errorf("b stopped with reason %q and last handover %+v, want a yield to %s's queued connection", st.Reason, st.LastHandover, a.ID())
	}
	if r := a.Plugin().Role(); r != handover.RoleOwner {
		t.Errorf("a is %s, want owner", r)
	}
}

// TestLeavingOwnerWaitsForAClaimThatCanRun: the same two instances with
// nothing holding the plugin-sync block: a's new connection is
// synchronized at once and claims inside its Synchronize, b yields to that
// claim (the fenced handover) and not to a queued connection.
func TestLeavingOwnerWaitsForAClaimThatCanRun(t *testing.T) {
	logs := &syncBuffer{}
	n, a, b := seed002Node(t, plugintest.ModeContainerd, logs)
	defer func() {
		if t.Failed() {
			t.Logf("instances' logs:\n%s", logs.String())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopLoad := n.Load(ctx, 2, 1)
	if err := b.Stop(); err != nil {
		t.Fatalf("b's Run: %v", err)
	}
	if err := a.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stopLoad(); err != nil {
		t.Fatal(err)
	}
	if err := n.Verify(); err != nil {
		t.Fatal(err)
	}
	st := b.Plugin().Status()
	if st.LastHandover == nil || st.LastHandover.ToID != a.ID() || strings.Contains(st.Reason, "queued") {
		t.Fatalf("b stopped with reason %q and last handover %+v, want the fenced yield to %s", st.Reason, st.LastHandover, a.ID())
	}
}

// TestLeavingOwnerStillWaitsWithNoSuccessor: an owner asked to stop with no
// other instance running, while the plugin-sync block is held, keeps
// owning and waits its whole leave timeout for a successor: nothing has
// told it that waiting is futile.
func TestLeavingOwnerStillWaitsWithNoSuccessor(t *testing.T) {
	logs := &syncBuffer{}
	const leave = 1500 * time.Millisecond
	n, err := plugintest.NewNode(plugintest.Config{
		Plugin: func(string) (interface{}, []plugin.Option) {
			return noop{}, []plugin.Option{plugin.WithLeaveTimeout(leave)}
		},
		Runtime: plugintest.RuntimeOptions{Mode: plugintest.ModeCRIO},
		Log:     logs,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	defer func() {
		if t.Failed() {
			t.Logf("instance's logs:\n%s", logs.String())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := n.Start("1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	release := n.Runtime().HoldPluginSync()
	defer release()
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop() }()
	// Events while it waits: only a runs, so nothing missed at the end
	// means a acted on them.
	if err := n.Lifecycles(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	took := time.Since(start)
	t.Logf("Run returned %v after the stop (leave timeout %v)", took.Round(time.Millisecond), leave)
	if took < leave {
		t.Fatalf("Run returned %v after the stop, before the leave timeout (%v): it did not wait for a successor", took, leave)
	}
	if err := n.Verify(); err != nil {
		t.Fatal(err)
	}
}

// deliveriesAround lists the runtime's deliveries that started in [from,
// to], with the instances whose handlers acted on each, for a failure.
func deliveriesAround(n *plugintest.Node, from, to time.Time) string {
	var b strings.Builder
	for _, d := range n.Runtime().Deliveries() {
		if d.Start.Before(from) || d.Start.After(to) {
			continue
		}
		fmt.Fprintf(&b, "  %s %s %s %v\n", d.Event, d.ID, d.Start.UTC().Format("15:04:05.000000"), n.Ledger().Acted(d.Event, d.ID))
	}
	return b.String()
}
