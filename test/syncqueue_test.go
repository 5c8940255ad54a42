package test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// logWatch is an io.Writer for the instances' logs that closes seen once
// a line holds text.
type logWatch struct {
	mu   sync.Mutex
	out  io.Writer
	text []byte
	seen chan struct{}
	done bool
}

func (w *logWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	if !w.done && bytes.Contains(b, w.text) {
		w.done = true
		close(w.seen)
	}
	w.mu.Unlock()
	if w.out != nil {
		return w.out.Write(b)
	}
	return len(b), nil
}

// TestQueuedSynchronizeKeepsTheOldConnection: the owner stops while the
// runtime's plugin sync is held, as containerd's CRI StopContainer holds it
// for the stopping plugin pod's whole grace period (containerd issue
// 14083). Its fallback, asked to claim in a new Synchronize, gets a
// connection the runtime registers but does not synchronize for longer than
// the registration timeout. The fallback's old connection stays in the
// chain and takes over when the owner goes: every event is acted on once.
// Before, the fallback gave up on the new connection after twice the
// registration timeout and closed the old one with it, and every event
// until its next connection was synchronized reached no instance (the
// Kubernetes suite's seed 002: 5 s without an owner, 20 events missed).
func TestQueuedSynchronizeKeepsTheOldConnection(t *testing.T) {
	w := &logWatch{out: testLog(t), text: []byte("has not synchronized the new connection yet"), seen: make(chan struct{})}
	n, err := plugintest.NewNode(plugintest.Config{Name: "audit", Plugin: auditKit, Log: w,
		Runtime: plugintest.RuntimeOptions{Mode: plugintest.ModeCRIO}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	v1 := startOwner(t, ctx, n, "1.0.0")
	v2, err := n.Start("2.0.0", plugin.WithLeaveTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := v2.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Lifecycles(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}

	release := n.Runtime().HoldPluginSync()
	defer release()
	stopped := make(chan error, 1)
	go func() { stopped <- v2.Stop() }()
	// Events go on (CRI-O takes no sync block around them) past the moment
	// the fallback's new connection has waited the registration timeout.
	for waiting := true; waiting; {
		select {
		case <-w.seen:
			waiting = false
		case <-ctx.Done():
			t.Fatal("the fallback's new connection never waited for its Synchronize")
		default:
		}
		if err := n.Lifecycles(ctx, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Lifecycles(ctx, 5, 1); err != nil {
		t.Fatal(err)
	}
	if role := v1.Plugin().Role(); role != handover.RoleOwner {
		t.Errorf("the fallback is %v while its new connection waits for its Synchronize, want owner", role)
	}
	release()
	if err := <-stopped; err != nil {
		t.Errorf("stop of the owner: %v", err)
	}
	if err := n.Lifecycles(ctx, 3, 1); err != nil {
		t.Fatal(err)
	}
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("events: %v", res.Events)
	if !res.OK() {
		t.Errorf("not every event acted on once: %v", res.Err())
	}
}
