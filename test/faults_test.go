package test

// The fault matrix of issue 5 (docs/reliability.md): every step of the
// handover protocol may fail, and nothing may be acted on twice.
//
// Process rows run the nri-audit sample as separate processes against the
// in-process runtime (see procnode_test.go for the node and the ledger
// file), and kill or stop one of them exactly at a protocol step with
// the NRI_HANDOVER_FAILPOINT environment variable ("<step>:kill|stop", read
// by plugin.New). In-process rows use harness instances (helpers_test.go).
//
// Each row states what the design allows and checks exactly that against
// the runtime's delivery log and the plugins' ledger: which instance acted
// on every delivered event, in order, so that a duplicate, a missed event or
// an act by the wrong instance shows at its position in the stream.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/handover"
	fp "github.com/nri-handover/nri-handover/internal/failpoint"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin"
)

const (
	// faultTimeout bounds each fault scenario.
	faultTimeout = 45 * time.Second
	// hungRequestTimeout is the runtime's request timeout in rows where an
	// instance is hung (SIGSTOP): the time after which the runtime drops it.
	hungRequestTimeout = 500 * time.Millisecond
	// missed is the actor of a delivered event nobody acted on.
	missed = "-"
)

// failpoint is the environment that makes a process kill or stop itself at
// a protocol step.
func failpoint(step protocol.Step, action string) []string {
	return []string{fp.Env + "=" + string(step) + ":" + action}
}

// tally is who acted on the delivered events, in delivery order.
type tally struct {
	events   int
	dups     int
	missedAt []int    // positions of the events nobody acted on
	runs     []string // actors of consecutive events, "-" for missed ones
	runStart []int    // position at which each run starts
}

func (tl tally) String() string {
	var b strings.Builder
	for i, r := range tl.runs {
		end := tl.events
		if i+1 < len(tl.runStart) {
			end = tl.runStart[i+1]
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "#%d-#%d %s", tl.runStart[i], end-1, r)
	}
	return fmt.Sprintf("%d events, %d duplicates, %d missed: %s", tl.events, tl.dups, len(tl.missedAt), b.String())
}

// tallyEvents reads the ledger against the delivery log. Every act is on a
// delivered event (attribute checks that), and an event acted on twice is
// an error whatever the row.
func (n *procNode) tallyEvents(t *testing.T) tally {
	t.Helper()
	a := n.attribute(t)
	tl := tally{events: len(a.log)}
	for i, k := range a.log {
		acts := a.actors[i]
		who := missed
		switch {
		case len(acts) > 1:
			tl.dups += len(acts) - 1
			t.Errorf("event #%d %v acted on %d times: %v", i, k, len(acts), acts)
			who = acts[0].instance
		case len(acts) == 1:
			who = acts[0].instance
		default:
			tl.missedAt = append(tl.missedAt, i)
		}
		if len(tl.runs) == 0 || tl.runs[len(tl.runs)-1] != who {
			tl.runs = append(tl.runs, who)
			tl.runStart = append(tl.runStart, i)
		}
	}
	return tl
}

// expectRuns checks the sequence of actors against the allowed ones.
func expectRuns(t *testing.T, tl tally, allowed ...[]string) {
	t.Helper()
	for _, want := range allowed {
		if strings.Join(tl.runs, " ") == strings.Join(want, " ") {
			return
		}
	}
	t.Errorf("actors in order: %v, want one of %v (%v)", tl.runs, allowed, tl)
}

// takeBackBound bounds how long a surviving instance may take to own the
// plugin after the owner (or the owner-to-be) died.
const takeBackBound = 3 * time.Second

// waitTakeBack waits until p owns the plugin again after another instance
// died at died, and returns how long that took.
func (n *procNode) waitTakeBack(ctx context.Context, t *testing.T, p *proc, died time.Time) time.Duration {
	t.Helper()
	bctx, cancel := context.WithTimeout(ctx, takeBackBound)
	defer cancel()
	tick := time.NewTicker(ownerPoll)
	defer tick.Stop()
	for !n.owns(ctx, p.id) {
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("%s exited (%v)", p.id, p.state)
		case <-bctx.Done():
			st, err := n.statusOf(ctx, p.id)
			t.Fatalf("%s did not own the plugin within %v after the other instance died: %v %v", p.id, takeBackBound, st, err)
		}
	}
	return max(time.Since(died), 0)
}

// fault rows measured in this run, logged as a table at the end of
// TestFaultMatrix (docs/reliability.md quotes them).
type matrix struct {
	mu   sync.Mutex
	rows []string
}

func (m *matrix) add(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, fmt.Sprintf(format, args...))
}

func (m *matrix) log(t *testing.T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("fault matrix, as measured:\n  %s", strings.Join(m.rows, "\n  "))
}

// ms rounds d to a tenth of a millisecond, for the matrix.
func ms(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }

// loadedOwner sets a fault scenario up: a node with the runtime's options
// opts, its first instance audit-old (1.0.0, with env added to its
// environment) owning the plugin, and a stream of pod lifecycles (two
// workers) that has delivered at least events events.
func loadedOwner(ctx context.Context, t *testing.T, bins binaries, opts sim.Options, env []string,
	events int) (*procNode, *proc, *stream) {
	t.Helper()
	n := newProcNode(t, bins, opts)
	old := n.startProcEnv("audit-old", "1.0.0", env)
	n.waitOwns(ctx, t, old)
	s := n.startStream(ctx, 2)
	s.waitEvents(ctx, t, events)
	return n, old, s
}

// newcomerOwns starts a newcomer, instance id of version 2.0.0, and waits
// until it owns the plugin; it returns the newcomer and how long after its
// start it was first seen owning.
func (n *procNode) newcomerOwns(ctx context.Context, t *testing.T, id string) (*proc, time.Duration) {
	t.Helper()
	started := time.Now()
	p := n.startPlugin(id, "2.0.0")
	return p, n.waitOwns(ctx, t, p).Sub(started)
}

