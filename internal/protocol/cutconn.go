package protocol

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// The coordinator's side of the per-event cut (cut.go): which of this
// instance's runtime connections take part, and how the control plane's
// transitions move the register.
//
//   - A claim granted by a live owner makes the claiming connection heir:
//     the owner keeps acting until the heir has been seen in the chain.
//   - A claim that keeps ownership (a reconnection) makes the new
//     connection heir of the old one, the same way.
//   - A claim or promotion that finds no live owner takes the register
//     outright (the previous owner does not act any more).
//   - A claim whose author Synchronize fails gives the register back as it
//     was; the owner never stopped acting.

// connState is what the coordinator knows of one of its runtime
// connections (Coordinator.conns; guarded by mu). One record per
// connection, so that an event looks its connection up once.
type connState struct {
	events uint64   // the events it subscribes to (1<<event kind)
	seq    uint64   // its place in the order the instance registered its connections
	called bool     // the runtime called it for an event (saw is set)
	saw    sighting // what it saw at its last event (see decide)
}

// takerLocked returns the connection of this instance that may take the
// register over (caller.mayTakeOver) and that a promotion takes it for:
// the newest, mainTag, once the runtime has called it; until then the
// newest one the runtime has called that is still open, which the
// runtime has in its chain (a replaced connection stays there until its
// successor's first event). Moved at the claim instead, before the
// runtime appends the new connection, the right left the chain: a
// newcomer's owner dropped meanwhile was followed by events that reached
// only the old connection, which skipped them (docs/model.md C12; the
// demo, -faults 10, modes gap and cri-o: 1-8 events in a gap window).
// Call with mu.
func (c *Coordinator) takerLocked() uint16 {
	if main := c.conns[c.mainTag]; main != nil && main.called {
		return c.mainTag // every event after the first
	}
	taker, seq := c.mainTag, uint64(0)
	for tag, cs := range c.conns {
		if cs.called && cs.seq > seq {
			taker, seq = tag, cs.seq
		}
	}
	return taker
}

// connEventsLocked returns the events connection tag subscribes to (0 for
// a connection that is not this instance's); call with mu.
func (c *Coordinator) connEventsLocked(tag uint16) uint64 {
	if cs := c.conns[tag]; cs != nil {
		return cs.events
	}
	return 0
}

// sightingLocked returns what connection tag saw at its last event, and
// whether the runtime has called it for one (a closed connection's is
// forgotten); call with mu.
func (c *Coordinator) sightingLocked(tag uint16) (sighting, bool) {
	if cs := c.conns[tag]; cs != nil {
		return cs.saw, cs.called
	}
	return sighting{}, false
}

// Conn registers a runtime connection of this instance that subscribes to
// events (a bit mask, 1<<event kind) and returns its tag for ClaimConn,
// Decide and Finish.
func (c *Coordinator) Conn(events uint64) uint16 {
	tag := c.cfg.Dir.newConnTag()
	c.mu.Lock()
	c.connSeq++
	c.conns[tag] = &connState{events: events, seq: c.connSeq}
	c.mu.Unlock()
	return tag
}

// DropConn forgets a connection that closed; an heir that closed never
// becomes owner.
func (c *Coordinator) DropConn(tag uint16) { c.dropConn(tag, false) }

// CloseConn is DropConn for a connection this instance closes itself, at a
// moment it chose (no event is lost to it): the first of the two calls
// for a connection decides.
func (c *Coordinator) CloseConn(tag uint16) { c.dropConn(tag, true) }

func (c *Coordinator) dropConn(tag uint16, deliberate bool) {
	if tag == 0 {
		return
	}
	c.mu.Lock()
	_, known := c.conns[tag] // the first of the two calls for a connection
	if known {
		if len(c.dropped) >= 16 {
			clear(c.dropped) // only the last few can still be in the register
		}
		c.dropped[tag] = true
	}
	delete(c.conns, tag) // and its sighting
	var gap cutTaken
	if tag == c.gapHeir {
		// Promoted before it was in the runtime's chain, it closed before
		// it acted: the window it was to declare ends here for this
		// instance (a later taker declares from the same act on). An heir
		// that closed leaves it to the next taker, as before.
		if w, _, _ := c.cfg.Dir.readCut(); w.owner == tag {
			gap.gapSince = c.gapSince
		}
		c.gapHeir = 0
	}
	c.mu.Unlock()
	c.reportInDoubt(gap)
	if known && !deliberate {
		// Lost, not closed by this instance: if it owned the register,
		// nobody acts until another connection takes it.
		c.cfg.Dir.markDeadOwner(tag)
	}
	c.cfg.Dir.updateCut(func(w *cutWord) bool {
		if w.heir != tag {
			return false
		}
		w.heir, w.heirSeen, w.heirUnseen = 0, false, false
		return true
	})
}

