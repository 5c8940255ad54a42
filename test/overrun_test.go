package test

import (
	"context"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// nopAudit is an audit recorder that keeps nothing: the kit's ledger
// counts the acts.
type nopAudit struct{}

func (nopAudit) Record(string, string) error { return nil }

// TestFallbackTakesOverFromAFrozenOwner: the owner stops (SIGSTOP, or a
// stuck process) while its predecessor still runs as its live fallback;
// the runtime times out on it and drops it. The fallback, called for the
// next events, finds that the owner was not called for the last one and
// takes over at once, declaring that event in doubt: of a stream of pod
// lifecycles during the freeze, at most the one event the owner was given
// before it was dropped goes unhandled, and it is declared; nothing is
// acted on twice. Before, every event until the owner thawed and
// reconnected went unhandled, unsaid.
func TestFallbackTakesOverFromAFrozenOwner(t *testing.T) {
	n, err := plugintest.NewNode(plugintest.Config{
		Name: "audit",
		Plugin: func(v string) (interface{}, []plugin.Option) {
			return &audit.Plugin{Version: v, Recorder: nopAudit{}}, nil
		},
		Runtime: plugintest.RuntimeOptions{RequestTimeout: 300 * time.Millisecond},
		Log:     testLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v1, err := n.Start("1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	v2, err := n.Start("2.0.0") // v1 stays, retired: the fallback
	if err != nil {
		t.Fatal(err)
	}
	if err := v2.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Lifecycles(ctx, 3, 2); err != nil {
		t.Fatal(err)
	}

	v2.Freeze()
	if err := n.Lifecycles(ctx, 10, 2); err != nil {
		t.Fatal(err)
	}
	if role := v1.Plugin().Role(); role != handover.RoleOwner {
		t.Errorf("the fallback is %v after the owner froze, want owner", role)
	}
	inDoubt, gaps := v1.Plugin().Stats().InDoubt, v1.Plugin().Stats().Gaps
	if gaps != 0 {
		t.Errorf("the fallback declared %d gaps; it took over at once", gaps)
	}
	v2.Thaw()
	v2.Crash() // as the kubelet would after its liveness probe failed

	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("events: %v; in doubt at the fallback: %d", res.Events, inDoubt)
	if res.Events.Duplicates != 0 {
		t.Errorf("%d events acted on twice:\n%v", res.Events.Duplicates, res.Events)
	}
	if res.Events.Missed > 1 {
		t.Errorf("%d events missed while the owner was frozen (at most the one it was given may be):\n%v", res.Events.Missed, res.Events)
	}
	if uint64(res.Events.Missed) > inDoubt {
		t.Errorf("%d events missed, %d declared in doubt", res.Events.Missed, inDoubt)
	}
}

// TestGapDeclared: the only instance is killed; events go to no instance
// until the next one (the DaemonSet's replacement) takes over, which says
// so: a gap, logged with its length and counted. A clean handover
// declares none.
func TestGapDeclared(t *testing.T) {
	n, err := plugintest.NewNode(plugintest.Config{
		Name: "audit",
		Plugin: func(v string) (interface{}, []plugin.Option) {
			return &audit.Plugin{Version: v, Recorder: nopAudit{}}, nil
		},
		Log: testLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v1, err := n.Start("1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Lifecycles(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	v2, err := n.Upgrade(ctx, "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if g := v2.Plugin().Stats().Gaps; g != 0 {
		t.Fatalf("a clean upgrade declared %d gaps", g)
	}
	if err := v1.Stop(); err != nil { // as the DaemonSet deletes the old pod
		t.Fatal(err)
	}
	// Declared whether the next instance is first seen acting at an event
	// or, on an idle node, promotes itself.
	for i, load := range []bool{true, false} {
		owner := n.Owner()
		owner.Crash()
		if err := n.Lifecycles(ctx, 2, 1); err != nil { // to no instance
			t.Fatal(err)
		}
		next, err := n.Start("2.0.0")
		if err != nil {
			t.Fatal(err)
		}
		if load {
			stop := n.Load(ctx, 1, 1)
			err = next.WaitOwner(ctx)
			if serr := stop(); serr != nil {
				t.Fatal(serr)
			}
		} else {
			err = next.WaitOwner(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if g := next.Plugin().Stats().Gaps; g != 1 {
			t.Errorf("round %d (load %v): the instance after the crash declared %d gaps, want 1", i, load, g)
		}
	}
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if res.Events.Missed == 0 || res.Events.Duplicates != 0 {
		t.Errorf("events: %v; want some missed (no instance ran), none twice", res.Events)
	}
}