// finishScenario ends a fault scenario: it stops the stream's workers and
// the given pods (SIGTERM, each expected to exit cleanly, in order), checks
// the runtime with the request timeouts the scenario allows, and tallies
// who acted on the delivered events.
func (n *procNode) finishScenario(ctx context.Context, t *testing.T, s *stream, timeouts map[string]int,
	pods ...*proc) tally {
	t.Helper()
	s.finish()
	for _, p := range pods {
		stopPod(ctx, t, p)
	}
	checkRuntime(t, n, s, timeouts)
	return n.tallyEvents(t)
}

func TestFaultMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs plugin processes")
	}
	bins := buildBinaries(t)
	m := &matrix{}
	defer m.log(t)

	t.Run("control: no fault", func(t *testing.T) { oldOwnerFault(t, bins, m, "", "") })
	t.Run("old owner killed before", func(t *testing.T) { oldOwnerKilledIdle(t, bins, m) })
	for _, step := range []protocol.Step{protocol.StepYieldReceived, protocol.StepYieldDecided} {
		t.Run("old owner killed at "+string(step), func(t *testing.T) { oldOwnerFault(t, bins, m, step, "kill") })
	}
	t.Run("old owner killed after", func(t *testing.T) { oldOwnerKilledAfter(t, bins, m) })
	for _, step := range []protocol.Step{protocol.StepYieldReceived, protocol.StepYieldDecided} {
		t.Run("old owner hung at "+string(step), func(t *testing.T) { oldOwnerFault(t, bins, m, step, "stop") })
	}
	for _, step := range []protocol.Step{protocol.StepClaimLocked, protocol.StepYieldAnswered, protocol.StepPublished, protocol.StepOwner} {
		t.Run("newcomer killed at "+string(step), func(t *testing.T) { newcomerKilled(t, bins, m, step) })
	}
	for _, step := range []protocol.Step{protocol.StepClaimLocked, protocol.StepYieldAnswered, protocol.StepPublished, protocol.StepOwner} {
		t.Run("newcomer hung at "+string(step), func(t *testing.T) { newcomerHung(t, bins, m, step) })
	}
	t.Run("new owner killed after the switch", func(t *testing.T) { newOwnerKilled(t, bins, m) })
	t.Run("claim lock holder hung", func(t *testing.T) { lockHolderHung(t, bins, m) })
	t.Run("racing newcomers", func(t *testing.T) { racingNewcomers(t, bins, m) })
	t.Run("invalid starts", func(t *testing.T) { invalidStarts(t, bins, m) })
}

// oldOwnerFault: the old owner, under load, is killed or stopped at a step
// of its side of the protocol (no step: a control run). The newcomer is
// inside its Synchronize then, so no event is in flight: it takes over, by
// force if the owner does not answer, and every event is acted on once —
// by the old owner up to the newcomer's Synchronize, by the newcomer after.
// A stopped owner is dropped by the runtime at its next event (one request
// timeout: the only timeout allowed); thawed, it acts on nothing.
func oldOwnerFault(t *testing.T, bins binaries, m *matrix, step protocol.Step, action string) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	opts := sim.Options{}
	var env []string
	if action != "" {
		env = failpoint(step, action)
	}
	if action == "stop" {
		opts.RequestTimeout = hungRequestTimeout
	}
	n, old, s := loadedOwner(ctx, t, bins, opts, env, 200)

	newp, took := n.newcomerOwns(ctx, t, "audit-new")
	timeouts := map[string]int{}
	switch action {
	case "kill":
		if st := old.wait(ctx, t); st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: %v, want killed at %s", old.id, st, step)
		}
	case "stop":
		old.waitStopped(ctx, t)
		// The runtime appends the newcomer once its Synchronize returned
		// (it owns before that), then drops the stopped owner at its next
		// event, one request timeout later.
		if err := n.rt.WaitPlugins(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := n.rt.WaitPlugins(ctx, 1); err != nil {
			t.Fatal(err)
		}
		timeouts["10-audit"] = 1
		old.signal(t, syscall.SIGCONT)
		if err := n.rt.WaitPlugins(ctx, 2); err != nil {
			t.Fatalf("the thawed instance did not reconnect: %v", err)
		}
	}
	st, err := n.statusOf(ctx, newp.id)
	if err != nil {
		t.Fatal(err)
	}
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)
	if !n.owns(ctx, newp.id) {
		t.Errorf("%s no longer owns the plugin", newp.id)
	}
	if action == "stop" {
		if ost, err := n.statusOf(ctx, old.id); err != nil || ost.Role == hapi.Role_ROLE_OWNER {
			t.Errorf("thawed %s: %v %v, want it not to own", old.id, ost, err)
		}
	}
	pods := []*proc{newp}
	if action == "stop" {
		pods = append(pods, old)
	}
	tl := n.finishScenario(ctx, t, s, timeouts, pods...)
	expectRuns(t, tl, []string{old.id, newp.id})
	name := "control (no fault)"
	if action != "" {
		name = fmt.Sprintf("old owner %s at %s", action, step)
	}
	m.add("%-36s newcomer owns %8s after its start (%s); %s", name, ms(took), st.Reason, tl)
}