// ClaimConn is ClaimThen for the connection tag: the register follows the
// claim (see above).
//
// settled, if not nil, runs once the claim settled as owner (ready done),
// before this instance can yield to another: what the harness records of
// the containers ready handed (so that no later owner hands them again)
// is then seen by any instance that claims from it.
func (c *Coordinator) ClaimConn(ctx context.Context, tag uint16, ready func(context.Context) error, settled func()) (api.Role, error) {
	c.mu.Lock()
	c.claimTag = tag
	c.mu.Unlock()
	role, err := c.claimThen(ctx, ready, settled)
	c.mu.Lock()
	c.claimTag = 0
	c.mainTag = tag // the newest connection: a later promotion is for it
	c.mu.Unlock()
	return role, err
}

// Decide runs the cut for one event at connection tag (see Dir.decide);
// call it between Enter and Exit. kind is the event's bit (1<<event kind).
// gone, if not nil, reports whether the runtime has already closed the
// connection; it is asked only before a takeover (caller.gone).
func (c *Coordinator) Decide(tag uint16, key uint32, kind uint64, gone func() bool) Decision {
	if c.cfg.Dir.LayoutErr() != nil {
		return Decision{} // a page it does not speak: it never acts (see ErrPageLayout)
	}
	// One critical section around the register's decision: mu is taken
	// before the directory's genMu (as takeCutLocked does), and decide
	// takes no lock of the coordinator's and waits for nothing (gone is a
	// poll with no wait). So the sighting a call leaves and the register
	// it read move together, and an event takes mu once.
	c.mu.Lock()
	cs := c.conns[tag] // nil: not a live connection of this instance's
	var prev sighting
	called := false // the runtime called tag for an event before
	me := caller{mayTakeOver: tag == c.takerLocked() && !c.goneLocked(), atLeastOnce: c.cfg.AtLeastOnce,
		releaser: uint32(tag) == c.releasedTag.Load(), gone: gone}
	if cs != nil {
		prev, called, me.events = cs.saw, cs.called, cs.events
		me.prev = prev
	}
	d := c.cfg.Dir.decide(tag, key, kind, me)
	var gap cutTaken
	if cs != nil {
		d.saw.firstCall = !called
		cs.saw, cs.called = d.saw, true
	}
	if c.gapHeir != 0 && (tag == c.gapHeir && (d.Promoted || d.Act) || d.Promoted) {
		// An heir that claimed when no connection acted, or a connection
		// promoted before it was in the runtime's chain, acts now; or the
		// connection it replaces, still in the chain, took over first
		// (takerLocked): the window ends at this act either way.
		gap.gapSince, c.gapHeir = c.gapSince, 0
	}
	c.mu.Unlock()
	// Anything but a plain act, skip or hand-over (each of these flags,
	// or a gap ending at this act) is followed up apart.
	if d.Promoted || d.took || d.Overrun || d.unrecorded || d.heirUnseen || d.unseenMark || !gap.gapSince.IsZero() {
		c.afterTakeover(tag, key, &d, me.releaser, called, prev, gap)
	}
	// The first act of a connection: it was promoted now, or its
	// predecessor handed over to it at this event.
	first := (d.Act || d.Promoted) && c.lastActing.Load() != uint32(tag)
	if first {
		c.lastActing.Store(uint32(tag))
	}
	if first || d.HandedOver {
		c.cutMoved(tag, !d.HandedOver)
	}
	return d
}

