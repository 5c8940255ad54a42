package protocol

import (
	"io"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// unactedHooks records what a coordinator tells its harness of events that
// reached no handler (OnUnacted) and of events in doubt (OnInDoubt).
type unactedHooks struct {
	hands bool // OnUnacted's answer: the harness hands the event late

	mu       sync.Mutex
	unacted  []uint32
	inDoubt  []uint32
	declared int
}

func (h *unactedHooks) onUnacted(key uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unacted = append(h.unacted, key)
	return h.hands
}

func (h *unactedHooks) onInDoubt(key uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inDoubt = append(h.inDoubt, key)
}

// newHookedCoord is newQuietCoord with h as its OnUnacted and OnInDoubt.
func newHookedCoord(t *testing.T, d *Dir, id string, h *unactedHooks) *Coordinator {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	c, err := New(Config{Dir: d, Self: &api.Instance{Plugin: "cut", Id: id, Version: "1", StartedUnixNano: 1},
		Log: logrus.NewEntry(logger), OnUnacted: h.onUnacted, OnInDoubt: h.onInDoubt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// standbyAfterAnAct opens a register directory in which instance a's
// connection owner owns the register and has acted on event 1 (key 1)
// and finished it, and instance b's newest connection taker may take
// over; b tells h (newHookedCoord).
func standbyAfterAnAct(t *testing.T, kind uint64, h *unactedHooks) (d *Dir, a, b *Coordinator, owner, taker uint16) {
	t.Helper()
	d, err := OpenDir(testRoot(t), "cut")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	a, b = newQuietCoord(t, d, "a"), newHookedCoord(t, d, "b", h)
	owner, taker = a.Conn(kind), b.Conn(kind)
	b.mu.Lock()
	b.mainTag = taker
	b.mu.Unlock()
	putCut(d, cutWord{owner: owner})
	d.setOwnerEvents(owner, kind)
	if dec := a.Decide(owner, 1, kind, nil); !dec.Act {
		t.Fatalf("event 1: the owner did not act: %+v", dec)
	}
	a.Finish(owner, 1)
	return d, a, b, owner, taker
}

// TestRuleFourHandsTheSkippedEventLate: the owner acts on event 1; the
// runtime drops it; the standby, called alone for event 2, skips it (the
// owner holds the register); at event 3 it takes over by rule 4. Event 2
// reached no handler, and the runtime is done with it: the coordinator
// offers it to the harness to hand late (OnUnacted) instead of declaring
// it in doubt. If the harness cannot hand it (a creation, or not in its
// ring of calls), it is declared in doubt by its key, as before.
func TestRuleFourHandsTheSkippedEventLate(t *testing.T) {
	const kind = 1 << 3
	for _, hands := range []bool{true, false} {
		t.Run(map[bool]string{true: "handed late", false: "declared"}[hands], func(t *testing.T) {
			hb := &unactedHooks{hands: hands}
			_, _, b, _, taker := standbyAfterAnAct(t, kind, hb)
			if dec := b.Decide(taker, 2, kind, nil); dec.Act {
				t.Fatalf("event 2: the standby acted while the owner held the register: %+v", dec)
			}
			// The runtime dropped the owner: it is not called for event 2.
			dec := b.Decide(taker, 3, kind, nil)
			if !dec.Act || !dec.skippedOwner {
				t.Fatalf("event 3: the standby did not take over by rule 4: %+v", dec)
			}
			if len(hb.unacted) != 1 || hb.unacted[0] != 2 {
				t.Fatalf("offered to hand late %v, want event 2 alone", hb.unacted)
			}
			wantDoubt := map[bool]uint64{true: 0, false: 1}[hands]
			if got := b.InDoubt(); got != wantDoubt {
				t.Errorf("declared in doubt %d, want %d", got, wantDoubt)
			}
			if !hands && (len(hb.inDoubt) != 1 || hb.inDoubt[0] != 2) {
				t.Errorf("named in doubt %v, want event 2", hb.inDoubt)
			}
			if wantLate := map[bool]uint64{true: 1, false: 0}[hands]; b.unacted.Load() != wantLate {
				t.Errorf("handed late %d, want %d", b.unacted.Load(), wantLate)
			}
		})
	}
}

// TestRuleFourKeepsAnEventWithThisCallsKeyInDoubt: event 2, which the
// owner was not called for, has the key of event 3, which the standby
// takes over at: the harness, which finds calls by key, could not tell
// them apart, so event 2 is declared in doubt by count alone and not
// offered (named by its key, the harness would name, and with
// WithAtLeastOnce hand late, the event the standby is acting on).
func TestRuleFourKeepsAnEventWithThisCallsKeyInDoubt(t *testing.T) {
	const kind = 1 << 3
	h := &unactedHooks{hands: true}
	_, _, b, _, taker := standbyAfterAnAct(t, kind, h)
	b.Decide(taker, 2, kind, nil)
	if dec := b.Decide(taker, 2, kind, nil); !dec.Act || !dec.skippedOwner {
		t.Fatalf("the standby did not take over by rule 4: %+v", dec)
	}
	if len(h.unacted) != 0 || b.InDoubt() != 1 {
		t.Errorf("offered %v and declared %d in doubt, want none offered and one declared", h.unacted, b.InDoubt())
	}
	// By count alone: named by its key, the harness would find this call.
	if len(h.inDoubt) != 1 || h.inDoubt[0] != 0 {
		t.Errorf("named in doubt %v, want [0] (by count alone)", h.inDoubt)
	}
}

// TestOwnerHandsLateTheEventItHandedToADroppedHeir: the owner hands event
// 2 over to its heir, of another instance; the runtime drops the heir
// before its call for event 2; the owner's instance takes the register
// back outright (a promotion: its successor is gone). Nobody acted on
// event 2. At its next call, for event 3, the owner acts and finds the
// recorded event acted on by nobody, itself not called for it: it offers
// event 2 to the harness (Decision.recordedUnacted). Before, event 2 was
// only inside the gap the take declared: the demo, mode containerd,
// -faults 10 -seed 9036, lost a PostCreateContainer that way. Had the heir
// been called for event 2, nothing is offered.
func TestOwnerHandsLateTheEventItHandedToADroppedHeir(t *testing.T) {
	const kind = 1 << 3
	for _, heirCalled := range []bool{false, true} {
		t.Run(map[bool]string{false: "heir dropped", true: "heir called"}[heirCalled], func(t *testing.T) {
			d, err := OpenDir(testRoot(t), "cut")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			h := &unactedHooks{hands: true}
			a := newHookedCoord(t, d, "a", h)
			n := newQuietCoord(t, d, "n")
			owner, heir := a.Conn(kind), n.Conn(kind)
			a.mu.Lock()
			a.mainTag = owner
			a.mu.Unlock()
			d.setOwnerEvents(owner, kind)
			d.setHeirEvents(kind)
			putCut(d, cutWord{owner: owner, heir: heir, key: 1, ownerSeen: true, heirSeen: true, acted: true, done: true})
			if dec := a.Decide(owner, 2, kind, nil); !dec.HandedOver {
				t.Fatalf("event 2: the owner did not hand over: %+v", dec)
			}
			if heirCalled {
				if dec := n.Decide(heir, 2, kind, nil); !dec.Act {
					t.Fatalf("event 2: the heir did not act: %+v", dec)
				}
				n.Finish(heir, 2)
			}
			n.DropConn(heir)
			a.mu.Lock()
			taken := a.takeCutLocked(false)
			a.mu.Unlock()
			a.reportInDoubt(taken)
			if w, _, _ := d.readCut(); w.owner != owner {
				t.Fatalf("the take left the register to %d, want the owner %d", w.owner, owner)
			}
			if dec := a.Decide(owner, 3, kind, nil); !dec.Act {
				t.Fatalf("event 3: the owner did not act: %+v", dec)
			}
			if heirCalled {
				if len(h.unacted) != 0 {
					t.Errorf("offered %v to hand late, yet the heir acted on event 2", h.unacted)
				}
				return
			}
			if len(h.unacted) != 1 || h.unacted[0] != 2 {
				t.Fatalf("offered %v to hand late, want event 2", h.unacted)
			}
			if a.InDoubt() != 0 {
				t.Errorf("declared %d in doubt, want none", a.InDoubt())
			}
			// Offered once: the next event finds its own record.
			a.Finish(owner, 3)
			a.Decide(owner, 4, kind, nil)
			if len(h.unacted) != 1 {
				t.Errorf("offered %v, want event 2 once", h.unacted)
			}
		})
	}
}

// TestOwnMarkAtATakeIsDecidedAtTheNextCall: the owner, of another
// instance, acts on event 1 and dies; this instance's standby, called
// alone for event 2, skips it and marks the register; its control plane
// then takes the register outright (declaring a gap). Event 2 reached no
// handler so far, but it may still be in progress: the take declares
// nothing for it, and the connection's next call decides. Still owner
// with nothing recorded since, it offers event 2 to the harness. If
// another instance took the register back and acted on event 2 meanwhile
// (cut.pml, cut-cp-standby), it declares event 2 in doubt, as the take
// did before, and offers nothing.
func TestOwnMarkAtATakeIsDecidedAtTheNextCall(t *testing.T) {
	const kind = 1 << 3
	for _, takenBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "still owner", true: "taken back"}[takenBack], func(t *testing.T) {
			h := &unactedHooks{hands: true}
			d, a, b, owner, taker := standbyAfterAnAct(t, kind, h)
			a.DropConn(owner) // it died
			if dec := b.Decide(taker, 2, kind, nil); dec.Act {
				t.Fatalf("event 2: the standby acted while the owner held the register: %+v", dec)
			}
			b.mu.Lock()
			taken := b.takeCutLocked(false)
			b.mu.Unlock()
			if !taken.marked || taken.markKey != 2 || !taken.markDeferred {
				t.Fatalf("the take found no own mark of event 2 to decide later: %+v", taken)
			}
			b.reportInDoubt(taken)
			if b.InDoubt() != 0 || b.Gaps() != 1 {
				t.Fatalf("at the take: %d in doubt and %d gaps, want none and the gap", b.InDoubt(), b.Gaps())
			}
			if takenBack {
				c := newQuietCoord(t, d, "c")
				other := c.Conn(kind)
				putCut(d, cutWord{owner: other, key: 1, ownerSeen: true, acted: true, done: true})
				if dec := c.Decide(other, 2, kind, nil); !dec.Act {
					t.Fatalf("event 2: the instance that took back did not act: %+v", dec)
				}
				c.Finish(other, 2)
			}
			b.Decide(taker, 3, kind, nil)
			if takenBack {
				if len(h.unacted) != 0 || b.InDoubt() != 1 || len(h.inDoubt) != 1 || h.inDoubt[0] != 2 {
					t.Errorf("offered %v, declared %d in doubt (named %v); want none offered, event 2 declared", h.unacted, b.InDoubt(), h.inDoubt)
				}
				return
			}
			if len(h.unacted) != 1 || h.unacted[0] != 2 || b.InDoubt() != 0 {
				t.Errorf("offered %v and declared %d in doubt, want event 2 offered and nothing in doubt", h.unacted, b.InDoubt())
			}
		})
	}
}

// TestTakeDoesNotTakeAHandedSightingForItsMark: the standby's last call
// was for an event handed over to the owner (its sighting is first, and
// handed); the owner then acted on it (rule 1 records nothing anew), and
// another connection marked a later event. The mark is not the standby's:
// the take must not name the handed event, which was acted on (cut.pml,
// cut-cp-released-heir, caught this when the mark's event was handed late).
func TestTakeDoesNotTakeAHandedSightingForItsMark(t *testing.T) {
	const kind = 1 << 3
	d, owner, standby := newCutForTest(t, kind)
	c := coordForCutTest(d, standby, kind)
	putCut(d, cutWord{owner: owner, key: 2, ownerSeen: true, acted: true, done: true, unrecorded: true})
	_, n, _ := d.readCut()
	putSighting(c, standby, sighting{valid: true, first: true, handed: true, owner: owner, kind: kind, key: 2, events: n})
	c.mu.Lock()
	taken := c.takeCutLocked(false)
	c.mu.Unlock()
	if !taken.marked || taken.markKey != 0 {
		t.Fatalf("the take named event %d for the mark, want the mark declared by count (0): %+v", taken.markKey, taken)
	}
}