// newcomerKilled: the newcomer is killed at a step of its claim, under
// load. Before the owner yielded (claim-locked) nothing changes: the owner
// keeps owning and the kernel releases the claim lock. After the owner
// yielded, the retired owner sees its successor's connection break and
// takes ownership back; events delivered between the newcomer's death and
// that promotion may be missed (the detection window), none twice. A clean
// newcomer then takes over normally.
func newcomerKilled(t *testing.T, bins binaries, m *matrix, step protocol.Step) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{}, nil, 200)

	lo := len(n.rt.IssuedLog())
	newp := n.startProcEnv("audit-new", "2.0.0", failpoint(step, "kill"))
	if st := newp.wait(ctx, t); st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("%s: %v, want killed at %s", newp.id, st, step)
	}
	died := time.Now()
	var window time.Duration
	if step == protocol.StepClaimLocked {
		// The owner was never asked: it still owns.
		if !n.owns(ctx, old.id) {
			t.Errorf("%s lost ownership to a newcomer that died before asking", old.id)
		}
	} else {
		window = n.waitTakeBack(ctx, t, old, died)
	}
	ost, _ := n.statusOf(ctx, old.id)
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)

	new2, took := n.newcomerOwns(ctx, t, "audit-new2")
	s.waitEvents(ctx, t, n.rt.Stats().Events+200)
	tl := n.finishScenario(ctx, t, s, map[string]int{}, new2, old)
	expectRuns(t, tl, []string{old.id, new2.id}, []string{old.id, missed, old.id, new2.id})
	for _, i := range tl.missedAt {
		if i < lo {
			t.Errorf("event #%d missed before the newcomer started (#%d)", i, lo)
		}
	}
	back := "kept owning"
	if step != protocol.StepClaimLocked {
		back = "owns again " + ms(window) + " after the newcomer died"
	}
	m.add("%-36s old owner %s (%s); second newcomer owns %s after its start; %s",
		"newcomer kill at "+string(step), back, ost.GetReason(), ms(took), tl)
}

// thawAlways continues the process whenever it stops again, until it exits:
// a failpoint fires at every pass through its step, and a claim after a
// reconnection passes claim-locked again.
func (p *proc) thawAlways(t *testing.T) {
	go func() {
		for {
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil); err != nil {
				return
			}
			select {
			case <-p.done:
				return
			default:
			}
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
}

// newcomerHung: the newcomer stops (SIGSTOP) at a step of its claim, under
// load, inside its Synchronize: the runtime runs no event until it gives
// up on that Synchronize after one request timeout and drops the newcomer
// (the only timeout allowed). Stopped before the owner was asked
// (claim-locked), the owner keeps owning and nothing is missed. Stopped
// after the owner yielded, the newcomer does not finish its claim by its
// deadline, so the old owner takes ownership back before the runtime drops
// the newcomer and runs events again: nothing is missed either (this was
// B1: nobody owned the plugin until the newcomer was thawed). Thawed, the
// newcomer reconnects, claims again and owns; nothing is ever acted on
// twice.
func newcomerHung(t *testing.T, bins binaries, m *matrix, step protocol.Step) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{RequestTimeout: hungRequestTimeout}, nil, 200)

	lo := len(n.rt.IssuedLog())
	newp := n.startProcEnv("audit-new", "2.0.0", failpoint(step, "stop"))
	newp.waitStopped(ctx, t)
	stopped := time.Now()
	// Events go on once the runtime gave up on the hung Synchronize.
	s.waitEvents(ctx, t, n.rt.Stats().Events+1)
	resumed := time.Now()
	back := "kept owning"
	if step == protocol.StepClaimLocked {
		if !n.owns(ctx, old.id) {
			t.Errorf("%s lost ownership to a newcomer hung before asking", old.id)
		}
	} else {
		// The old owner took ownership back before the runtime ran events
		// again; it owns by the time the first of them is delivered.
		if !n.owns(ctx, old.id) {
			st, _ := n.statusOf(ctx, old.id)
			t.Fatalf("newcomer hung at %s after the owner yielded: the old owner does not own the plugin once the "+
				"runtime dropped the newcomer (it is %v: %s)", step, st.GetRole(), st.GetReason())
		}
		st, _ := n.statusOf(ctx, old.id)
		back = fmt.Sprintf("owned again before events resumed (%s)", st.GetReason())
	}
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)
	hungAt := len(n.rt.IssuedLog())
	thawed := time.Now()
	newp.signal(t, syscall.SIGCONT)
	newp.thawAlways(t)
	took := n.waitOwns(ctx, t, newp).Sub(thawed)
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)
	tl := n.finishScenario(ctx, t, s, map[string]int{"10-audit": 1}, newp, old)
	expectRuns(t, tl, []string{old.id, newp.id})
	m.add("%-36s runtime held events %s; old owner %s; newcomer owns %s after the thaw; started at #%d, thawed at #%d; %s",
		"newcomer stop at "+string(step), ms(resumed.Sub(stopped)), back, ms(took), lo, hungAt, tl)
}

// oldOwnerKilledIdle: the owner is killed (SIGKILL) while no event is in
// flight, before the newcomer starts; it leaves owner.sock and its own
// socket behind. The newcomer finds nothing answering there, owns the
// plugin at once (epoch on record + 1), and every event is acted on once.
func oldOwnerKilledIdle(t *testing.T, bins binaries, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{}, nil, 300)
	s.finish()
	old.signal(t, syscall.SIGKILL)
	old.wait(ctx, t)
	for _, f := range []string{ownerSocket(n.root), instanceSocket(n.root, old.id)} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the killed owner left no %s: %v", f, err)
		}
	}

	newp, took := n.newcomerOwns(ctx, t, "audit-new")
	st, _ := n.statusOf(ctx, newp.id)
	if st.GetEpoch() != 2 || st.GetReason() != "no owner on the node" {
		t.Errorf("newcomer: epoch %d, %q; want epoch 2, no owner on the node", st.GetEpoch(), st.GetReason())
	}
	s2 := n.startStream(ctx, 2)
	s2.waitEvents(ctx, t, n.rt.Stats().Events+300)
	tl := n.finishScenario(ctx, t, s2, map[string]int{}, newp)
	checkRuntime(t, n, s, map[string]int{})
	expectRuns(t, tl, []string{old.id, newp.id})
	m.add("%-36s newcomer owns %8s after its start (%s); %s", "old owner kill before (idle)", ms(took), st.GetReason(), tl)
}