// afterTakeover follows up a decision of Decide's at connection tag that
// took the register or declared something (see there): the gap since the
// last act and the events in doubt are declared, and the control plane
// follows a takeover. releaser, called and prev are the caller's as
// Decide saw them; gap is the gap Decide found ending at this act.
func (c *Coordinator) afterTakeover(tag uint16, key uint32, d *Decision, releaser, called bool, prev sighting, gap cutTaken) {
	if (d.Promoted || d.took) && !releaser && gap.gapSince.IsZero() && c.cfg.Dir.ownerDead(d.prevOwner) {
		// The owner it took from had no connection: nobody acted since.
		gap.gapSince = d.actedSince
	}
	if fresh := d.Overrun && !d.skippedOwner && !d.InDoubt && !called || d.skippedOwner && prev.firstCall; fresh && !releaser && gap.gapSince.IsZero() {
		// A takeover by a connection that was not in the runtime's chain
		// before the owner stopped acting: rule 3 at its first call, for
		// another event than the one the owner overran (once appended it
		// is called after the owner for every event, so it would have
		// been called for that one), or rule 4 at its second call (the
		// owner was not called for the event of its first, and acted on
		// nothing after it). It was appended later, and whatever came
		// between the owner's last act and its append may have reached no
		// connection of the plugin (on a runtime with no plugin-sync block
		// around the append: CRI-O): declared as a gap from the owner's
		// last act. Seen in the demo, mode cri-o, -faults 10 -seed 5: a
		// frozen owner dropped while the taker waited between its
		// Synchronize and its append, and hundreds of events passed an
		// empty chain unsaid.
		gap.gapSince = d.actedSince
	}
	c.reportInDoubt(gap)
	if d.unrecorded && gap.gapSince.IsZero() && !d.Overrun && !releaser {
		// (Rules 3 and 4 declare the window from the recorded event on,
		// which holds the marked one; a releaser takes back an event nobody
		// took, see caller.releaser.)
		// A standby was called for an event before the owner or instead
		// of it, and nobody recorded an event since (cutWord.unrecorded).
		c.log.WithFields(logrus.Fields{"conn": tag, "owner_conn": d.prevOwner}).
			Warn("in doubt: a standby was called for an event the owner was not called for (a runtime that calls only the newest connection, containerd/nri PR 281, or the owner dropped); taking over")
		c.countInDoubt()
		if !d.took {
			c.catchUp() // a take by rule 5 follows the takeover below
		}
	}
	switch {
	case d.took && releaser:
		// Back for an event nobody took; given up again at Finish.
		c.log.WithField("conn", tag).Info("leaving: acting on an event that reached nobody after the release; releasing again after it")
	case d.heirUnseen:
		// An heir's ambiguous skip was not followed by the owner's
		// (a gap declared from the same takeover covers that event).
		if gap.gapSince.IsZero() {
			c.log.WithFields(logrus.Fields{"conn": tag, "event_key": d.recordedKey}).
				Warn("in doubt: the owner was not called after this connection's previous event, which had the key of the owner's last one; the runtime may have dropped the owner before it")
			c.countInDoubt()
		}
		c.catchUp()
	case d.Overrun && d.skippedHanded:
		c.log.WithFields(logrus.Fields{"conn": tag, "event_key": d.recordedKey}).
			Warn("in doubt: the last event this connection was called for was handed over to the heir, and the runtime dropped the heir before calling it for that event; nobody acted on it; taking over")
		c.countInDoubt()
		if c.currentRole() == api.Role_ROLE_OWNER {
			c.catchUp()
		} else {
			c.followTakeover() // the promotion catches up
		}
	case d.Overrun:
		if d.handedUnacted {
			c.log.WithFields(logrus.Fields{"conn": tag, "event_key": d.recordedKey}).
				Warn("in doubt: the owner was handed an event over and the runtime dropped it before calling it for that event; nobody acted on it")
			c.countInDoubt()
		}
		c.tookOverFromOverrun(tag, *d)
	case d.unseenMark:
		c.log.WithFields(logrus.Fields{"conn": tag, "event_key": key, "this_event": true}).
			Warn("in doubt: this event has the key of the one the previous owner acted on last, before this connection took over unseen (the owner left, or the register was taken from it)")
		c.countInDoubt()
	case d.took:
		c.log.WithField("conn", tag).Warn("nobody owned the plugin's events (the owner left without a successor seen); taking over")
		c.followTakeover()
	case d.InDoubt && d.Promoted:
		// An heir after a release, with the recorded key (cut.go, case 1).
		c.log.WithField("conn", tag).Warn("in doubt: the owner left after the event with this key; taking over")
		c.countInDoubt()
		c.catchUp()
	}
}

// tookOverFromOverrun follows a takeover of the register from a connection
// the runtime gave up on (Decision.Overrun): the recorded event is in
// doubt, and an instance that was not owner becomes owner outside any
// Synchronize, as after a promotion (it catches up: a container created
// in that event may be unprocessed).
func (c *Coordinator) tookOverFromOverrun(tag uint16, d Decision) {
	f := logrus.Fields{"conn": tag, "this_event": d.InDoubt}
	if !d.skippedOwner {
		// Rule 3: the event in doubt is the one the register recorded
		// (the owner was inside it). Rule 4's is the one of this
		// connection's previous call, which the register does not hold.
		f["event_key"] = d.recordedKey
	}
	c.log.WithFields(f).
		Warn("in doubt: the owner did not finish its handler before the runtime went on (timed out or died); taking over")
	c.countInDoubt()
	if c.currentRole() == api.Role_ROLE_OWNER {
		// An heir, owner by its claim: the event in doubt may be a
		// CreateContainer the runtime completed without this plugin.
		c.catchUp()
		return
	}
	c.followTakeover() // the promotion catches up
}

// countInDoubt counts an event declared in doubt (Stats.InDoubt, the
// metric); call without mu.
func (c *Coordinator) countInDoubt() {
	c.inDoubt.Add(1)
	if c.cfg.OnInDoubt != nil {
		c.cfg.OnInDoubt()
	}
}

// catchUp asks the harness for a catch-up (see Config.OnPromoted): the
// containers no instance processed go to a new Synchronize.
func (c *Coordinator) catchUp() {
	if c.cfg.OnPromoted != nil {
		c.cfg.OnPromoted(c.Status().Epoch)
	}
}

// followTakeover makes the control plane follow a takeover of the
// register by this instance's connection: an instance that is not owner
// becomes owner (an heir's claim made it owner already).
func (c *Coordinator) followTakeover() {
	if c.currentRole() == api.Role_ROLE_OWNER {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.ownAfterOverrun()
	}()
}

