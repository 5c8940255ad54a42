package protocol

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// The coordinator's side of the per-event cut (cut.go): which of this
// instance's runtime connections take part, and the decision at each
// event (Decide) with what follows a takeover. How the control plane's
// transitions move the register is in cutmove.go:
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
	// gone, if set, polls whether the runtime closed the connection,
	// before the instance has read the close (see ConnGone).
	gone func() bool
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
	mark := c.markPending
	if mark.tag == tag {
		c.markPending = pendingMark{}
	}
	c.mu.Unlock()
	c.reportInDoubt(gap)
	if mark.tag == tag {
		// Closed before its next call: the take's declaration, made now.
		c.declareEarlierInDoubt(tag, 0, mark.key,
			"a standby (this connection) was called for an event the previous owner was not called for; it closed before it could tell whether anyone acted on it")
	}
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
	mark := c.markPending
	if mark.tag == tag {
		c.markPending = pendingMark{}
	}
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
	if mark.tag == tag {
		c.decideMark(tag, key, mark, d)
	}
	if d.recordedUnacted {
		// Not declared before by the cut (a gap may hold it): handed late
		// if the harness can, else left as it was.
		c.offerUnacted(tag, key, d.recordedKey,
			"the event recorded last was left to this connection (a handover whose heir was dropped, then a take) and nobody acted on it")
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
		c.countInDoubt(0)
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
			c.countInDoubt(d.recordedKey)
		}
		c.catchUp()
	case d.Overrun && d.skippedHanded:
		c.declareUnacted(tag, key, d.recordedKey,
			"the last event this connection was called for was handed over to the heir, and the runtime dropped the heir before calling it for that event; nobody acted on it; taking over")
		if c.currentRole() == api.Role_ROLE_OWNER {
			c.catchUp()
		} else {
			c.followTakeover() // the promotion catches up
		}
	case d.Overrun:
		if d.handedUnacted {
			c.declareUnacted(tag, key, d.recordedKey,
				"the owner was handed an event over and the runtime dropped it before calling it for that event; nobody acted on it")
		}
		c.tookOverFromOverrun(tag, key, *d, prev)
	case d.unseenMark:
		c.log.WithFields(logrus.Fields{"conn": tag, "event_key": key, "this_event": true}).
			Warn("in doubt: this event has the key of the one the previous owner acted on last, before this connection took over unseen (the owner left, or the register was taken from it)")
		c.countInDoubt(0) // this event: its caller names it (Decision.InDoubt)
	case d.took:
		c.log.WithField("conn", tag).Warn("nobody owned the plugin's events (the owner left without a successor seen); taking over")
		c.followTakeover()
	case d.InDoubt && d.Promoted:
		// An heir after a release, with the recorded key (cut.go, case 1).
		c.log.WithField("conn", tag).Warn("in doubt: the owner left after the event with this key; taking over")
		c.countInDoubt(0) // this event: its caller names it
		c.catchUp()
	}
}

// tookOverFromOverrun follows a takeover of the register from a connection
// the runtime gave up on (Decision.Overrun): the recorded event is in
// doubt, and an instance that was not owner becomes owner outside any
// Synchronize, as after a promotion (it catches up: a container created
// in that event may be unprocessed).
func (c *Coordinator) tookOverFromOverrun(tag uint16, key uint32, d Decision, prev sighting) {
	if d.skippedOwner && prev.valid && !d.InDoubt {
		// Rule 4: the event of this connection's previous call, which the
		// register does not hold: the owner was never called for it.
		c.declareUnacted(tag, key, prev.key,
			"the owner was not called for the event of this connection's previous call (dropped or frozen outside its handlers); nobody acted on it; taking over")
	} else {
		f := logrus.Fields{"conn": tag, "this_event": d.InDoubt}
		// Rule 3: the event in doubt is the one the register recorded
		// (the owner was inside it).
		declared := d.recordedKey
		if d.skippedOwner {
			declared = 0
		} else {
			f["event_key"] = d.recordedKey
		}
		c.log.WithFields(f).
			Warn("in doubt: the owner did not finish its handler before the runtime went on (timed out or died); taking over")
		if d.InDoubt {
			declared = 0 // this event: its caller names it
		}
		c.countInDoubt(declared)
	}
	if c.currentRole() == api.Role_ROLE_OWNER {
		// An heir, owner by its claim: the event in doubt may be a
		// CreateContainer the runtime completed without this plugin.
		c.catchUp()
		return
	}
	c.followTakeover() // the promotion catches up
}

