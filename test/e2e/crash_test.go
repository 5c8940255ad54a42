//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
)

// fault is one way the owner fails under load, and how the node goes on.
type fault struct {
	name string
	// do makes the owner cur fail and returns the instance that owns the
	// plugin afterwards (started by do if need be) and any instance that
	// must be stopped once the new owner serves.
	do func(t *testing.T, n *node, cur *instance, v string) (owner, stale *instance)
}

// faultResult is one fault's window and what was lost in it.
type faultResult struct {
	name     string
	window   window
	lost     []string // events of calls in the window missing from the ledger
	created  int      // containers created in the window
	stampedN int      // of which stamped at creation
	caughtUp int      // unstamped ones handed to a later Synchronize
	doubt    int      // unstamped ones whose CreateContainer an instance began
	missing  []string // unstamped ones never handed to a Synchronize
}

// faults are the owner failures TestOwnerFaultsUnderLoad plays: kill -9
// (at a random moment, and inside a CreateContainer) and SIGSTOP longer
// than containerd's request timeout, each with and without a second
// instance running.
var faults = []fault{
	{name: "kill -9 of the owner during a rollout (the old instance, retired, still runs)",
		do: func(t *testing.T, n *node, cur *instance, v string) (*instance, *instance) {
			next := n.start(n.syncOpts(v))
			next.mustOwn(t, ownerWithin)
			next.kill()
			if _, err := cur.waitOwner(ownerWithin); err != nil {
				t.Fatalf("after the kill of %s: %v", next.id, err)
			}
			return cur, nil
		}},
	{name: "kill -9 of the owner inside a CreateContainer during a rollout (the old one still runs)",
		do: func(t *testing.T, n *node, cur *instance, v string) (*instance, *instance) {
			next := n.start(n.syncOpts(v))
			next.mustOwn(t, ownerWithin)
			n.killInsideCreate(t, next)
			if _, err := cur.waitOwner(ownerWithin); err != nil {
				t.Fatalf("after the kill of %s: %v", next.id, err)
			}
			return cur, nil
		}},
	{name: "kill -9 of the only instance; its replacement starts (as the kubelet restarts it)",
		do: func(t *testing.T, n *node, cur *instance, v string) (*instance, *instance) {
			cur.kill()
			next := n.start(n.syncOpts(v))
			next.mustOwn(t, ownerWithin)
			return next, nil
		}},
	{name: "kill -9 of the only instance inside a CreateContainer; its replacement starts",
		do: func(t *testing.T, n *node, cur *instance, v string) (*instance, *instance) {
			n.killInsideCreate(t, cur)
			next := n.start(n.syncOpts(v))
			next.mustOwn(t, ownerWithin)
			return next, nil
		}},
	{name: "SIGSTOP of the only instance until containerd drops it, then SIGCONT",
		do: func(t *testing.T, n *node, cur *instance, _ string) (*instance, *instance) {
			before, _ := n.closedPlugins()
			cur.signal(syscall.SIGSTOP)
			n.waitDropped(t, len(before))
			cur.signal(syscall.SIGCONT)
			cur.mustOwn(t, ownerWithin)
			return cur, nil
		}},
	{name: "SIGSTOP of the owner until containerd drops it; a newcomer takes over; SIGCONT",
		do: func(t *testing.T, n *node, cur *instance, v string) (*instance, *instance) {
			before, _ := n.closedPlugins()
			cur.signal(syscall.SIGSTOP)
			n.waitDropped(t, len(before))
			next := n.start(n.syncOpts(v))
			next.mustOwn(t, ownerWithin)
			cur.signal(syscall.SIGCONT)
			// Retired if it sees the newcomer's name at an event; standby
			// if it first finds its connection lost and claims again in a
			// new Synchronize (the policy keeps the newcomer). Either way
			// it does not act, and the newcomer still owns.
			deadline := time.Now().Add(ownerWithin)
			for r := cur.role(); r != hapi.Role_ROLE_RETIRED && r != hapi.Role_ROLE_STANDBY; r = cur.role() {
				if time.Now().After(deadline) {
					t.Fatalf("%s is %v %v after SIGCONT, want retired or standby", cur.id, r, ownerWithin)
				}
				time.Sleep(10 * time.Millisecond)
			}
			next.mustOwn(t, ownerWithin)
			return next, cur
		}},
}

// createDelay is how long the fault test's plugin takes in CreateContainer
// (nri-audit-sync -create-delay): long enough to kill it inside, far
// below containerd's request timeout.
const createDelay = 150 * time.Millisecond

func (n *node) syncOpts(v string) instanceOpts {
	return instanceOpts{binary: "nri-audit-sync", version: v, extra: append(n.syncExtra(), "-create-delay", createDelay.String())}
}