// ownAfterOverrun makes this instance owner after one of its connections
// took the register over from an owner the runtime gave up on. That owner
// may be hung holding the claim lock: after a bounded wait this goes on
// without it, as a take-back from an overdue taker does (whichever
// instance published last owns the name; the other retires at its next
// event).
func (c *Coordinator) ownAfterOverrun() {
	start := c.clock().Now()
	ctx, cancel := withTimeout(c.clock(), c.ctx, c.cfg.ClaimTimeout/4)
	unlock, err := c.cfg.Dir.Lock(ctx)
	cancel()
	if err == nil {
		defer unlock()
	} else if c.ctx.Err() != nil {
		return
	}
	if c.currentRole() == api.Role_ROLE_OWNER || c.isClosed() {
		return
	}
	if !c.Acting() {
		// The register moved on since this instance's connection took it:
		// another instance claimed meanwhile and acts (a frozen owner,
		// thawed, claimed back in order). There is no takeover to follow;
		// taken outright now, the register would leave a live owner in the
		// middle of an event, whose call comes after this instance's: that
		// event would reach nobody (declared, in the demo, mode exit-stop,
		// -faults 10 -seed 42: a second declaration for one fault).
		c.log.Info("promotion after an overrun: another instance acts by now; not taking over")
		return
	}
	// The check above and the take inside ownOutsideFence are apart (its
	// publish): the take checks again (moveCutLocked).
	c.mu.Lock()
	c.followingOverrun = true
	c.mu.Unlock()
	err = c.ownOutsideFence("promoted: the owner did not finish an event in time", OutcomePromoted, start)
	c.mu.Lock()
	c.followingOverrun = false
	c.mu.Unlock()
	if err != nil {
		c.log.WithError(err).Warn("promotion after an overrun: publish failed")
	}
}

// cutMoved logs a move of the register at this instance and wakes those
// waiting on Changed (Ready changes with it).
func (c *Coordinator) cutMoved(tag uint16, promoted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if promoted {
		c.log.WithFields(logrus.Fields{"conn": tag, "epoch": c.epoch}).Info("acting: seen in the runtime's chain")
	} else {
		c.log.WithFields(logrus.Fields{"conn": tag, "epoch": c.epoch}).Info("handed the events to the successor")
	}
	c.notifyLocked()
}

// Finish records that the handler of the event Decide let tag act on has
// returned.
func (c *Coordinator) Finish(tag uint16, key uint32) {
	c.cfg.Dir.finish(tag, key)
	if tag != 0 && uint32(tag) == c.releasedTag.Load() {
		c.releaseCut() // it took the register back for this event
	}
}

// Acting reports whether one of this instance's connections acts on the
// next event: it owns the register.
func (c *Coordinator) Acting() bool {
	w, _, ok := c.cfg.Dir.readCut()
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, mine := c.conns[w.owner]
	return mine
}

// cutTag is the connection a register change made now is for; call with mu.
func (c *Coordinator) cutTagLocked() uint16 {
	if c.claimTag != 0 {
		return c.claimTag
	}
	return c.mainTag
}

// cutTaken is what takeCutLocked did: the register as it was (for
// giveBackCut), the connection it was taken for, and whether the event the
// previous owner was inside is now in doubt (reported by reportInDoubt,
// once mu is released: callbacks never run under it).
type cutTaken struct {
	prev    cutWord
	tag     uint16
	inDoubt bool
	// marked: the register carried a standby's mark of an event the owner
	// was not called for (cutWord.unrecorded), declared in doubt too;
	// markKey is that event's key when the mark was this connection's own
	// (its last sighting), 0 if unknown.
	marked  bool
	markKey uint32
	// gapSince: the register was taken from a connection of another
	// instance with no live owner granting it: no instance has acted since
	// then (zero: not such a takeover).
	gapSince time.Time
}

// takeCutLocked moves the register for this instance, which has just
// become or stayed owner: as heir of a live owner (heir), or outright.
// Call with mu; call reportInDoubt with the result after releasing it.
func (c *Coordinator) takeCutLocked(heir bool) (t cutTaken) { return c.moveCutLocked(heir, false) }