// pendingMark is a control-plane take's own standby mark (cutTaken.
// markDeferred): the event with key, which connection tag was called for
// first and skipped, reached no handler up to the take, after which the
// events counter read events.
type pendingMark struct {
	tag    uint16
	key    uint32
	events uint64
}

// decideMark settles a pending mark at its connection's next call (d, for
// the event with key): if the connection still owned the register with
// nothing recorded since the take, nobody acted on the marked event, which
// the runtime is done with: offered to the harness (declareUnacted).
// Otherwise the register moved (a take-back, whose connection may have
// acted on it): declared in doubt, as the take did before. Call without
// mu.
func (c *Coordinator) decideMark(tag uint16, key uint32, mark pendingMark, d Decision) {
	if d.wasOwner && d.eventsSeen == mark.events {
		c.declareUnacted(tag, key, mark.key,
			"a standby (this connection) was called for an event the previous owner was not called for (it died or was dropped before its turn), and nobody acted on it")
		return
	}
	c.declareEarlierInDoubt(tag, key, mark.key,
		"a standby (this connection) was called for an event the previous owner was not called for; the register moved since this instance took it")
}

// declareUnacted declares an earlier event (key) that the cut knows
// reached no handler, from connection tag's call for the event with
// thisKey: the harness hands it late if it can (Config.OnUnacted), else
// it is declared in doubt. An event with this call's key is declared in
// doubt by count alone: the harness, which finds calls by key, would take
// this call for it. Call without mu.
func (c *Coordinator) declareUnacted(tag uint16, thisKey, key uint32, why string) {
	if !c.offerUnacted(tag, thisKey, key, why) {
		c.declareEarlierInDoubt(tag, thisKey, key, why)
	}
}

// offerUnacted offers the harness an earlier event (key) that reached no
// handler (Config.OnUnacted) and reports whether it hands it late; not
// one with the key of this call (thisKey), which it would take for it.
// Call without mu.
func (c *Coordinator) offerUnacted(tag uint16, thisKey, key uint32, why string) bool {
	if key == 0 || key == thisKey || c.cfg.OnUnacted == nil || !c.cfg.OnUnacted(key) {
		return false
	}
	c.unacted.Add(1)
	c.log.WithFields(logrus.Fields{"conn": tag, "event_key": key}).Warn("reached no handler: " + why + "; handing it late")
	return true
}

// declareEarlierInDoubt declares an earlier event (key) in doubt, from
// connection tag's call for the event with thisKey (0: none): by count
// alone if it has this call's key. Call without mu.
func (c *Coordinator) declareEarlierInDoubt(tag uint16, thisKey, key uint32, why string) {
	if key == thisKey {
		why, key = why+" (it has this event's key)", 0
	}
	c.log.WithFields(logrus.Fields{"conn": tag, "event_key": key}).Warn("in doubt: " + why)
	c.countInDoubt(key)
}

// countInDoubt counts an event declared in doubt (Stats.InDoubt, the
// metric) and tells Config.OnInDoubt, with the event's key if it is known
// and the event is not the one of the call that declares it; call
// without mu.
func (c *Coordinator) countInDoubt(key uint32) {
	c.inDoubt.Add(1)
	if c.cfg.OnInDoubt != nil {
		c.cfg.OnInDoubt(key)
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
		c.countInDoubt(t.prev.key)
	}
	if t.markDeferred {
		c.log.WithFields(logrus.Fields{"from_conn": t.prev.owner, "event_key": t.markKey}).
			Info("a standby (this connection) was called for an event the previous owner was not called for: decided at its next call (handed late if nobody acted on it)")
	} else if t.marked {
		f := logrus.Fields{"from_conn": t.prev.owner}
		if t.markKey != 0 {
			f["event_key"] = t.markKey
		}
		c.log.WithFields(f).Warn("in doubt: a standby was called for an event the previous owner was not called for (it died or was dropped before its turn); taking over")
		c.countInDoubt(t.markKey)
	}
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

// ConnGone gives connection tag's poll of whether the runtime has closed
// it (no wait: it is called with the coordinator's lock held), asked by a
// promotion before it takes the register for that connection: a thawed
// instance whose connection the runtime dropped while it was frozen may be
// promoted (its successor died meanwhile) before it reads the close.
func (c *Coordinator) ConnGone(tag uint16, gone func() bool) {
	c.mu.Lock()
	if cs := c.conns[tag]; cs != nil {
		cs.gone = gone
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