// killInsideCreate waits until in begins a CreateContainer and kills it
// with SIGKILL inside the handler.
func (n *node) killInsideCreate(t *testing.T, in *instance) {
	t.Helper()
	began := func() int {
		c := 0
		for _, r := range readRecords(t, n.dir+"/record") {
			if r.kind == "create-begin" && r.instance == in.id {
				c++
			}
		}
		return c
	}
	want := began() + 1
	deadline := time.Now().Add(30 * time.Second)
	for began() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s began no CreateContainer within 30 s", in.id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	in.kill()
}

func (n *node) syncExtra() []string { return []string{"-record", n.dir + "/record"} }

// waitDropped waits until containerd has logged more request timeouts than
// before: it dropped the frozen instance, which was frozen longer than its
// request timeout with a request in flight.
func (n *node) waitDropped(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(4*nriRequestTimeout + 10*time.Second)
	for {
		if to, _ := n.closedPlugins(); len(to) > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not drop the frozen instance")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOwnerFaultsUnderLoad: the owner of the audit plugin (with a
// Synchronize that records the catch-up it is handed, test/e2e/cmd/
// nri-audit-sync) is killed with SIGKILL, at a random moment and inside a
// CreateContainer, or frozen with SIGSTOP until containerd drops it for its
// request timeout, with and without a second instance running, under CRI
// load: six faults, each twice. After each, the node has an owner again
// and it serves.
//
// Asserted (it holds today): no CRI call fails; no event is acted on
// twice; no event outside a fault's window is missed; every container is
// processed: stamped at its creation, or handed to a later Synchronize as
// unprocessed, or — created and stopped within a fault's window, while no
// instance acted, so that no Synchronize could list it — declared by an
// instance as a gap. Measured and logged per fault, not asserted (issue 10 asks
// for more than today's harness does): the events lost, the containers in
// doubt (an instance died or was dropped inside their CreateContainer),
// and the containers given to the author more than once.
func TestOwnerFaultsUnderLoad(t *testing.T) {
	n := newNode(t)
	cur, load := n.ownerUnderLoad(n.syncOpts("1.0.0"), 3)
	lt := newLedgerTail(n.ledger)
	if err := lt.waitActed(cur.id, settleEvents, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var results []*faultResult
	round := 0
	for rep := 0; rep < 2; rep++ {
		for _, f := range faults {
			v := []string{"2.0.0", "1.0.0"}[round%2]
			round++
			from := time.Now()
			owner, stale := f.do(t, n, cur, v)
			if err := lt.waitActed(owner.id, settleEvents, 30*time.Second); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			if stale != nil {
				if err := stale.stop(exitWithin); err != nil {
					t.Error(err)
				}
			}
			results = append(results, &faultResult{name: f.name, window: window{label: f.name, from: from, to: time.Now()}})
			t.Logf("round %d: %s: %s owns and serves %v later", round, f.name, owner.id, time.Since(from).Round(time.Millisecond))
			cur = owner
		}
	}
	load.stop()

	load.checkNoFailures(t)
	ledger := n.readLedger()
	rep := compareLedger(load.expected(), nil, ledger)
	t.Logf("ledger: %s", rep)
	if len(rep.duplicates)+len(rep.unexpected) > 0 {
		t.Errorf("events acted on twice or unknown:\n duplicated %v\n unexpected %v",
			first(rep.duplicates, 10), first(rep.unexpected, 10))
	}
	// Each missed event belongs to the fault whose window its call
	// overlapped; none may be missed outside every window.
	for _, m := range rep.missed {
		var in *faultResult
		for _, c := range load.callsFor(m) {
			for _, r := range results {
				if c.overlaps([]window{r.window}, 20*time.Millisecond) {
					in = r
				}
			}
		}
		if in == nil {
			t.Errorf("missed outside every fault window: %s (calls %+v)", m, load.callsFor(m))
			continue
		}
		in.lost = append(in.lost, m)
	}

	// Every container: stamped at its creation, or handed as unprocessed to
	// a later Synchronize (the catch-up); any other fails the test. In
	// doubt are the unstamped ones whose CreateContainer an instance began
	// (it died or was dropped inside the handler). Measured, not asserted:
	// containers the author was given more than once (its CreateContainer
	// ran and recorded, or an earlier Synchronize had them, and a
	// Synchronize was handed them again: issue 10 asks for once).
	handed, began := map[string]int{}, map[string]bool{}
	for _, r := range readRecords(t, n.dir+"/record") {
		switch r.kind {
		case "sync":
			for _, id := range r.ids {
				handed[id]++
			}
		case "create-begin":
			began[r.ids[0]] = true
		}
	}
	ledgerCreate := map[string]int{}
	for _, l := range ledger {
		if l.event == "CreateContainer" {
			ledgerCreate[l.object]++
		}
	}
	signer := n.signer()
	created, stopped := map[string]time.Time{}, map[string]time.Time{}
	load.mu.Lock()
	for _, c := range load.calls {
		switch {
		case c.op == "CreateContainer" && c.err == nil:
			created[c.obj] = c.start
		case c.op == "StopContainer":
			if _, ok := stopped[c.obj]; !ok {
				stopped[c.obj] = c.start
			}
		}
	}
	load.mu.Unlock()
	var goneInGap []string // created and stopped while no instance acted
	var stampedAll, caughtAll, doubtAll, twice int
	var unprocessed []string
	for _, c := range load.ctrs {
		if c.specErr != nil {
			t.Errorf("container %s: %v", c.id, c.specErr)
			continue
		}
		sc := checkSpec(signer, c.id, c.spec)
		stamped := sc.err == nil
		if stamped {
			if pr := sc.problem(); pr != "" {
				t.Errorf("container %s: %s", c.id, pr)
			}
		}
		if ledgerCreate[c.id]+handed[c.id] > 1 {
			twice++
		}
		var in *faultResult
		for _, r := range results {
			if at := created[c.id]; !at.Before(r.window.from.Add(-20*time.Millisecond)) && at.Before(r.window.to) {
				in = r
			}
		}
		if in == nil {
			in = &faultResult{} // outside every window: counted in all only
		}
		in.created++
		if !stamped && began[c.id] {
			doubtAll++
			in.doubt++
		}
		switch {
		case stamped:
			stampedAll++
			in.stampedN++
		case handed[c.id] > 0:
			caughtAll++
			in.caughtUp++
		case in.window.label != "" && !stopped[c.id].IsZero() && stopped[c.id].Before(in.window.to):
			// Its whole life fell in a fault's window: stopped before the
			// owner was back, so no Synchronize could list it. It can only
			// be declared (the gap), checked below.
			goneInGap = append(goneInGap, c.id)
		default:
			unprocessed = append(unprocessed, c.id)
			in.missing = append(in.missing, c.id)
		}
	}
	if len(goneInGap) > 0 && !logsSay(t, n.dir, "gap: no instance acted") {
		t.Errorf("%d containers lived only while no instance acted (%v), and no instance declared a gap",
			len(goneInGap), first(goneInGap, 5))
	}
	if len(goneInGap) > 0 {
		t.Logf("%d containers created and stopped within a fault's window, declared as a gap: %v", len(goneInGap), first(goneInGap, 5))
	}
	if len(unprocessed) > 0 {
		t.Errorf("%d containers nobody processed: not stamped at creation and handed to no Synchronize: %v",
			len(unprocessed), first(unprocessed, 5))
	}
	var lostAll int
	var lines []string
	for i, r := range results {
		lostAll += len(r.lost)
		lines = append(lines, fmt.Sprintf("%2d %-88s lost %2d %s; containers %d: stamped %d, caught up %d (in doubt %d), unprocessed %d",
			i+1, r.name, len(r.lost), lostKinds(r.lost), r.created, r.stampedN, r.caughtUp, r.doubt, len(r.missing)))
	}
	t.Logf("per fault (window: the fault until the owner has acted on %d events):\n%s", settleEvents, strings.Join(lines, "\n"))
	t.Logf("in all: %d faults, %d events expected, %d lost (%.1f per fault), %d duplicated; %d containers: %d stamped at creation, "+
		"%d caught up by a Synchronize (%d of them in doubt: their CreateContainer begun by an instance that died or was dropped inside it), "+
		"%d never processed; %d given to the author more than once (CreateContainer and Synchronize, or two Synchronizes)",
		len(results), rep.expected, lostAll, float64(lostAll)/float64(len(results)), len(rep.duplicates), len(load.ctrs),
		stampedAll, caughtAll, doubtAll, len(unprocessed), twice)
}

// lostKinds summarizes lost events by kind: "(CreateContainer 1, ...)".
func lostKinds(lost []string) string {
	if len(lost) == 0 {
		return ""
	}
	c := map[string]int{}
	for _, l := range lost {
		ev, _, _ := strings.Cut(l, " ")
		c[ev]++
	}
	var parts []string
	for ev, k := range c {
		parts = append(parts, fmt.Sprintf("%s %d", ev, k))
	}
	sort.Strings(parts)
	return "(" + strings.Join(parts, ", ") + ")"
}

// logsSay reports whether the log of any plugin instance in dir contains s.
func logsSay(t *testing.T, dir, s string) bool {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}