// moveCutLocked is takeCutLocked; promotion tells a promotion after the
// loss of the owner this instance watched (promoteIfOrphaned), which
// leaves the register to a connection of another instance that took it
// after this instance's newest connection last saw it (see
// promotionFindsTakerLocked).
func (c *Coordinator) moveCutLocked(heir, promotion bool) (t cutTaken) {
	t.tag = c.cutTagLocked()
	if promotion && c.claimTag == 0 {
		// For the connection the runtime has in its chain: the newest may
		// not be appended yet (takerLocked).
		t.tag = c.takerLocked()
	}
	if t.tag == 0 {
		return t
	}
	tag := t.tag
	events := c.connEventsLocked(tag)
	// A claim made inside a Synchronize is for a connection the runtime
	// has not appended yet: it becomes heir, whoever owns the register.
	inSync := c.claimTag == tag
	if _, live := c.conns[tag]; !live && !inSync {
		// A promotion while the instance's newest connection is closed
		// (reconnecting, its new one not claimed yet): nothing of this
		// instance could act on the register. Left as it is, a survivor
		// in the runtime's chain takes over by the cut (rule 4), and the
		// new connection claims as heir; taken for the closed one, that
		// survivor skipped one more event, declared (the demo, -faults 10
		// -seed 147: two declarations for one kill).
		return t
	}
	if inSync {
		c.claimHeirEvents = c.cfg.Dir.heirEvents()
		c.cfg.Dir.setHeirEvents(events)
		c.heirOfNobody, c.gapHeir = 0, 0
		if !heir {
			c.heirOfNobody = tag // nobody else acts: no need to wait long
		}
		// A gap if the register names a connection that does not act: one
		// of ours that closed (a reconnection), or, with no live owner,
		// another instance's (one that left in order gives it up:
		// releaseCut).
		if w, _, _ := c.cfg.Dir.readCut(); w.owner != 0 && w.owner != tag {
			if _, live := c.conns[w.owner]; c.dropped[w.owner] || c.cfg.Dir.ownerDead(w.owner) || !heir && !live {
				c.gapHeir, c.gapSince = tag, c.cfg.Dir.lastActed()
			}
		}
	}
	outright := false
	_, recorded, _ := c.cfg.Dir.readCut() // the events counter
	_, _ = c.cfg.Dir.updateCut(func(w *cutWord) bool {
		t.prev, t.inDoubt, t.marked, t.markKey, outright = *w, false, false, 0, false
		switch {
		case w.owner == tag:
			return false
		case !inSync && c.ownLiveConnLocked(w.owner):
			// Held by an older connection of this instance, still in the
			// runtime's chain (its successor's claim did not make the
			// newest heir: the claim lock was busy): the instance acts
			// already, and that connection hands over to the newest as
			// usual, at a claim. Taken outright, the event it acted on
			// last would be declared in doubt at the newest's call for it
			// (the demo, mode containerd, -faults 10 -seed 5: a false
			// alarm after a promotion that followed a takeover by rule 4).
			return false
		case inSync:
			// The heirSeen of the heir this one replaces is not ours
			// (model finding C2); quiet arms the idle rule.
			w.heir, w.heirSeen, w.heirUnseen, w.quiet = tag, false, false, true
		case promotion && (c.promotionFindsTakerLocked(w.owner) || c.takenSinceLocked(c.promotingFrom, w.owner)):
			// Decided on the owner's loss a moment ago; meanwhile the
			// runtime called another survivor, which took over by the cut
			// and acts (its roles follow: ownAfterOverrun). Taken from it
			// now, the event it acted on would be declared in doubt at this
			// instance's call (the demo, -faults 10 -seed 78), or in the
			// middle of it (-seed 56, mode gap: the survivor took over 0.2
			// ms before this swap, after the promotion's decision; this
			// instance's newest connection, not called yet, had seen no
			// owner, so only the owner noted at the loss tells).
			return false
		case promotion && c.promotionFindsMarkerLocked(*w, recorded, tag):
			return false
		case c.followingOverrun && w.owner != 0 && !c.ownConnLocked(w.owner):
			// ownAfterOverrun follows a takeover by one of this
			// instance's connections. Another instance holds the register
			// by now: it claimed back in order between ownAfterOverrun's
			// check and this swap (a frozen owner, thawed and reconnected;
			// the demo, mode exit-stop, -faults 10 -seed 60: taken 4 ms
			// after that owner acted again, with a gap and a mark declared).
			return false
		case w.owner == 0 && w.heir == 0 && !heir:
			// Released with no heir, and not granted by the releaser:
			// rule 5 gives it to the first connection that may take
			// over, at its next call (the releaser's own included, for
			// an event in progress). Taken here, between two calls of an
			// event that the releaser was still to be called for, that
			// event would reach nobody (cut.pml CPTAKE, cut-x28). A
			// leaving owner that yields to a queued successor (queued.go)
			// releases between events (holdBetweenEvents) and grants the
			// take (heir).
			return false
		default:
			t.inDoubt = w.acted && !w.done && w.owner != 0 && !w.inDoubt
			w.inDoubt = w.inDoubt || t.inDoubt
			// An heir taking over keeps its sighting of the recorded event
			// (model finding C9). Unseen, the recorded event may be one the
			// owner acted on and this connection is still to be called
			// for, or a new one with its key: rule 1 declares it. After a
			// release, and also when the register is taken from an owner
			// that may still be called (the control plane took it at any
			// moment: a take-back, a promotion, a stalled claim; model
			// findings F4, F8, F9, cut.pml CPTAKE, cut-x26): skipped unsaid
			// otherwise.
			seen := w.heir == tag && w.heirSeen
			w.inDoubt = w.inDoubt || !seen && w.acted
			// A standby's mark of an event the owner was not called for
			// (cutWord.unrecorded): in doubt, by its key if the mark is
			// this connection's (its last call: no event recorded since,
			// and no call of this instance's is in progress, see
			// becomeOwner's holdEvents).
			if w.unrecorded && w.owner != 0 {
				t.marked = true
				if s, _ := c.sightingLocked(tag); s.valid && s.first && s.owner == w.owner && s.events == recorded {
					t.markKey = s.key
				}
			}
			w.owner, w.heir, w.ownerSeen, w.heirSeen, w.heirUnseen, w.unrecorded = tag, 0, seen, false, false, false
			outright = true
		}
		return true
	})
	if w, _, _ := c.cfg.Dir.readCut(); w.owner == tag {
		if _, live := c.conns[tag]; !live {
			// A claim whose connection closed inside its Synchronize (an
			// outright take for a closed one is left out above): nobody
			// acts until the next taker, which declares the gap. Its
			// subscriptions are no longer known: recorded as every
			// event, so that a standby in the chain, called first twice
			// with nothing recorded between, takes over by rule 4 (an
			// empty mask read as "never to be called" kept it skipping).
			events = ^uint64(0)
			c.cfg.Dir.markDeadOwner(tag)
		}
		c.cfg.Dir.setOwnerEvents(tag, events)
	}
	// Taken from another instance's connection that acts: the owner, or,
	// after a release, the heir (it was to take over at its next call; a
	// take in the middle of an event, before the heir's call, leaves that
	// event to nobody: cut.pml CPTAKE, cut-x27).
	actor := t.prev.owner
	if actor == 0 && t.prev.heir != tag {
		actor = t.prev.heir
	}
	if _, live := c.conns[actor]; outright && !heir && actor != 0 && !live {
		if _, called := c.sightingLocked(tag); called {
			t.gapSince = c.cfg.Dir.lastActed()
			c.gapHeir = 0 // declared here, not again when it acts
		} else {
			// Its connection is not known to be in the runtime's chain
			// yet (a reconnection or a catch-up waiting for its append):
			// nobody acts until it does, so the window is declared when it
			// acts (Decide), or when it closes first (dropConn). Declared
			// now, the events until its append went unsaid (the demo, mode
			// cri-o, -faults 10 -seed 5: 568 of them).
			c.gapHeir, c.gapSince = tag, c.cfg.Dir.lastActed()
		}
	}
	return t
}

