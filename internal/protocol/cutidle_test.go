package protocol

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// logHook calls fire for every log entry (on the goroutine that logs).
type logHook struct{ fire func(*logrus.Entry) }

func (h logHook) Levels() []logrus.Level     { return logrus.AllLevels }
func (h logHook) Fire(e *logrus.Entry) error { h.fire(e); return nil }

// TestCutIdleHeirHeldAfterAnUnseenFirstCall: the owner acts on an event
// before its heir is appended; the runtime drops the owner (frozen); the
// next event has the same key and reaches the heir alone, whose first
// call takes it for the second call of the owner's (rule 1) and skips it.
// Then the node is idle. The idle rule must not promote the heir silently
// (model finding C6, cut-x20: it did, the heir acted from the next event
// on and nothing declared the skipped one): it holds off, and the next
// event decides (rule 2 declares it); with no event, it promotes after
// the hold declaring it. With the owner alive (called first at the next
// event), the owner hands over and nothing is declared. PromoteWhenIdle
// runs on the real time (the cut's timings are not on Config.Clock) with a
// quiet interval of 1 ms; the test waits for its hold-off's log line,
// where the hook stops it until the next event has been decided.
func TestCutIdleHeirHeldAfterAnUnseenFirstCall(t *testing.T) {
	const kind = 1 << 3
	for _, tc := range []struct {
		name              string
		ownerAlive, event bool // the owner is called first at the next event; an event comes during the hold
		declared          uint64
	}{
		{"dropped-next-event-decides", false, true, 1},
		{"dropped-no-event-declared-at-promotion", false, false, 1},
		{"owner-alive-hands-over", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := OpenDir(testRoot(t), "cut")
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			held, resume := make(chan struct{}), make(chan struct{})
			logger := logrus.New()
			logger.SetOutput(io.Discard)
			logger.AddHook(logHook{func(e *logrus.Entry) {
				if tc.event && strings.HasPrefix(e.Message, "idle: not promoting") {
					held <- struct{}{}
					<-resume
				}
			}})
			promoted := make(chan uint64, 4)
			c, err := New(Config{Dir: d, Self: &api.Instance{Plugin: "cut", Id: "a", Version: "1", StartedUnixNano: 1},
				Log: logrus.NewEntry(logger), OnPromoted: func(e uint64) { promoted <- e }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A reconnection: the owner and its heir are connections of
			// this instance, the owner's still open (not gone).
			owner, heir := c.Conn(kind), c.Conn(kind)
			d.updateCut(func(w *cutWord) bool { *w = cutWord{owner: owner, heir: heir, quiet: true}; return true })
			d.setOwnerEvents(owner, kind)
			d.setHeirEvents(kind)
			if !c.Decide(owner, 1, kind, nil).Act { // event 0, the heir not yet appended
				t.Fatal("event 0: the owner did not act")
			}
			c.Finish(owner, 1)
			if tc.ownerAlive { // event 1, key 1 again: the owner first
				if !c.Decide(owner, 1, kind, nil).Act {
					t.Fatal("event 1: the owner did not act")
				}
				c.Finish(owner, 1)
			}
			if c.Decide(heir, 1, kind, nil).Act { // the heir's first call: rule 1 skips it
				t.Fatal("event 1: the heir acted on the owner's last key")
			}
			done := make(chan bool, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { done <- c.PromoteWhenIdle(ctx, heir, time.Millisecond) }()
			if tc.event {
				select {
				case <-held:
				case p := <-done:
					t.Fatalf("the idle rule promoted the heir (%v) after its unseen first call, without holding off", p)
				}
				// Event 2 (another key), the idle rule held off.
				if tc.ownerAlive {
					if dec := c.Decide(owner, 2, kind, nil); dec.Act || !dec.HandedOver {
						t.Fatalf("event 2: the owner did not hand over: %+v", dec)
					}
				}
				dec := c.Decide(heir, 2, kind, nil)
				close(resume)
				if !dec.Act || dec.Overrun == tc.ownerAlive {
					t.Fatalf("event 2: the heir acted %v, declared event 1 %v; want acting, declaring %v: %+v", dec.Act, dec.Overrun, !tc.ownerAlive, dec)
				}
				if !<-done {
					t.Fatal("PromoteWhenIdle: the heir does not own the register after event 2")
				}
			} else {
				if !<-done {
					t.Fatal("PromoteWhenIdle: no promotion after the hold")
				}
				if dec := c.Decide(heir, 2, kind, nil); !dec.Act || dec.Overrun || dec.InDoubt {
					t.Fatalf("event 2 after the idle promotion: %+v", dec)
				}
			}
			if n := c.InDoubt(); n != tc.declared {
				t.Fatalf("event 1 declared in doubt %d times, want %d", n, tc.declared)
			}
			if n := uint64(len(promoted)); n != tc.declared {
				t.Fatalf("%d catch-ups, want %d", n, tc.declared)
			}
		})
	}
}

// TestCutFreshTakerOfAnOverrunDeclaresTheGap: the owner's handler for an
// event does not finish (frozen, the runtime gives up on it) and the
// connection that takes over by rule 3 is called for the first time, for
// another event: it was not in the runtime's chain when the runtime gave
// up on the owner (appended after its Synchronize, with no plugin-sync
// block around the append: CRI-O), so what came in between may have
// reached no connection of the plugin, and it must declare that window as
// a gap (the demo, mode cri-o, -faults 10 -seed 5, had hundreds of events
// pass an empty chain unsaid). A taker that was called before (in the
// chain all along), or whose first call has the overran event's key (it
// may be that event, so it was in the chain), declares no gap.
func TestCutFreshTakerOfAnOverrunDeclaresTheGap(t *testing.T) {
	const kind = 1 << 3
	for _, tc := range []struct {
		name       string
		calledOnce bool   // the taker was called for an event before
		takerKey   uint32 // the key of the taker's call
		gaps       uint64
	}{
		{"fresh-other-event", false, 3, 1},
		{"fresh-the-overran-event", false, 2, 0},
		{"in-the-chain-before", true, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, b, owner, taker := newOwnerAndTaker(t, kind)
			if !a.Decide(owner, 1, kind, nil).Act {
				t.Fatal("the owner did not act on event 1")
			}
			a.Finish(owner, 1)
			if tc.calledOnce {
				if dec := b.Decide(taker, 1, kind, nil); dec.Act {
					t.Fatalf("the taker acted on event 1 (the owner's): %+v", dec)
				}
			}
			if !a.Decide(owner, 2, kind, nil).Act { // never finished: overran
				t.Fatal("the owner did not act on event 2")
			}
			dec := b.Decide(taker, tc.takerKey, kind, nil)
			if !dec.Overrun || !dec.Promoted {
				t.Fatalf("the taker did not take over by rule 3: %+v", dec)
			}
			if got := b.Gaps(); got != tc.gaps {
				t.Errorf("gaps declared %d, want %d", got, tc.gaps)
			}
		})
	}
}

// TestCutFreshTakerOfASkippedOwnerDeclaresTheGap: rule 4 at a connection's
// second call (the owner was not called for the event of its first, and
// recorded nothing since): the taker was appended after the owner's last
// act, and what came between may have reached no connection of the
// plugin: declared as a gap. A taker that was called before (in the chain
// while the owner still acted) declares only the event in doubt.
func TestCutFreshTakerOfASkippedOwnerDeclaresTheGap(t *testing.T) {
	const kind = 1 << 3
	for _, tc := range []struct {
		name       string
		calledOnce bool // the taker was called for the owner's last event
		gaps       uint64
	}{
		{"fresh", false, 1},
		{"in-the-chain-before", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, b, owner, taker := newOwnerAndTaker(t, kind)
			if !a.Decide(owner, 1, kind, nil).Act {
				t.Fatal("the owner did not act on event 1")
			}
			a.Finish(owner, 1)
			if tc.calledOnce {
				if dec := b.Decide(taker, 1, kind, nil); dec.Act {
					t.Fatalf("the taker acted on event 1 (the owner's): %+v", dec)
				}
			}
			// Event 2 reaches the taker alone (the owner dropped): skipped.
			if dec := b.Decide(taker, 2, kind, nil); dec.Act || dec.Promoted {
				t.Fatalf("the taker acted on event 2 at once: %+v", dec)
			}
			dec := b.Decide(taker, 3, kind, nil)
			if !dec.skippedOwner || !dec.Promoted || !dec.Act {
				t.Fatalf("the taker did not take over by rule 4: %+v", dec)
			}
			if got := b.Gaps(); got != tc.gaps {
				t.Errorf("gaps declared %d, want %d", got, tc.gaps)
			}
			if got := b.InDoubt(); got != 1 {
				t.Errorf("in doubt %d, want 1 (event 2)", got)
			}
		})
	}
}

