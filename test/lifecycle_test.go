package test

// The stub's life cycle on the harness (issue 12): Start/Stop/Wait as well
// as Run, Close before Run, Reconcile's context and the stop signals (a
// stop that never hangs on a stuck handler: stop_test.go).

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/plugin"
)

// TestStartStopWait: Start returns once configured, the plugin owns and
// serves; Stop hands over to the standby and returns after the end, and
// Wait returns too.
func TestStartStopWait(t *testing.T) {
	n := newNode(t)
	newest := plugin.WithPolicy(handover.NewestVersion{}) // b, older, stays standby
	p, err := plugin.New(n.auditPlugin("a", "2.0.0"), append(n.options("a", "2.0.0"), newest)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if p.RuntimeName() != "sim" {
		t.Fatalf("Start returned before Configure: runtime %q", p.RuntimeName())
	}
	if err := p.Start(context.Background()); err == nil {
		t.Fatal("a second Start was accepted")
	}
	a := &running{p: p}
	waitRole(t, a, handover.RoleOwner)
	n.lifecycles(1)
	b := n.start("b", "1.0.0", newest)
	waitRole(t, b, handover.RoleStandby)

	p.Stop()
	if p.Role() != handover.RoleRetired {
		t.Fatalf("after Stop: role %v", p.Role())
	}
	waitRole(t, b, handover.RoleOwner)
	p.Wait() // returns: stopped
	n.lifecycles(1)
	n.check()
}

// TestCloseBeforeRun: New already serves the handover protocol; Close
// stops that for a plugin that never ran, and Run afterwards refuses.
func TestCloseBeforeRun(t *testing.T) {
	n := newNode(t)
	p, err := plugin.New(n.auditPlugin("a", "1.0.0"), n.options("a", "1.0.0")...)
	if err != nil {
		t.Fatal(err)
	}
	sock := instanceSocket(n.root, "a")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("New serves no handover socket: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("after Close the handover socket is still there: %v", err)
	}
	if err := p.Run(context.Background()); err == nil {
		t.Fatal("Run after Close was accepted")
	}
	p.Wait()
	if err := p.Close(); err != nil { // again: nothing
		t.Fatal(err)
	}
}

// ctxReconciler reports the context its Reconcile is given.
type ctxReconciler struct{ ctxs chan context.Context }

func (r *ctxReconciler) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func (r *ctxReconciler) Reconcile(ctx context.Context, _ *plugin.Plugin, _ []*plugin.StampedContainer) error {
	r.ctxs <- ctx
	return nil
}

// TestReconcileContextEndsWithThePlugin: Reconcile's context ends when the
// plugin stops, so a long reconciliation does not outlive it.
func TestReconcileContextEndsWithThePlugin(t *testing.T) {
	n := newNode(t)
	author := &ctxReconciler{ctxs: make(chan context.Context, 1)}
	a := n.startAuthor("a", "1.0.0", author)
	ctx := <-author.ctxs
	if ctx.Err() != nil {
		t.Fatalf("Reconcile's context ended while the plugin runs: %v", ctx.Err())
	}
	a.stop(t)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Reconcile's context did not end when the plugin stopped")
	}
}

// TestSIGTERMHandsOverWithBackgroundContext: an upstream-style
// Run(context.Background()) stops on SIGTERM and hands over, instead of
// the process dying as owner.
func TestSIGTERMHandsOverWithBackgroundContext(t *testing.T) {
	n := newNode(t)
	newest := plugin.WithPolicy(handover.NewestVersion{}) // b, older, stays standby
	p, err := plugin.New(n.auditPlugin("a", "2.0.0"), append(n.options("a", "2.0.0"), newest)...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	a := &running{p: p}
	waitRole(t, a, handover.RoleOwner)
	b := n.start("b", "1.0.0", newest)
	waitRole(t, b, handover.RoleStandby)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run(context.Background()) did not stop on SIGTERM")
	}
	waitRole(t, b, handover.RoleOwner)
}