// promotionFindsTakerLocked reports whether owner, the register's owner,
// is a connection of another instance that took the register after this
// instance's newest connection was last called (and saw another owner):
// a survivor that took over by the cut. Call with mu.
func (c *Coordinator) promotionFindsTakerLocked(owner uint16) bool {
	if _, mine := c.conns[owner]; mine || owner == 0 {
		return false
	}
	saw, _ := c.sightingLocked(c.takerLocked())
	return saw.valid && saw.owner != 0 && owner != saw.owner
}

// promotionFindsMarkerLocked reports whether a promotion for connection
// tag leaves the register (w, the events counter recorded) to a survivor
// that marked it: tag has not been called for an event yet (the runtime
// may not have appended it: a catch-up's new connection, between its
// Synchronize and its append on CRI-O), and the register carries the mark
// of a connection of another instance that may take over, called for an
// event the dead owner was not called for (cutWord.unrecorded; none of
// this instance's connections saw what the mark needs). That connection
// takes over by rule 4 at its next call and declares the marked event.
// Taken for tag, the events until tag is appended reach nobody acting:
// the survivor skips one more and declares it as well (the demo, mode
// gap, -faults 10: two declarations for one kill). Call with mu.
func (c *Coordinator) promotionFindsMarkerLocked(w cutWord, recorded uint64, tag uint16) bool {
	if !w.unrecorded || w.owner == 0 || w.heir != 0 || c.ownLiveConnLocked(w.owner) {
		return false
	}
	if _, called := c.sightingLocked(tag); called {
		return false
	}
	for _, cs := range c.conns {
		if s := cs.saw; s.valid && s.first && s.owner == w.owner && s.events == recorded {
			return false // the mark may be this instance's own
		}
	}
	return true
}

// ownConnLocked reports whether tag is a connection of this instance,
// live or closed lately; call with mu.
func (c *Coordinator) ownConnLocked(tag uint16) bool {
	_, live := c.conns[tag]
	return live || c.dropped[tag]
}

// ownLiveConnLocked reports whether tag is a connection of this instance
// that the runtime has not dropped; call with mu.
func (c *Coordinator) ownLiveConnLocked(tag uint16) bool {
	_, live := c.conns[tag]
	return live && tag != 0 && !c.dropped[tag] && !c.cfg.Dir.ownerDead(tag)
}

// reportInDoubt logs, counts and passes on an event a takeover found in
// doubt (the previous owner died inside its handler) and the window in
// which no instance acted. Call without mu.
func (c *Coordinator) reportInDoubt(t cutTaken) {
	if !t.gapSince.IsZero() {
		gap := time.Since(t.gapSince)
		c.log.WithFields(logrus.Fields{"since": t.gapSince.UTC().Format(time.RFC3339Nano), "gap_ms": gap.Milliseconds()}).
			Warn("gap: no instance acted since the last event acted on; events in that window reached no instance of the plugin")
		c.gaps.Add(1)
		if c.cfg.OnGap != nil {
			c.cfg.OnGap(gap)
		}
	}
	if t.inDoubt {
		c.log.WithFields(logrus.Fields{"event_key": t.prev.key, "from_conn": t.prev.owner}).
			Warn("in doubt: the previous owner died inside a handler; its event may or may not have been acted on")
		c.countInDoubt()
	}
	if t.marked {
		f := logrus.Fields{"from_conn": t.prev.owner}
		if t.markKey != 0 {
			f["event_key"] = t.markKey
		}
		c.log.WithFields(f).Warn("in doubt: a standby was called for an event the previous owner was not called for (it died or was dropped before its turn); taking over")
		c.countInDoubt()
	}
}