// oldOwnerKilledAfter: the retired old owner is killed right after the
// newcomer owns, under load. It acts on nothing any more, so nothing
// changes: every event is acted on once.
func oldOwnerKilledAfter(t *testing.T, bins binaries, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{}, nil, 200)
	newp, took := n.newcomerOwns(ctx, t, "audit-new")
	old.signal(t, syscall.SIGKILL)
	old.wait(ctx, t)
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)
	if !n.owns(ctx, newp.id) {
		t.Errorf("%s lost ownership when the retired instance was killed", newp.id)
	}
	tl := n.finishScenario(ctx, t, s, map[string]int{}, newp)
	expectRuns(t, tl, []string{old.id, newp.id})
	m.add("%-36s newcomer owns %8s after its start, keeps owning; %s", "old owner kill after (retired)", ms(took), tl)
}

// newOwnerKilled: the new owner dies (SIGKILL) shortly after the switch,
// under load, while the old instance is still alive (retired). The old one
// sees its successor's connection break and takes ownership back
// (watchSuccessor, promoteIfOrphaned). The event the new owner was handling
// when it died and those delivered before the promotion may be missed:
// they all lie between the kill and the old instance's first act after it.
func newOwnerKilled(t *testing.T, bins binaries, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{}, nil, 200)
	newp, _ := n.newcomerOwns(ctx, t, "audit-new")
	s.waitEvents(ctx, t, n.rt.Stats().Events+200)

	lo := len(n.rt.IssuedLog())
	newp.signal(t, syscall.SIGKILL)
	newp.wait(ctx, t)
	window := n.waitTakeBack(ctx, t, old, time.Now())
	st, _ := n.statusOf(ctx, old.id)
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)
	tl := n.finishScenario(ctx, t, s, map[string]int{}, old)
	expectRuns(t, tl, []string{old.id, newp.id, old.id}, []string{old.id, newp.id, missed, old.id})
	for _, i := range tl.missedAt {
		if i < lo {
			t.Errorf("event #%d missed before the kill (#%d)", i, lo)
		}
	}
	m.add("%-36s old instance owns again %8s after the kill (%s); %s", "new owner kill after the switch", ms(window), st.GetReason(), tl)
}

// racingNewcomers: three newcomers start at once next to a loaded owner.
// The runtime synchronizes them one at a time, so there is one handover
// at a time; the most recently started ends up owner (policy
// newest-instance), the others retired or standby, every event acted on
// once.
func racingNewcomers(t *testing.T, bins binaries, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{}, nil, 200)
	started := time.Now()
	var ps []*proc
	for i := 1; i <= 3; i++ {
		ps = append(ps, n.startPlugin(fmt.Sprintf("audit-r%d", i), "2.0.0"))
	}
	// The newest by the start time each instance reports.
	var newest *proc
	var newestAt int64
	for _, p := range ps {
		var st *hapi.StatusResponse
		var err error
		tick := time.NewTicker(ownerPoll)
		for st, err = n.statusOf(ctx, p.id); err != nil; st, err = n.statusOf(ctx, p.id) {
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatalf("%s never answered: %v", p.id, err)
			}
		}
		tick.Stop()
		if at := st.Instance.GetStartedUnixNano(); at > newestAt {
			newest, newestAt = p, at
		}
	}
	took := n.waitOwns(ctx, t, newest).Sub(started)
	if err := n.rt.WaitPlugins(ctx, 4); err != nil {
		t.Fatal(err)
	}
	s.waitEvents(ctx, t, n.rt.Stats().Events+300)
	roles := map[string]string{}
	for _, p := range append([]*proc{old}, ps...) {
		st, err := n.statusOf(ctx, p.id)
		if err != nil {
			t.Fatal(err)
		}
		roles[p.id] = protocol.RoleName(st.Role)
		if p != newest && st.Role == hapi.Role_ROLE_OWNER {
			t.Errorf("%s also says it owns the plugin: %v", p.id, st)
		}
	}
	if !n.owns(ctx, newest.id) {
		t.Errorf("the newest newcomer %s does not own the plugin", newest.id)
	}
	tl := n.finishScenario(ctx, t, s, map[string]int{}, append(ps, old)...)
	if len(tl.missedAt) != 0 || tl.runs[0] != old.id || tl.runs[len(tl.runs)-1] != newest.id {
		t.Errorf("want every event acted on once, first by %s, last by %s: %v", old.id, newest.id, tl)
	}
	m.add("%-36s newest (%s) owns %8s after the three started; roles %v; %s", "racing newcomers (3)", newest.id, ms(took), roles, tl)
}

// invalidStarts: instances that must not start, next to a running owner:
// each exits 1 with a clear error at once, and the owner is undisturbed
// (still owner, its socket and the owner name untouched).
func invalidStarts(t *testing.T, bins binaries, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n := newProcNode(t, bins, sim.Options{})
	old := n.startPlugin("audit-old", "1.0.0")
	n.waitOwns(ctx, t, old)
	before, err := os.Stat(instanceSocket(n.root, old.id))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id, version string
		env, extra  []string
		want        string
	}{
		{"bad-version", "v1..2", nil, nil, `invalid plugin version "v1..2"`},
		{"bad-version-2", "1.0;0", nil, nil, `invalid plugin version "1.0;0"`},
		{"bad-policy", "2.0.0", nil, []string{"-policy", "oldest"}, `unknown handover policy "oldest"`},
		{"bad-policy-env", "2.0.0", []string{plugin.EnvPolicy + "=Newest-Version"}, nil,
			`$NRI_HANDOVER_POLICY: unknown handover policy "Newest-Version"`},
		{"bad-index", "2.0.0", nil, []string{"-idx", "7"}, `invalid plugin index "7": want two digits`},
		{"bad-failpoint", "2.0.0", []string{fp.Env + "=owner:crash"}, nil,
			`$NRI_HANDOVER_FAILPOINT="owner:crash": want <step>:kill or <step>:stop`},
		{"pod x", "2.0.0", nil, nil, `invalid instance id "pod x": only [-_.a-zA-Z0-9] allowed`},
		{"audit-old", "2.0.0", nil, nil, `instance id "audit-old" is already in use`},
	}
	for _, tc := range cases {
		started := time.Now()
		p := n.startProcEnv(tc.id, tc.version, tc.env, tc.extra...)
		st := p.wait(ctx, t)
		b, _ := os.ReadFile(p.log)
		out := strings.TrimSpace(string(b))
		if st.ExitCode() != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, output %q; want exit 1 and %q", tc.id, st.ExitCode(), out, tc.want)
		}
		m.add("%-36s exit %d after %s: %s", "invalid start: "+tc.id, st.ExitCode(), ms(time.Since(started)), lastLine(out))
	}
	after, err := os.Stat(instanceSocket(n.root, old.id))
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the owner's socket was replaced or removed: %v", err)
	}
	if !n.owns(ctx, old.id) {
		t.Errorf("%s no longer owns the plugin", old.id)
	}
	stopPod(ctx, t, old)
}