// TestCutPromotionBeforeTheAppendDeclaresTheGapWhenItActs: an instance is
// promoted outright (its predecessor gone) for a connection the runtime
// has not called yet (a reconnection or a catch-up between its
// Synchronize and its append). Nobody acts until that connection does, so
// the gap is declared when it acts, not at the promotion: declared then,
// the events until the append went unsaid (the demo, mode cri-o,
// -faults 10 -seed 5: 568 of them). A connection that closes before it
// acts declares the gap at its close; one already in the chain declares
// it at the promotion.
func TestCutPromotionBeforeTheAppendDeclaresTheGapWhenItActs(t *testing.T) {
	const kind = 1 << 3
	for _, tc := range []struct {
		name               string
		calledBefore       bool // the promoted connection was called before
		closes             bool // it closes before it acts
		atPromotion, atEnd uint64
	}{
		{"not-yet-appended-acts", false, false, 0, 1},
		{"not-yet-appended-closes", false, true, 0, 1},
		{"in-the-chain", true, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := OpenDir(testRoot(t), "cut")
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			c := newQuietCoord(t, d, "b")
			const gone = 900 // the owner's connection, of an instance that died
			d.updateCut(func(w *cutWord) bool { *w = cutWord{owner: gone}; return true })
			d.recordAct()
			conn := c.Conn(kind)
			c.mu.Lock()
			c.mainTag = conn
			c.mu.Unlock()
			if tc.calledBefore {
				if dec := c.Decide(conn, 1, kind, nil); dec.Act {
					t.Fatalf("acted before the promotion: %+v", dec)
				}
			}
			c.mu.Lock()
			taken := c.takeCutLocked(false)
			c.mu.Unlock()
			c.reportInDoubt(taken)
			if got := c.Gaps(); got != tc.atPromotion {
				t.Fatalf("gaps at the promotion %d, want %d", got, tc.atPromotion)
			}
			if tc.closes {
				c.DropConn(conn)
			} else if dec := c.Decide(conn, 2, kind, nil); !dec.Act {
				t.Fatalf("the promoted connection did not act: %+v", dec)
			}
			if got := c.Gaps(); got != tc.atEnd {
				t.Errorf("gaps after it %s %d, want %d", map[bool]string{true: "closed", false: "acted"}[tc.closes], got, tc.atEnd)
			}
			if !tc.closes {
				c.Decide(conn, 3, kind, nil)
			}
			if got := c.Gaps(); got != tc.atEnd {
				t.Errorf("gaps after a later event %d, want %d (declared once)", got, tc.atEnd)
			}
		})
	}
}