// giveBackCut undoes takeCutLocked for a claim that did not settle as
// owner: an heir stops being heir; a register taken outright goes back to
// its previous owner.
func (c *Coordinator) giveBackCut(prev cutWord, tag uint16) {
	if tag == 0 {
		return
	}
	c.mu.Lock()
	mask := c.claimHeirEvents
	c.mu.Unlock()
	c.cfg.Dir.updateCut(func(w *cutWord) bool {
		switch {
		case w.heir == tag:
			// The heir this claim replaced is heir again (model finding
			// C3), unseen, and its idle rule disarmed.
			w.heir, w.heirSeen, w.heirUnseen, w.quiet = 0, false, false, false
			if prev.heir != tag && prev.heir != 0 {
				w.heir = prev.heir
				c.cfg.Dir.setHeirEvents(mask)
			}
		case w.owner == tag:
			w.owner, w.heir, w.heirSeen, w.heirUnseen = prev.owner, 0, false, false
		default:
			return false
		}
		return true
	})
}

// PromoteWhenIdle waits, until ctx ends, for heir connection tag to own
// the register, and makes it owner when the node is idle: no event for
// quiet since the register last changed, and none in progress. With no
// events the heir is never seen in the chain; after that long without
// one, the runtime has long appended it (appending waits only for the
// event in progress). It returns whether tag owns the register.
//
// It holds off while the register marks the heir's last call as rule 1's
// ambiguous skip (cutWord.heirUnseen), or a standby's skip of an event the
// owner was not called for (cutWord.unrecorded, model finding C10), and an
// owner holds it: that call may
// have been for a new event that the runtime called the heir alone for
// (the owner dropped), which only the next event can tell — the heir then
// takes over declaring it (rule 2), or the owner hands over to it.
// Promoted silently, the heir would act from the next event on and nothing
// would declare that one (model finding C6, cut-x20). Declaring it at once
// would be a false alarm after most idle handovers (the heir's first event
// is the second call of the owner's last one whenever the runtime calls
// the owner first). The hold is bounded (unseenHoldIntervals quiet
// intervals after the last event): with no event by then the heir is
// promoted anyway and declares that event in doubt, so that a node that
// goes idle does not keep the heir unready for good.
func (c *Coordinator) PromoteWhenIdle(ctx context.Context, tag uint16, quiet time.Duration) bool {
	d := c.cfg.Dir
	c.mu.Lock()
	if c.heirOfNobody == tag {
		// No live connection acted when this one claimed: promoting it
		// early cannot make two act; the wait only keeps Ready honest.
		quiet = min(quiet, nobodyQuiet)
	}
	from := c.heirFrom
	c.mu.Unlock()
	tick := min(quiet, predecessorPoll)
	held := 0 // intervals held off (heirUnseen) since the last event
	for {
		w0, _, ok := d.readCut()
		if !ok || w0.heir != tag {
			return ok && w0.owner == tag
		}
		idleAt := time.Now().Add(quiet)
		gone := false
		for !gone && time.Now().Before(idleAt) {
			t := time.NewTimer(tick)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
			if w, _, _ := d.readCut(); w.heir != tag {
				return w.owner == tag
			}
			gone = c.predecessorGone(ctx, w0.owner, from)
		}
		if gone {
			// Nobody else can act: take the register as a promotion does.
			c.mu.Lock()
			claimTag := c.claimTag
			c.claimTag = 0 // not in a Synchronize: outright
			c.mainTag = tag
			taken := c.takeCutLocked(false)
			if c.gapHeir == tag && taken.gapSince.IsZero() {
				// The idle rule knows the runtime has appended it (no
				// event came for a request timeout after its Synchronize):
				// the gap ends here, declared now rather than at an act
				// that may not come.
				taken.gapSince, c.gapHeir = c.gapSince, 0
			}
			c.claimTag = claimTag
			epoch := c.epoch
			c.mu.Unlock()
			c.reportInDoubt(taken)
			prev := taken.prev
			c.lastActing.Store(uint32(tag))
			c.cutMoved(tag, true)
			if prev.owner != 0 && c.cfg.OnPromoted != nil {
				// Events since this connection's Synchronize went to a
				// connection that is gone: a container created then is
				// unprocessed. Catch up as after a promotion.
				c.cfg.OnPromoted(epoch)
			}
			return c.OwnsCut(tag)
		}
		// Idle: promote by a swap from a word with the quiet mark set (no
		// event call since it was set); if an event cleared it, set it
		// again and wait another interval (model finding C1: a separate
		// counter cannot be checked in the same swap).
		promoted, hold, declare := false, false, false
		var from0 cutWord
		d.updateCut(func(w *cutWord) bool {
			hold, declare, from0 = false, false, *w
			switch {
			case w.heir != tag || (w.acted && !w.done):
				return false
			case !w.quiet:
				w.quiet, held = true, 0 // re-arm: an event came; the hold starts again
			case (w.heirUnseen || w.unrecorded) && w.owner != 0 && held < unseenHoldIntervals:
				hold = true // the next event decides (see above)
				return false
			default:
				declare = (w.heirUnseen || w.unrecorded) && w.owner != 0
				w.owner, w.heir, w.ownerSeen, w.heirSeen, w.heirUnseen, w.quiet = tag, 0, true, false, false, false
				w.unrecorded = false
				promoted = true
			}
			return true
		})
		if hold {
			if held++; held == 1 {
				c.log.WithFields(logrus.Fields{"conn": tag, "owner_conn": from0.owner, "event_key": from0.key}).
					Info("idle: not promoting yet: this connection's last event had the key of the owner's last one; the next event decides")
			}
			continue
		}
		if promoted {
			c.mu.Lock()
			d.setOwnerEvents(tag, c.connEventsLocked(tag))
			c.mu.Unlock()
			c.lastActing.Store(uint32(tag))
			if declare {
				// The owner was not seen after this connection's last
				// event: the runtime may have dropped it before that event.
				c.log.WithFields(logrus.Fields{"conn": tag, "event_key": from0.key, "owner_conn": from0.owner}).
					Warn("in doubt: idle, and the owner was not seen after this connection's last event, which had the key of the owner's last one; the runtime may have dropped the owner before it")
				c.countInDoubt()
				c.catchUp()
			}
			c.cutMoved(tag, true)
			return true
		}
	}
}