// lastLine is the last line of s, without surrounding space.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestStaleFilesOfACrashedOwner: an owner crashed and left its socket,
// owner.sock leading to it, a temporary owner link of an interrupted
// publish, the claim lock file and the epoch record. An instance with the
// crashed one's id (its container restarted in the same pod) starts over
// the stale socket, finds no owner answering, and owns the plugin with the
// next epoch; another instance then takes over normally. Every event is
// acted on once.
func TestStaleFilesOfACrashedOwner(t *testing.T) {
	n := newNode(t)
	dir, err := protocol.OpenDir(n.root, "audit")
	if err != nil {
		t.Fatal(err)
	}
	crashed := dir.InstanceSocket("a")
	testutil.DeadSocket(t, crashed)
	if err := os.Link(crashed, dir.OwnerSocket()); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(crashed, dir.OwnerSocket()+".tmp-999999"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir.Path(), "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The crashed owner's epoch, 7, in owner.gen (little-endian 64-bit
	// counter at offset 8; OpenDir above created the file).
	gen, err := os.OpenFile(filepath.Join(dir.Path(), "owner.gen"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.WriteAt(binary.LittleEndian.AppendUint64(nil, 7), 8); err != nil {
		t.Fatal(err)
	}
	gen.Close()

	a := n.start("a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	if st := a.p.Status(); st.Epoch != 8 || st.Reason != "no owner on the node" {
		t.Fatalf("restarted instance: epoch %d, %q; want epoch 8 after the crashed owner's 7", st.Epoch, st.Reason)
	}
	if !sameFile(t, dir.OwnerSocket(), crashed) {
		t.Fatal("owner.sock does not lead to the restarted instance's socket")
	}
	n.lifecycles(3)
	b := n.start("b", "2.0.0")
	waitRole(t, b, handover.RoleOwner)
	waitRole(t, a, handover.RoleRetired)
	n.lifecycles(3)
	rep := n.check()
	if rep.ByInstance["a"] == 0 || rep.ByInstance["b"] == 0 {
		t.Fatalf("acts by instance %v", rep.ByInstance)
	}
}

// TestHandoverDirFaults: a missing handover directory is created private;
// one that others may write, that another user owns or that is not a
// plain directory is refused at start with an error naming it and the
// problem; a read-only one (a read-only bind mount, or a 0500 directory
// checked by an unprivileged user, since root bypasses permission bits) is
// refused at start. A refused instance never runs, so there is never a
// second owner; the running owner is not disturbed.
func TestHandoverDirFaults(t *testing.T) {
	n := newNode(t)
	owner := n.start("owner", "1.0.0")
	waitRole(t, owner, handover.RoleOwner)
	tmp := testutil.ShortTempDir(t, "nhd-")
	// Instances in other directories never reach the runtime: no second
	// owner of the plugin may appear there.
	base := func(root string) []plugin.Option {
		return []plugin.Option{
			plugin.WithVersion("2.0.0"), plugin.WithPluginName("audit"), plugin.WithPluginIdx("10"),
			plugin.WithHandoverDir(root), plugin.WithInstanceID("x"), plugin.WithLogger(logrus.NewEntry(n.log)),
			plugin.WithSocketPath(filepath.Join(tmp, "no-runtime.sock")),
		}
	}
	author := n.auditPlugin("x", "2.0.0")
	if err := os.Chmod(tmp, 0o755); err != nil { // for the child run as another user
		t.Fatal(err)
	}

	t.Run("missing", func(t *testing.T) {
		root := filepath.Join(tmp, "missing")
		p, err := plugin.New(author, base(root)...)
		if err != nil {
			t.Fatal(err)
		}
		runBriefly(t, p)
		for _, d := range []string{root, filepath.Join(root, "audit"), filepath.Join(root, "audit", "instances")} {
			if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v %v, want a directory with mode 0700", d, fi.Mode(), err)
			}
		}
		if fi, err := os.Stat(filepath.Join(root, "audit", "stamp.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("stamp key: %v %v, want mode 0600", fi.Mode(), err)
		}
		_, err = plugin.New(author, base(filepath.Join(tmp, "no", "parent"))...)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(tmp, "no", "parent")) ||
			!strings.Contains(err.Error(), "no such file or directory") {
			t.Errorf("root with a missing parent: %v", err)
		}
	})

	refused := []struct {
		name  string
		setup func(root string) error
		want  string
	}{
		{"root 0777", func(root string) error { return os.Chmod(root, 0o777) }, "mode -rwxrwxrwx lets other users write; want 0700"},
		{"root 0770", func(root string) error { return os.Chmod(root, 0o770) }, "mode -rwxrwx--- lets other users write"},
		{"plugin dir 0777", func(root string) error {
			return os.Mkdir(filepath.Join(root, "audit"), 0o777|os.ModeSticky) // umask may clear bits: chmod below
		}, "audit: mode -rwxrwxrwx lets other users write"},
		{"instances 0757", func(root string) error {
			if err := os.MkdirAll(filepath.Join(root, "audit", "instances"), 0o700); err != nil {
				return err
			}
			return os.Chmod(filepath.Join(root, "audit", "instances"), 0o757)
		}, "instances: mode -rwxr-xrwx lets other users write"},
		{"owned by another user", func(root string) error { return os.Chown(root, 65534, 65534) }, "owned by uid 65534, not by this process (uid 0)"},
		{"a file", func(root string) error {
			if err := os.Remove(root); err != nil {
				return err
			}
			return os.WriteFile(root, nil, 0o600)
		}, "not a directory"},
		{"a symlink", func(root string) error {
			if err := os.Remove(root); err != nil {
				return err
			}
			return os.Symlink(filepath.Join(tmp, "missing"), root)
		}, "not a directory"},
	}
	for i, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "owned by another user" && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			root := filepath.Join(tmp, fmt.Sprintf("r%d", i))
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.setup(root); err != nil {
				t.Fatal(err)
			}
			if tc.name == "plugin dir 0777" {
				if err := os.Chmod(filepath.Join(root, "audit"), 0o777); err != nil {
					t.Fatal(err)
				}
			}
			p, err := plugin.New(author, base(root)...)
			if err == nil {
				runBriefly(t, p)
				t.Fatalf("started in a handover directory that is %s", tc.name)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "handover directory "+root) {
				t.Errorf("error %q, want it to name %s and say %q", err, root, tc.want)
			}
			if matches, _ := filepath.Glob(filepath.Join(root, "audit", "instances", "*")); len(matches) != 0 {
				t.Errorf("a refused instance left %v", matches)
			}
		})
	}

	t.Run("read-only bind mount", func(t *testing.T) {
		// A directory a previous instance set up, then mounted read-only in
		// a private mount namespace of a child process.
		root := filepath.Join(tmp, "ro")
		if err := os.MkdirAll(filepath.Join(root, "audit", "instances"), 0o700); err != nil {
			t.Fatal(err)
		}
		out := runChild(t, childSpec{name: "new-plugin", args: []string{root}, readOnly: root})
		if strings.HasPrefix(out, "mount: ") {
			t.Skipf("cannot make a read-only bind mount here: %s", out)
		}
		want := "error: handover directory " + root + ": not writable: read-only file system"
		if out != want {
			t.Errorf("on a read-only bind mount: %q, want %q", out, want)
		}
	})
	t.Run("read-only 0500 as another user", func(t *testing.T) {
		parent := filepath.Join(tmp, "nobody")
		if err := os.Mkdir(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []string{"", "audit"} {
			root := filepath.Join(parent, "root"+ro)
			if err := os.MkdirAll(filepath.Join(root, "audit", "instances"), 0o700); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{root, filepath.Join(root, "audit"), filepath.Join(root, "audit", "instances")} {
				if err := os.Chown(d, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			target := filepath.Join(root, ro)
			if err := os.Chmod(target, 0o500); err != nil {
				t.Fatal(err)
			}
			out := runChild(t, childSpec{name: "new-plugin", args: []string{root}, uid: 65534, binDir: parent})
			want := "error: handover directory " + filepath.Clean(target) + ": not writable: permission denied"
			if out != want {
				t.Errorf("0500 %s as uid 65534: %q, want %q", target, out, want)
			}
		}
	})
	if !n.owns(owner) {
		t.Error("the running owner was disturbed")
	}
	n.lifecycles(2)
	n.check()
}

// nriProxy stands at a fixed NRI socket path for whichever runtime is up,
// so that instances see their runtime go away and come back at the same
// path (internal/sim picks a fresh socket path per runtime, and its Stop
// leaves external plugins connected). down closes the listening socket and
// every connection, as a runtime that exits does; up listens again,
// forwarding to a (possibly new) runtime.
type nriProxy struct {
	path string

	mu       sync.Mutex
	l        *net.UnixListener
	upstream string
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// newNRIProxy starts a proxy up, forwarding to the runtime at upstream.
// It is taken down when the test ends.
func newNRIProxy(t *testing.T, upstream string) *nriProxy {
	t.Helper()
	dir := testutil.ShortTempDir(t, "nhr-")
	px := &nriProxy{path: filepath.Join(dir, "nri.sock"), conns: map[net.Conn]struct{}{}}
	t.Cleanup(px.down)
	px.up(t, upstream)
	return px
}

// up listens at the proxy's path and forwards every connection to the
// runtime at upstream, until down.
func (px *nriProxy) up(t *testing.T, upstream string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: px.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	px.mu.Lock()
	px.l, px.upstream = l, upstream
	px.mu.Unlock()
	px.wg.Add(1)
	go func() {
		defer px.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", upstream)
			if err != nil {
				c.Close()
				continue
			}
			px.mu.Lock()
			px.conns[c], px.conns[up] = struct{}{}, struct{}{}
			px.mu.Unlock()
			px.wg.Add(2)
			go px.pipe(c, up)
			go px.pipe(up, c)
		}
	}()
}

// pipe copies src to dst until either side closes, then closes both.
func (px *nriProxy) pipe(dst, src net.Conn) {
	defer px.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	px.mu.Lock()
	delete(px.conns, dst)
	delete(px.conns, src)
	px.mu.Unlock()
}

// down closes the listening socket and every connection, and waits for
// the forwarding to end.
func (px *nriProxy) down() {
	px.mu.Lock()
	if px.l != nil {
		px.l.Close() // removes the socket file
		px.l = nil
	}
	for c := range px.conns {
		c.Close()
	}
	px.mu.Unlock()
	px.wg.Wait()
}

// reconnectBound is how long instances may take to be back with a runtime
// that went away and came back at once: a few times the first reconnection
// delay (50 ms) plus a synchronization.
const reconnectBound = 300 * time.Millisecond

// TestRuntimeRestart: the runtime goes away and comes back on the same
// socket path, first with its containers (containerd restarting: the
// runtime closes every plugin connection, then synchronizes the plugins
// with the containers it kept), then as a new runtime with none. Every
// instance reconnects with backoff and resynchronizes; the owner, the
// retired instance and the standby keep their roles; the owner does not
// act again on the containers it stamped (they are not handed to its
// author's Synchronize; only a container created while no instance was
// connected is); every event delivered while they are connected is acted
// on once.
func TestRuntimeRestart(t *testing.T) {
	n := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	px := newNRIProxy(t, n.rt.SocketPath())
	viaProxy := plugin.WithSocketPath(px.path)
	pol := plugin.WithPolicy(handover.NewestVersion{})
	authors := map[string]*syncAuthor{}
	start := func(id, ver string) *running {
		authors[id] = newSyncAuthor(n, id, ver)
		return n.startAuthor(id, ver, authors[id], viaProxy, pol)
	}
	a := start("a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	b := start("b", "2.0.0")
	waitRole(t, b, handover.RoleOwner)
	waitRole(t, a, handover.RoleRetired)
	c := start("c", "1.5.0")
	waitRole(t, c, handover.RoleStandby)
	if err := n.rt.WaitPlugins(ctx, 3); err != nil {
		t.Fatal(err)
	}
	<-authors["a"].synced
	<-authors["b"].synced
	roles := func(when string) {
		t.Helper()
		for r, want := range map[*running]handover.Role{a: handover.RoleRetired, b: handover.RoleOwner, c: handover.RoleStandby} {
			if got := r.p.Role(); got != want {
				t.Errorf("%s: %s is %v, want %v", when, r.p.Instance().ID, got, want)
			}
		}
		if !n.owns(b) {
			t.Errorf("%s: owner.sock does not lead to b", when)
		}
	}

	// Long-running containers, created (and stamped) by the owner.
	pod, err := n.rt.RunPod(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	var long []string
	for i := 0; i < 3; i++ {
		ctr, err := n.rt.CreateContainer(ctx, pod.Id, fmt.Sprintf("c%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.rt.StartContainer(ctx, ctr.Id); err != nil {
			t.Fatal(err)
		}
		long = append(long, ctr.Id)
	}
	n.lifecycles(2)

	// 1. The runtime closes every connection and comes back with its
	// containers, one of them created while no instance was connected.
	px.down()
	before := n.rt.Issued()
	x, err := n.rt.CreateContainer(ctx, pod.Id, "while-down", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.rt.WaitPlugins(ctx, 0); err != nil {
		t.Fatal(err)
	}
	unattended := map[sim.EventKey]int{}
	for k, v := range n.rt.Issued() {
		if d := v - before[k]; d > 0 {
			unattended[k] = d
		}
	}
	upAt := time.Now()
	px.up(t, n.rt.SocketPath())
	if err := n.rt.WaitPlugins(ctx, 3); err != nil {
		t.Fatal(err)
	}
	reconnect := []time.Duration{time.Since(upAt)}
	roles("after the runtime closed every connection")
	select {
	case got := <-authors["b"].synced:
		if fmt.Sprint(got) != fmt.Sprint([]string{x.Id}) {
			t.Errorf("the owner's author was handed %v in Synchronize, want only the unstamped %s (not %v)", got, x.Id, long)
		}
	case <-ctx.Done():
		t.Fatal("the owner's author saw no Synchronize")
	}
	for _, id := range []string{"a", "c"} {
		select {
		case got := <-authors[id].synced:
			t.Errorf("%s, not the owner, was synchronized with %v", id, got)
		default:
		}
	}
	for _, r := range []*running{a, b, c} {
		if st := r.p.Stats(); st.Disconnects != 1 {
			t.Errorf("%s: %d disconnects, want 1", r.p.Instance().ID, st.Disconnects)
		}
	}
	for i, id := range long {
		if err := n.rt.UpdateContainer(ctx, id, uint64(512+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.rt.RemovePod(ctx, pod.Id); err != nil {
		t.Fatal(err)
	}
	n.lifecycles(2)

	// 2. A new runtime on the same socket path.
	runtimes := []*sim.Runtime{n.rt}
	for i := 0; i < 1; i++ {
		px.down()
		rt := testutil.StartRuntime(t, sim.Options{})
		runtimes = append(runtimes, rt)
		upAt := time.Now()
		px.up(t, rt.SocketPath())
		if err := rt.WaitPlugins(ctx, 3); err != nil {
			t.Fatal(err)
		}
		reconnect = append(reconnect, time.Since(upAt))
		roles(fmt.Sprintf("after runtime restart %d", i+1))
		if got := <-authors["b"].synced; len(got) != 0 {
			t.Errorf("the new runtime has no containers, the owner's author was handed %v", got)
		}
		if err := rt.Lifecycle(ctx, fmt.Sprintf("r%d", i), 2); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("instances back with the runtime after each restart: %v", reconnect)

	issued := map[sim.EventKey]int{}
	for _, rt := range runtimes {
		for k, v := range rt.Issued() {
			issued[k] += v - unattended[k]
		}
		st := rt.Stats()
		if st.FailedCreates != 0 || len(st.Timeouts) != 0 {
			t.Errorf("runtime: %d failed creations, timeouts %v", st.FailedCreates, st.Timeouts)
		}
	}
	rep := n.ledger.Compare(issued, nil)
	if !rep.OK() || rep.ByInstance["a"] != 0 || rep.ByInstance["c"] != 0 {
		t.Errorf("ledger: %v; acts by instance %v", rep, rep.ByInstance)
	}
	for i, d := range reconnect {
		if d > reconnectBound {
			t.Errorf("restart %d: the instances were back %v after the runtime, want at most %v", i, d, reconnectBound)
		}
	}
}

// TestRuntimeRestartsReconnectPromptly: a runtime that restarts several
// times over a plugin's life (each connection working in between) gets the
// plugin back within the same bound each time.
func TestRuntimeRestartsReconnectPromptly(t *testing.T) {
	n := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	px := newNRIProxy(t, n.rt.SocketPath())
	a := n.start("a", "1.0.0", plugin.WithSocketPath(px.path))
	waitRole(t, a, handover.RoleOwner)
	if err := n.rt.WaitPlugins(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var reconnect []time.Duration
	for i := 0; i < 4; i++ {
		px.down()
		upAt := time.Now()
		px.up(t, n.rt.SocketPath())
		if err := n.rt.Lifecycle(ctx, fmt.Sprintf("r%d", i), 1); err != nil { // counts the closed connection out
			t.Fatal(err)
		}
		if err := n.rt.WaitPlugins(ctx, 1); err != nil {
			t.Fatal(err)
		}
		reconnect = append(reconnect, time.Since(upAt))
		if d := reconnect[i]; d > reconnectBound {
			// It was B3, fixed: the backoff doubled at every lost connection
			// and was never reset after a successful one.
			t.Errorf("runtime restart %d: the plugin was back after %v, want at most %v; delays %v",
				i+1, d.Round(time.Millisecond), reconnectBound, reconnect)
		}
	}
	t.Logf("plugin back with the runtime after each restart: %v", reconnect)
}

// lockHolderHung: a newcomer hangs (SIGSTOP) holding the claim lock; a
// second newcomer, started meanwhile, cannot take the lock within its
// claim budget and stays standby; events keep going to the owner. Once the
// hung one is killed (the kubelet's liveness probe would), the kernel
// releases the lock, and the second newcomer, whom the policy lets take
// over, claims again and owns the plugin within a bound.
func lockHolderHung(t *testing.T, bins binaries, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	n, old, s := loadedOwner(ctx, t, bins, sim.Options{RequestTimeout: hungRequestTimeout}, nil, 200)
	hung := n.startProcEnv("audit-hung", "2.0.0", failpoint(protocol.StepClaimLocked, "stop"))
	hung.waitStopped(ctx, t)
	s.waitEvents(ctx, t, n.rt.Stats().Events+1) // the runtime gave up on it
	second := n.startPlugin("audit-second", "2.0.0")
	tick := time.NewTicker(ownerPoll)
	var st *hapi.StatusResponse
	for {
		var err error
		if st, err = n.statusOf(ctx, second.id); err == nil && st.Role != hapi.Role_ROLE_JOINING {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s never claimed", second.id)
		}
	}
	tick.Stop()
	if st.Role != hapi.Role_ROLE_STANDBY || !strings.Contains(st.Reason, "another handover is in progress") {
		t.Fatalf("second newcomer: %v (%s), want standby: the lock is held", st.Role, st.Reason)
	}
	if !n.owns(ctx, old.id) {
		t.Fatalf("%s lost ownership", old.id)
	}
	s.waitEvents(ctx, t, n.rt.Stats().Events+200)
	hung.signal(t, syscall.SIGKILL)
	hung.wait(ctx, t)
	killed := time.Now()
	bctx, bcancel := context.WithTimeout(ctx, takeBackBound)
	defer bcancel()
	tick = time.NewTicker(ownerPoll)
	defer tick.Stop()
	for !n.owns(ctx, second.id) {
		select {
		case <-tick.C:
			continue
		case <-bctx.Done():
		}
		// It was B5, fixed: a newcomer refused for a busy lock only
		// watched the owner and never claimed again.
		st, _ := n.statusOf(ctx, second.id)
		t.Fatalf("a newcomer refused because the claim lock was busy is still %v (%s) %v after the lock holder died",
			st.GetRole(), st.GetReason(), takeBackBound)
	}
	took := "owns " + ms(time.Since(killed))
	if !n.owns(ctx, second.id) {
		took = "NEVER owns"
	}
	s.waitEvents(ctx, t, n.rt.Stats().Events+200)
	tl := n.finishScenario(ctx, t, s, map[string]int{"10-audit": 1}, second, old)
	expectRuns(t, tl, []string{old.id, second.id})
	m.add("%-36s second newcomer %s after the lock holder was killed; %s", "claim lock holder hung", took, tl)
}

// TestClaimBoundedByItsBudget: Claim is documented as bounded by the claim
// timeout, and the design relies on it: the claim must be over long before
// the runtime gives up on the Synchronize it runs in, or the switch is no
// longer fenced. A claim delayed between its steps (the process frozen or
// starved after taking the claim lock) must therefore give up rather than
// ask the owner to yield after its budget is spent. (The process row
// "newcomer hung at claim-locked" once showed the harm: thawed after the
// runtime had dropped its connection, the newcomer's claim went on, the
// owner yielded outside the fence and the newcomer owned the plugin with no
// runtime connection.)
func TestClaimBoundedByItsBudget(t *testing.T) {
	root := testutil.ShortTempDir(t, "nhc-")
	dir, err := protocol.OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.NewEntry(logrus.New())
	log.Logger.SetOutput(io.Discard)
	a, err := protocol.New(protocol.Config{Dir: dir, Log: log,
		Self: &hapi.Instance{Plugin: "demo", Id: "a", Version: "1.0.0", StartedUnixNano: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if role, err := a.Claim(context.Background()); role != hapi.Role_ROLE_OWNER {
		t.Fatalf("first claim: %v %v", role, err)
	}
	const budget = 200 * time.Millisecond
	b, err := protocol.New(protocol.Config{Dir: dir, Log: log, ClaimTimeout: budget,
		Self: &hapi.Instance{Plugin: "demo", Id: "b", Version: "2.0.0", StartedUnixNano: 2},
		Failpoint: func(s protocol.Step) {
			if s == protocol.StepClaimLocked {
				time.Sleep(budget + 50*time.Millisecond) // frozen between two steps
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	// The runtime's 2 s request timeout, as the plugin sees it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	role, _ := b.Claim(ctx)
	took := time.Since(start)
	if role == hapi.Role_ROLE_OWNER || a.Status().Role != hapi.Role_ROLE_OWNER {
		t.Fatalf("a claim with a %v budget asked the owner to yield after %v and took ownership (%s): a claim "+
			"delayed after the claim lock must give up, or it can move ownership after the runtime gave up on its "+
			"Synchronize (this was B4)", budget, took.Round(time.Millisecond), b.Status().Reason)
	}
}
