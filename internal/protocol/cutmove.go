package protocol

// How the control plane moves the per-event register (cut.go): claims,
// promotions, the idle rule, a failed claim's give-back and a leaving
// owner's release (see cutconn.go for the rules).

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"
)

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
	// markDeferred: the mark is this connection's own (markKey) and the
	// take declares a gap (now, or when the connection acts): its
	// declaration waits for the connection's next call (markPending).
	markDeferred bool
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
	if cs, live := c.conns[tag]; (!live || cs.gone != nil && cs.gone()) && !inSync {
		// A promotion while the instance's newest connection is closed
		// (reconnecting, its new one not claimed yet), or closed by the
		// runtime and not read yet (a thawed instance, dropped while
		// frozen, promoted as its successor died): nothing of this
		// instance could act on the register. Left as it is, a survivor
		// in the runtime's chain takes over by the cut (rules 3, 4), and
		// the new connection claims as heir; taken for the closed one,
		// that survivor skipped one more event, declared (the demo,
		// -faults 10 -seed 147: two declarations for one kill; mode
		// containerd -seed 82, a thawed owner: its promotion declared the
		// event the survivor's rule 3 declared again).
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
				// (A handed event's sighting is first too, but the heir
				// acts on it without recording anew: not the mark.)
				if s, _ := c.sightingLocked(tag); s.valid && s.first && !s.handed && s.owner == w.owner && s.events == recorded {
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
	if t.marked && t.markKey != 0 && outright && (!t.gapSince.IsZero() || c.gapHeir == tag) {
		// The marked event reached no handler so far, but the event may
		// still be in progress: a take-back before its last call could
		// act on it (cut.pml, cut-cp-standby). The connection's next call
		// tells (Decide); should the instance die first, the gap declared
		// covers it.
		t.markDeferred = true
		c.markPending = pendingMark{tag: tag, key: t.markKey, events: recorded}
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
				c.countInDoubt(from0.key)
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