// predecessorGone reports whether the connection owning the register can
// no longer act: it is 0, or one of this instance's that closed, or the
// instance from (that granted the claim) no longer answers.
func (c *Coordinator) predecessorGone(ctx context.Context, owner uint16, from string) bool {
	if owner == 0 {
		return true
	}
	if from == "" {
		c.mu.Lock()
		_, alive := c.conns[owner]
		c.mu.Unlock()
		return !alive
	}
	cl, err := Dial(ctx, c.cfg.Dir.InstanceSocket(from))
	if err != nil {
		return errors.Is(err, ErrNoInstance)
	}
	cl.Close()
	return false
}

// predecessorPoll is how often an heir checks that the owner it waits for
// is still alive.
const predecessorPoll = 50 * time.Millisecond

// unseenHoldIntervals is how many quiet intervals PromoteWhenIdle holds
// off an heir whose last call was rule 1's ambiguous skip before it
// promotes it declaring that event in doubt.
const unseenHoldIntervals = 2

// nobodyQuiet is PromoteWhenIdle's wait for an heir that took over from
// nobody: long enough for the runtime to append it on an idle node.
const nobodyQuiet = 100 * time.Millisecond

// awaitCutReleased waits, until ctx ends, for no connection of this
// instance to own the register: its successor has been seen in the chain
// and acts from now on.
func (c *Coordinator) awaitCutReleased(ctx context.Context) bool {
	const poll = 2 * time.Millisecond
	for !c.isCutReleased() {
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return true
}

func (c *Coordinator) isCutReleased() bool {
	w, _, ok := c.cfg.Dir.readCut()
	if !ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.heir != 0 {
		if _, mine := c.conns[w.heir]; mine {
			return false // handing over between connections of ours
		}
	}
	_, mine := c.conns[w.owner]
	return !mine
}

func (c *Coordinator) hasConns() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns) > 0
}

// ConnEvents records the events connection tag subscribes to, once the
// runtime configured it.
func (c *Coordinator) ConnEvents(tag uint16, events uint64) {
	if tag == 0 {
		return
	}
	c.mu.Lock()
	if cs := c.conns[tag]; cs != nil {
		cs.events = events
	}
	c.mu.Unlock()
}

// OwnsCut reports whether connection tag acts on the next event.
func (c *Coordinator) OwnsCut(tag uint16) bool {
	w, _, ok := c.cfg.Dir.readCut()
	return ok && tag != 0 && w.owner == tag
}

// InDoubt is the number of events a dead owner was inside of when this
// instance took over (each is logged).
func (c *Coordinator) InDoubt() uint64 { return c.inDoubt.Load() }

// Gaps is the number of takeovers this instance made that found no
// instance acting since the last event acted on (see reportInDoubt).
func (c *Coordinator) Gaps() uint64 { return c.gaps.Load() }

// GapPending reports whether a connection of this instance claimed, or
// was promoted, while no connection acted: it declares a gap when it takes
// the register or acts (see takeCutLocked).
func (c *Coordinator) GapPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gapHeir != 0
}

// ActedBefore reports whether any instance of the plugin has been called
// for an event on this node since the handover directory was created (it
// lives on a tmpfs: until the node reboots).
func (c *Coordinator) ActedBefore() bool {
	_, n, ok := c.cfg.Dir.readCut()
	return ok && n > 0
}

// releaseCut gives up the register of a leaving instance whose successor
// was not seen in time: with no owner recorded, an heir knows its
// predecessor left in order (nothing was lost to it) and takes over at once
// without a catch-up. A handler still running (acted, not done) keeps the
// register as it is: that event is in doubt.
func (c *Coordinator) releaseCut() {
	c.mu.Lock()
	conns := make(map[uint16]bool, len(c.conns))
	for t := range c.conns {
		conns[t] = true
	}
	c.mu.Unlock()
	var released uint16
	c.cfg.Dir.updateCut(func(w *cutWord) bool {
		if !conns[w.owner] || (w.acted && !w.done) {
			return false
		}
		released = w.owner
		w.owner, w.ownerSeen = 0, false
		return true
	})
	if released != 0 {
		c.releasedTag.Store(uint32(released))
	}
}