// newOwnerAndTaker opens a register directory with two instances: a's
// connection owner owns the register; b's connection taker is b's newest
// (it may take over). kind is the events both subscribe to.
func newOwnerAndTaker(t *testing.T, kind uint64) (d *Dir, a, b *Coordinator, owner, taker uint16) {
	t.Helper()
	d, err := OpenDir(testRoot(t), "cut")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	a, b = newQuietCoord(t, d, "a"), newQuietCoord(t, d, "b")
	owner, taker = a.Conn(kind), b.Conn(kind)
	b.mu.Lock()
	b.mainTag = taker
	b.mu.Unlock()
	d.updateCut(func(w *cutWord) bool { *w = cutWord{owner: owner}; return true })
	return d, a, b, owner, taker
}

// newQuietCoord is a coordinator of instance id of plugin "cut" on d that
// logs nothing, closed at the test's end.
func newQuietCoord(t *testing.T, d *Dir, id string) *Coordinator {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	c, err := New(Config{Dir: d, Self: &api.Instance{Plugin: "cut", Id: id, Version: "1", StartedUnixNano: 1},
		Log: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFollowingAnOverrunTakesNothingOnceTheRegisterMovedOn: instance b's
// connection took the register over from a (a frozen owner) by the cut;
// before b's control plane follows that takeover (ownAfterOverrun), a,
// thawed, claims back in order and its new connection owns the register.
// b must then stay as it is: there is no takeover left to follow. Taking
// the register outright from a's live connection, in the middle of an
// event that b was called for first, left that event to nobody (the demo,
// mode exit-stop, -faults 10 -seed 42).
func TestFollowingAnOverrunTakesNothingOnceTheRegisterMovedOn(t *testing.T) {
	const kind = 1 << 3
	d, err := OpenDir(testRoot(t), "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, b := newQuietCoord(t, d, "a"), newQuietCoord(t, d, "b")
	taker := b.Conn(kind)
	b.mu.Lock()
	b.mainTag = taker
	b.mu.Unlock()
	putCut(d, cutWord{owner: taker, ownerSeen: true, key: 1, acted: true, done: true})
	back := a.Conn(kind) // a's new connection, owner again after its claim
	putCut(d, cutWord{owner: back, ownerSeen: true, key: 2, acted: true, done: true})
	b.ownAfterOverrun()
	if w, _, _ := d.readCut(); w.owner != back {
		t.Fatalf("the register left the live owner's connection: %+v", w)
	}
	if role := b.currentRole(); role == api.Role_ROLE_OWNER {
		t.Fatalf("b became owner with no takeover of its own in force")
	}
	// With the takeover still in force, b follows it.
	putCut(d, cutWord{owner: taker, ownerSeen: true, key: 3, acted: true, done: true})
	b.ownAfterOverrun()
	if role := b.currentRole(); role != api.Role_ROLE_OWNER {
		t.Fatalf("b did not follow its own takeover: role %v", role)
	}
	if w, _, _ := d.readCut(); w.owner != taker {
		t.Fatalf("following its own takeover moved the register: %+v", w)
	}
}

// TestPromotionLeavesTheEventsToAnInstanceThatTookOverSinceTheLoss: the
// owner dies; another survivor's connection takes the register over by
// the cut before this instance's control plane promotes it (two
// survivors: a retired instance watching its successor, and a standby in
// the chain). The promotion must leave the register to that connection:
// taken outright, the event it had just acted on was declared in doubt at
// this instance's call for it (the demo, mode cri-o, -faults 10 -seed 53;
// and, with the takeover before the loss reached the watcher, seeds
// 75-82). With no such takeover, the promotion takes the register.
func TestPromotionLeavesTheEventsToAnInstanceThatTookOverSinceTheLoss(t *testing.T) {
	const kind = 1 << 3
	d, err := OpenDir(testRoot(t), "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := newQuietCoord(t, d, "c")
	mine := c.Conn(kind)
	c.mu.Lock()
	c.mainTag = mine
	c.mu.Unlock()
	dead, survivor := d.newConnTag(), d.newConnTag()
	putCut(d, cutWord{owner: dead, ownerSeen: true, key: 1, acted: true, done: true})
	lost := c.noteLoss()
	// The other survivor takes over by the cut (rule 4) and acts on event 2.
	putCut(d, cutWord{owner: survivor, ownerSeen: true, key: 2, acted: true, done: true})
	if got := c.promoteIfOrphaned("successor gone", lost); got != undecided {
		t.Fatalf("promotion over a survivor's takeover since the loss: %v, want undecided", got)
	}
	if w, _, _ := d.readCut(); w.owner != survivor {
		t.Fatalf("the register left the survivor that took over: %+v", w)
	}
	if c.currentRole() == api.Role_ROLE_OWNER {
		t.Fatal("promoted over a survivor's takeover")
	}
	// The loss seen only after the takeover (the runtime called the other
	// survivor within microseconds of the kill): this instance's
	// connection, last called while the dead owner held the register, tells.
	c.mu.Lock()
	putSighting(c, mine, sighting{valid: true, owner: dead, key: 1, kind: kind})
	c.mu.Unlock()
	if got := c.promoteIfOrphaned("successor gone", c.noteLoss()); got != undecided {
		t.Fatalf("promotion over a survivor's takeover before the loss was seen: %v, want undecided", got)
	}
	if w, _, _ := d.readCut(); w.owner != survivor {
		t.Fatalf("the register left the survivor that took over before the loss was seen: %+v", w)
	}
	// The register still held by the lost owner: the promotion takes it.
	putCut(d, cutWord{owner: dead, ownerSeen: true, key: 2, acted: true, done: true})
	if got := c.promoteIfOrphaned("successor gone", lost); got != promoted {
		t.Fatalf("promotion from the lost owner: %v, want promoted", got)
	}
	if w, _, _ := d.readCut(); w.owner != mine {
		t.Fatalf("the promotion did not take the register from the lost owner: %+v", w)
	}
}

// TestCutReplacedConnectionTakesOverUntilItsSuccessorIsCalled: instance b
// serves through connection old (in the runtime's chain, called before)
// and replaces it with next (a catch-up, a take-back): next's Synchronize
// returned (it is b's newest, mainTag) but the runtime has not appended it.
// a's owner connection is dropped; the events that follow reach old alone.
// old takes over by rule 4 at its second call, declaring the first, and
// acts from then on; once next is called the right to take over is
// next's, and old (owner) acts on. Before, the right moved to next at its
// claim and old skipped every event until next was appended (the demo,
// -faults 10, modes gap and cri-o: 1-8 events in a gap window; model
// finding C12, cut-x32).
func TestCutReplacedConnectionTakesOverUntilItsSuccessorIsCalled(t *testing.T) {
	const kind = 1 << 3
	_, a, b, owner, old := newOwnerAndTaker(t, kind)
	// Event 1: both called, the owner acts.
	if dec := b.Decide(old, 1, kind, nil); dec.Act {
		t.Fatalf("event 1: old acted: %+v", dec)
	}
	if !a.Decide(owner, 1, kind, nil).Act {
		t.Fatal("event 1: the owner did not act")
	}
	a.Finish(owner, 1)
	// b replaces old: next's Synchronize returns (ClaimConn sets mainTag).
	next := b.Conn(kind)
	b.mu.Lock()
	b.mainTag = next
	b.mu.Unlock()
	// The runtime drops a's connection; events 2 and 3 reach old alone.
	if dec := b.Decide(old, 2, kind, nil); dec.Act {
		t.Fatalf("event 2: old acted at its first call after the drop: %+v", dec)
	}
	dec := b.Decide(old, 3, kind, nil)
	if !dec.Act || !dec.Overrun {
		t.Fatalf("event 3: old did not take over from the dropped owner (rule 4): %+v", dec)
	}
	b.Finish(old, 3)
	if got := b.InDoubt(); got != 1 {
		t.Errorf("in doubt %d, want 1 (event 2)", got)
	}
	// next appended: event 4 reaches old, then next.
	if dec := b.Decide(old, 4, kind, nil); !dec.Act {
		t.Fatalf("event 4: old, owner, did not act: %+v", dec)
	}
	b.Finish(old, 4)
	if dec := b.Decide(next, 4, kind, nil); dec.Act {
		t.Fatalf("event 4: next acted after old: %+v", dec)
	}
	b.mu.Lock()
	taker := b.takerLocked()
	b.mu.Unlock()
	if taker != next {
		t.Errorf("after next's first call the taker is %d, want next (%d)", taker, next)
	}
}
