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

// auditKit is the author the kit nodes of these tests run: the audit sample.
func auditKit(v string) (interface{}, []plugin.Option) {
	return &audit.Plugin{Version: v, Recorder: nopAudit{}}, nil
}

// kitNode starts a test kit node of plugin name on a runtime with rt; it
// is closed when the test ends. ctx bounds the test's waits.
func kitNode(t *testing.T, name string, author func(string) (interface{}, []plugin.Option),
	rt plugintest.RuntimeOptions) (n *plugintest.Node, ctx context.Context) {
	t.Helper()
	n, err := plugintest.NewNode(plugintest.Config{Name: name, Plugin: author, Runtime: rt, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return n, ctx
}

// startOwner starts an instance of version and waits until it acts.
func startOwner(t *testing.T, ctx context.Context, n *plugintest.Node, version string) *plugintest.Instance {
	t.Helper()
	in, err := n.Start(version)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestFallbackTakesOverFromAFrozenOwner: the owner stops (SIGSTOP, or a
// stuck process) while its predecessor still runs as its live fallback;
// the runtime times out on it and drops it. The fallback, called for the
// next events, finds that the owner was not called for the last one and
// takes over at once: no handler ran for that event, which it hands to its
// author late (a pod's run, an update, a Post* event: CatchingUp) or, if
// it cannot (a creation), declares in doubt. Of a stream of pod lifecycles
// during the freeze, at most the one event the owner was given before it
// was dropped goes unhandled by the runtime's call, and it is handed late
// or declared; nothing is acted on twice. Before, every event until the
// owner thawed and reconnected went unhandled, unsaid.
func TestFallbackTakesOverFromAFrozenOwner(t *testing.T) {
	n, ctx := kitNode(t, "audit", auditKit, plugintest.RuntimeOptions{RequestTimeout: 300 * time.Millisecond})
	v1 := startOwner(t, ctx, n, "1.0.0")
	v2 := startOwner(t, ctx, n, "2.0.0") // v1 stays, retired: the fallback
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
	// Each event no call acted on: handed late, once, or declared.
	late := map[plugintest.EventKey]int{}
	for _, c := range n.CaughtUpChanges() {
		late[plugintest.EventKey{Event: c.Event, ID: c.ID}]++
	}
	unhanded := 0
	for _, d := range n.Ledger().Unacted(n.Runtime().Deliveries()) {
		k := plugintest.EventKey{Event: d.Event, ID: d.ID}
		if late[k] == 0 {
			unhanded++
		}
		delete(late, k)
	}
	if len(late) != 0 {
		t.Errorf("handed late, yet acted on by a call too (or not delivered): %v", late)
	}
	if uint64(unhanded) > inDoubt {
		t.Errorf("%d events neither acted on nor handed late, %d declared in doubt", unhanded, inDoubt)
	}
}

// TestGapDeclared: the only instance is killed; events go to no instance
// until the next one (the DaemonSet's replacement) takes over, which says
// so: a gap, logged with its length and counted. A clean handover
// declares none.
func TestGapDeclared(t *testing.T) {
	n, ctx := kitNode(t, "audit", auditKit, plugintest.RuntimeOptions{})
	v1 := startOwner(t, ctx, n, "1.0.0")
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
