package protocol

import (
	"sync/atomic"
	"time"
)

// The per-event cut.
//
// Ownership of the plugin's events moves between runtime connections, not
// at a moment in time but at an event: the connection that acts (the
// owner) keeps acting until its heir — a newer instance's connection, or a
// newer connection of the same instance — has been seen in the runtime's
// chain, i.e. called for an event. Until then the heir may not have been
// appended yet: a runtime that does not block plugin sync around an event
// (CRI-O, containerd's task-exit StopContainer) can deliver events after
// the heir's Synchronize has returned and before its append, and those
// reach only the connections already in the chain.
//
// Events are serialized, and within one event the connections of a plugin
// are called one after another in an order nobody may rely on. So the
// connection called second for an event needs to know what the first did:
// both read and change one 64-bit register in the page every instance maps
// (owner.gen), by compare-and-swap only. Only the owner and the heir
// connection touch it; every other connection skips without writing.
//
// The register records the owner and heir connections' tags, a key of the
// last event the owner or heir was called for, which of the two has been
// called for it, and whether it was acted on and finished (the journal a
// survivor reads after a crash), and whether the heir's last call was
// rule 1's ambiguous skip of an event with that key (heirUnseen).

// connTagOffset etc. are the offsets of the cut's words in owner.gen
// (after the generation and epoch counters, see dir.go).
const (
	cutOffset     = 16 // the register
	eventsOffset  = 24 // events the owner or heir was first called for
	connTagOffset = 32 // the last connection tag handed out
	heirMaskCut   = 40 // the events the heir connection subscribes to
	ownerMaskCut  = 48 // the owner connection's tag (bits 48-63) and the events it subscribes to
	lastActCut    = 56 // when a connection last acted on an event (unix nanoseconds)
	deadOwnerCut  = 64 // 1<<16 | the tag of the last register owner known to have no connection (see markDeadOwner)
	prevActCut    = 72 // when a connection acted on the event before (unix nanoseconds; see lastActed)
)

// cutWord is the decoded register.
type cutWord struct {
	owner, heir uint16 // connection tags; 0: none
	key         uint32 // 24 bits: the recorded event
	ownerSeen   bool   // the owner was called for the recorded event
	heirSeen    bool   // the heir was called for it
	acted       bool   // the acting connection took it
	done        bool   // and its handler returned
	inDoubt     bool   // the connection that acted died inside its handler
	// quiet is the idle rule's mark: set by a claim and by the idle heir,
	// cleared by every write of an event call (decide, finish), so a swap
	// from a word with it set proves no event call came in between.
	quiet bool
	// heirUnseen: a call of the heir found the register recording its
	// key, acted on, and skipped it by rule 1 — the second call of the
	// recorded event, or a new event with the same key that the runtime
	// called the heir alone for (the owner dropped); and no event was
	// recorded since (every record of a new event writes a new word). An
	// heir that takes over by rule 2 with it set, from an owner that did
	// not release, declares that event (model finding C6); the idle rule
	// does not promote the heir while it is set (cut-x20): the next event
	// decides. Cleared with the heir.
	heirUnseen bool
	// unrecorded: a connection that may take over, neither owner nor
	// heir, was called for an event the register did not record while an
	// owner held it (the owner had not been called for it yet), and no
	// event was recorded since. On a runtime that calls every connection
	// the owner, called next, records the event and clears it; on one that
	// calls only the newest connection of a name and index (containerd/nri
	// PR 281) the owner, shadowed, is never called for it: a connection
	// that takes the register over from another with it set declares that
	// event in doubt, and the idle rule holds off while it is set (model
	// finding C10, cut-x24: the heir's promotion hid it).
	unrecorded bool
}

func decodeCut(w uint64) cutWord {
	return cutWord{
		owner:      uint16(w),
		heir:       uint16(w >> 16),
		key:        uint32(w>>32) & keyMask,
		ownerSeen:  w&(1<<56) != 0,
		heirSeen:   w&(1<<57) != 0,
		acted:      w&(1<<58) != 0,
		done:       w&(1<<59) != 0,
		inDoubt:    w&(1<<60) != 0,
		quiet:      w&(1<<61) != 0,
		heirUnseen: w&(1<<62) != 0,
		unrecorded: w&(1<<63) != 0,
	}
}

func (c cutWord) encode() uint64 {
	w := uint64(c.owner) | uint64(c.heir)<<16 | uint64(c.key&keyMask)<<32
	for i, b := range []bool{c.ownerSeen, c.heirSeen, c.acted, c.done, c.inDoubt, c.quiet, c.heirUnseen, c.unrecorded} {
		if b {
			w |= 1 << (56 + i)
		}
	}
	return w
}

const keyMask = 1<<24 - 1

// EventKey is the cut's key of an event: its kind and the object it is
// about. Two different events may share a key (the same kind twice for one
// container, or a hash collision); the cut is exact anyway (see
// decide), a shared key only delays a handover by an event.
func EventKey(kind uint32, id string) uint32 {
	h := uint32(2166136261) ^ kind
	h *= 16777619
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	h &= keyMask
	if h == 0 {
		h = 1 // 0 records no event
	}
	return h
}

// Decision is what a connection does with one event.
type Decision struct {
	Act        bool // hand the event to the author
	Promoted   bool // this connection became owner at this event
	HandedOver bool // this connection handed over to its heir at this event
	// InDoubt: the connection that acted on this event died inside its
	// handler, or the runtime gave up on it (this one took over from it);
	// Act only if the caller acts at least once.
	InDoubt bool
	// Overrun: the connection that acted on the recorded event had not
	// finished its handler when the runtime called this one, so the
	// runtime had given up on it (its request timed out or its connection
	// broke): this connection took the register over. The recorded event
	// is in doubt (it is this event if InDoubt is set).
	Overrun bool

	// heirUnseen: an Overrun of rule 2 (see cutWord.heirUnseen); with it,
	// and with rules 3 and 4, recordedKey is the key of the event the
	// register recorded before this call (the one declared); unseenMark: InDoubt from the mark of
	// an outright take by a connection that was not seen for the recorded
	// event (takeCutLocked: after a release, or from an owner), not yet
	// counted.
	heirUnseen, unseenMark bool
	recordedKey            uint32
	// skippedOwner: rule 4 (the owner was not called for the event of
	// this connection's previous call).
	skippedOwner bool
	// handedUnacted: with skippedOwner, the register's recorded event
	// (recordedKey) was not acted on: the previous owner handed it over
	// at that event, and its heir, now owner, was dropped by the runtime
	// before it was called for it (frozen right after the handover: the
	// demo, mode cri-o, -faults). It is declared too: two events, the
	// recorded one and the one of the previous call, reached no handler.
	handedUnacted bool
	// skippedHanded: with handedUnacted, the event of this connection's
	// previous call is the recorded one, handed over and acted on by
	// nobody: the heir was dropped before its call (skipped: after this
	// connection's own handover, or another's it was called around). One
	// event is declared, and this one is acted on.
	skippedHanded bool
	// recordedUnacted: this connection, owner, is called for a new event
	// and the register's recorded event (recordedKey) was acted on by
	// nobody, this connection not called for it either: it was left to
	// this connection by a handover whose heir the runtime dropped before
	// its call, then taken back (a promotion), or by another take. That
	// event is over (the runtime calls for a new one) and reached no
	// handler: the harness may hand it late, once (Config.OnUnacted).
	recordedUnacted bool
	// wasOwner, eventsSeen: the caller owned the register when decide read
	// it, and the events counter then (for Coordinator.markPending).
	wasOwner   bool
	eventsSeen uint64
	// unrecorded: this connection took the register over from another
	// with cutWord.unrecorded set: the event a standby was called for
	// first, and the owner never, is declared in doubt.
	unrecorded bool

	saw  sighting // for the caller's next call
	took bool     // a connection that was neither owner nor heir took the register (rules 3-5)
	// prevOwner and actedSince are the register's owner and the start of
	// a gap (see lastActed) as they were before this call: a takeover from
	// a dead owner declares the gap from there (Coordinator.Decide).
	prevOwner  uint16
	actedSince time.Time
}

// caller is what a connection knows of itself for decide.
type caller struct {
	// mayTakeOver: the connection may take the register over from an
	// owner that overran (the newest connection of a live instance that
	// is not leaving).
	mayTakeOver bool
	// atLeastOnce: it acts on an event in doubt.
	atLeastOnce bool
	// events are the kinds the connection subscribes to (1<<event).
	events uint64
	// prev is what it saw at its previous call (see sighting).
	prev sighting
	// releaser: the connection gave the register up when its instance
	// left with no successor seen (Coordinator.releaseCut). The release
	// may land between the runtime's calls of one event to a connection
	// called before it (which then saw the releaser own the event) and to
	// the releaser: so the releaser takes the register back for an event
	// nobody took (rule 5) and gives it up again once its handler is done.
	releaser bool
	// gone, if set, reports whether the runtime has already closed this
	// connection: asked only before a takeover (rules 3 to 5). A handler
	// that runs late, for a request the runtime had sent before it gave
	// up on a stopped process and closed the connection, is no call of the
	// runtime's now: rules 3 to 5 read the register as the runtime's call
	// order, so such a handler must not take over (it would act next to
	// the connection that is really called; seen in the fault matrix, an
	// old owner thawed after its requests timed out).
	gone func() bool
}

// sighting is what a connection that neither owns nor inherits the
// register saw when it was called for an event: decide returns it, and the
// caller passes it back with its next call. (What an heir's ambiguous
// skip saw is in the register: cutWord.heirUnseen.)
type sighting struct {
	valid bool
	// first: the owner had not been called for the event yet: the
	// register did not record its key, or recorded it handed over to the
	// owner, which had not acted on it (handed).
	first  bool
	owner  uint16 // the register's owner then
	kind   uint64 // the event's kind
	key    uint32 // the event's key
	events uint64 // the events counter then
	// firstCall: it was the connection's first call (set by
	// Coordinator.Decide, which knows).
	firstCall bool
	// handed: the event was handed over to owner (rule 2), which had not
	// been called for it: the call was the owner's own handover, or one
	// of a connection called between the owner and its heir. The heir, in
	// the chain, is called for that event after it: unless the runtime
	// dropped it, by the next event it has acted on it (see skipped).
	handed bool
}

// handedUnseen reports whether w records the event with key handed over
// to its owner (rule 2), which has not been called for it.
func (w cutWord) handedUnseen(key uint32) bool {
	return w.key == key && w.owner != 0 && w.heir == 0 && !w.acted && !w.ownerSeen && !w.inDoubt
}

// skipped reports whether the owner was never called for the event of the
// caller's previous sighting although it subscribes to its kind: the
// register did not record that event when the caller was called first for
// it, and no connection recorded a new event since (the owner, called
// after it, would have). The runtime dropped the owner, or it is frozen
// outside its handlers. handed: that event was handed over to the owner
// and nobody acted on it (Decision.skippedHanded), because
//   - the caller saw the handover (sighting.handed), or
//   - the one event recorded since the caller's call is that handover: the
//     register records the caller's event (its key), not acted on, its
//     owner another than the one the caller saw. Only rule 2 records an
//     event without acting on it, and the heir it hands over to is in
//     the runtime's chain after the owner (it was called for the
//     previous event after it); a new event with another key (key) comes
//     only once the runtime is done with that one. The heir was dropped
//     before its call: killed right after the handover (the demo,
//     -faults: two events lost where the owner that handed over had left).
func (d *Dir) skipped(w cutWord, prev sighting, events uint64, key uint32) (skipped, handed bool) {
	if !prev.valid || !prev.first || w.owner == 0 {
		return false, false
	}
	switch {
	case w.owner == prev.owner && events == prev.events:
		if prev.handed && (w.ownerSeen || w.acted) {
			// The heir it was handed over to was called for that event
			// (its call, the second, records no new event: it marks the
			// word).
			return false, false
		}
		handed = prev.handed
	case !prev.handed && prev.owner != 0 && w.owner != prev.owner && events == prev.events+1 &&
		w.key == prev.key && key != w.key && w.handedUnseen(prev.key):
		handed = true
	default:
		return false, false
	}
	// A mask of another connection: the owner has not recorded its own yet
	// (setOwnerEvents follows the swap that made it owner, and it may have
	// been frozen or killed in between: model finding C8); count it as
	// subscribing.
	m := atomic.LoadUint64(d.word(ownerMaskCut))
	return uint16(m>>48) != w.owner || m&prev.kind != 0, handed
}

// overran reports whether the register's acting connection is still
// inside its handler for the recorded event while the runtime calls
// another connection. Events are serialized and the connections of one
// event called one after another, and a handler's finish is recorded
// before its answer is sent: so the runtime has given up on it.
func (w cutWord) overran() bool { return w.owner != 0 && w.acted && !w.done && !w.inDoubt }

// decide runs the cut for one event at connection tag: key is its
// EventKey, kind its bit in the events an heir subscribes to (see
// SetHeirEvents). It is the whole per-event protocol:
//
//  1. The register records this key and tag has not been called for it:
//     tag is second for the recorded event — or first for a new event with
//     the same key, having missed the recorded one (an heir not appended
//     yet). Either way it acts only if the recorded event was not acted on
//     (the first caller did not act, so it is ours); an heir that acts
//     thereby becomes owner.
//  2. Otherwise tag is first for a new event. An heir is in the chain, as
//     this call shows: it becomes owner and acts; if its previous call
//     was skipped by rule 1 and nothing was recorded since, that event is
//     declared in doubt (see cutWord.heirUnseen). The owner hands over to
//     its heir here if the heir was called for the recorded event, this
//     event has a different key (so that call was not for this event, as
//     in 1) and the heir subscribes to this kind; it then does not act,
//     and the heir acts when called (1). Otherwise the owner acts.
//  3. The acting connection overran (see cutWord.overran): the heir, or
//     any other connection that may take over, becomes owner at once. If
//     this call may be for the recorded event (it has its key, and the
//     heir was not called for it), this event is in doubt; otherwise the
//     recorded event is, and this one is acted on.
//  4. Any other connection that may take over finds that the owner was
//     not called at all for the event it was last called for (see
//     skipped): it becomes owner and acts; that event is in doubt.
//  5. Nobody owns the register and nobody is heir (a leaving owner gave
//     it up with no successor seen, or the heir closed): any connection
//     that may take over becomes owner and acts — unless the release may
//     have come within this event after the owner acted (the register
//     records this key, and an event was recorded since this connection's
//     previous call): then this event is in doubt. If instead nothing was
//     recorded since its previous call, for which it was called first,
//     the owner left before its turn in that event: it is declared.
//
// A connection that may take over and skips an event the register does not
// record while an owner holds it marks the register (cutWord.unrecorded);
// a connection that takes the register over from another with the mark set
// declares that event in doubt (model finding C10).
func (d *Dir) decide(tag uint16, key uint32, kind uint64, me caller) Decision {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil || tag == 0 {
		return Decision{}
	}
	reg := d.word(cutOffset)
	for {
		old := atomic.LoadUint64(reg)
		w := decodeCut(old)
		isOwner, isHeir := w.owner == tag, w.heir == tag
		// A mark of another connection's (cutWord.unrecorded): declared
		// if this call takes the register over.
		marked := w.unrecorded && !isOwner
		dec := Decision{prevOwner: w.owner, actedSince: d.actedSinceLocked(), wasOwner: isOwner}
		events := atomic.LoadUint64(d.word(eventsOffset))
		dec.eventsSeen = events
		skipped, skippedHanded := false, false
		if !isOwner && !isHeir {
			handed := w.handedUnseen(key)
			dec.saw = sighting{valid: true, first: w.key != key || handed, handed: handed, owner: w.owner, kind: kind, key: key, events: events}
			if me.mayTakeOver {
				skipped, skippedHanded = d.skipped(w, me.prev, events, key)
			}
			released := (me.mayTakeOver || me.releaser) && w.owner == 0 && w.heir == 0
			if released && me.gone != nil && me.gone() {
				return dec // a late handler of a closed connection
			}
			if released {
				// 5: nobody owns the register and nobody claims it (an
				// owner that left gave it up with no successor seen).
				// The owner may have released within an event (model
				// finding C5): if no connection recorded an event since
				// this one's previous call, the recorded event is older
				// than this one, and if this one was called first for
				// that previous event, nobody acted on it (the owner left
				// before its turn): it is declared, unless it was handed
				// over to the owner before this call (sighting.handed) and
				// the register shows the owner acted on it. Otherwise the
				// recorded event may be this one (the owner acted on it,
				// then released): with its key, this event is in doubt.
				quiet := me.prev.valid && events == me.prev.events
				dec.Promoted, dec.Act, dec.took = true, true, true
				w = cutWord{owner: tag, ownerSeen: true, key: key, acted: true}
				switch n := decodeCut(old); {
				case quiet && me.prev.first && me.prev.owner != 0 && !(me.prev.handed && n.acted):
					dec.Overrun = true
				case !quiet && n.key == key && n.acted:
					dec.InDoubt, dec.Act = true, me.atLeastOnce
					w.inDoubt, w.done = true, !dec.Act
				}
				dec.unrecorded = marked && !me.releaser
				if d.swapCut(reg, old, w) {
					atomic.AddUint64(d.word(eventsOffset), 1) // counted once, for the swap that landed
					d.storeOwnerEvents(tag, me.events)
					d.recordAct()
					dec.saw = sighting{}
					return dec
				}
				continue
			}
			if !skipped && !(me.mayTakeOver && w.overran()) {
				if me.mayTakeOver && !me.releaser && w.owner != 0 && w.key != key && !w.unrecorded {
					// Called before the owner, or instead of it: marked
					// until the owner (or anyone) records an event.
					w.unrecorded = true
					if !d.swapCut(reg, old, w) {
						continue
					}
				}
				return dec
			}
			if me.gone != nil && me.gone() {
				return dec // a late handler of a closed connection
			}
			dec.took = true
		}
		newEvent := false
		seen := (isOwner && w.ownerSeen) || (isHeir && w.heirSeen)
		if skipped {
			// 4: the owner was not called for the previous event: it is
			// gone from the chain (that event is in doubt); this one is new.
			dec.Overrun, dec.Promoted, dec.Act, dec.skippedOwner = true, true, true, true
			// The recorded event, if nobody acted on it, was handed over
			// to the owner (rule 2) and the runtime dropped it before it
			// was called: it reached no handler either (see
			// Decision.handedUnacted).
			dec.handedUnacted = !w.acted && !w.inDoubt
			dec.recordedKey = w.key
			// After a handover (this connection's own, or one it saw or
			// can tell from the register, see skipped), the event skipped
			// is the one handed over (declared once).
			dec.skippedHanded = skippedHanded
			newEvent = true
			w = cutWord{owner: tag, ownerSeen: true, key: key, acted: true}
		} else if !isOwner && w.overran() {
			// 3: take over from a connection the runtime gave up on. A
			// connection other than the heir keeps no record of the events
			// it was called for: the recorded key is always this event's
			// to it (a new event with the same key is declared in doubt
			// rather than risk acting twice).
			dec.Overrun, dec.Promoted = true, true
			dec.recordedKey = w.key // the event in doubt, this one or the recorded one
			if w.key == key && !seen {
				w.owner, w.heir, w.ownerSeen, w.heirSeen = tag, 0, true, false
				w.inDoubt, dec.InDoubt = true, true
				dec.Act = me.atLeastOnce
				w.done = !dec.Act
			} else {
				newEvent = true
				w = cutWord{owner: tag, ownerSeen: true, key: key, acted: true}
				dec.Act = true
			}
		} else if w.key == key && !seen {
			// 1: second for the recorded event (or ambiguous).
			if isOwner {
				w.ownerSeen = true
			} else {
				w.heirSeen = true
			}
			dec.InDoubt = w.inDoubt && isOwner
			// A mark of takeCutLocked's (done: the owner had released,
			// see there); a dead owner's event in doubt is not done.
			dec.unseenMark = dec.InDoubt && w.acted && w.done
			if isHeir && w.acted && w.owner == 0 {
				// (heirUnseen is cleared with the heir below.)
				// The owner left (released the register) after acting on
				// the recorded event: this call is for it, or for a new
				// event with its key that nobody else will be called for.
				// The heir owns now; the event is in doubt.
				w.owner, w.heir, w.ownerSeen, w.heirSeen = tag, 0, true, false
				dec.Promoted, dec.InDoubt, dec.Act = true, true, me.atLeastOnce
				w.inDoubt, w.done = true, !dec.Act
			} else if w.acted {
				// The ambiguous case of an heir: marked in the register
				// until a new event is recorded (at any of its calls, not
				// only its first: with the runtime calling the heir
				// before the owner, a later skip is as ambiguous, model
				// finding C6, cut-x22).
				w.heirUnseen = w.heirUnseen || isHeir
			} else {
				if isHeir {
					w.owner, w.heir, w.ownerSeen, w.heirSeen = tag, 0, true, false
					dec.Promoted = true
				}
				w.acted, w.done, dec.Act = true, false, true
			}
		} else {
			// 2: first for a new event.
			newEvent = true
			handOver := isOwner && w.heir != 0 && w.heirSeen && w.key != key &&
				atomic.LoadUint64(d.word(heirMaskCut))&kind != 0
			n := cutWord{owner: w.owner, heir: w.heir, key: key}
			switch {
			case isHeir:
				n.owner, n.heir, n.ownerSeen = tag, 0, true
				n.acted, dec.Act, dec.Promoted = true, true, true
				// Nobody recorded an event since the heir's ambiguous
				// skip (the mark is in the word: any record of a
				// new event writes a new one), and the owner did not leave
				// in order (a release, after which it acted on nothing):
				// it was not called after that call, which may have been
				// for a new event nobody acted on.
				dec.Overrun = w.heirUnseen && w.owner != 0
				dec.heirUnseen, dec.recordedKey = dec.Overrun, w.key
			case handOver:
				n.owner, n.heir = w.heir, 0
				dec.HandedOver = true
			default:
				n.ownerSeen, n.acted, dec.Act = true, true, true
				// Nothing acted on the recorded event, and this owner
				// was not called for it (cut.pml: late[], cut-cp-handed-dropped).
				if isOwner && w.key != 0 && !w.acted && !w.ownerSeen && !w.inDoubt {
					dec.recordedUnacted, dec.recordedKey = true, w.key
				}
			}
			w = n
		}
		w.quiet = false
		w.heirUnseen = w.heirUnseen && w.heir != 0 // the mark is the heir's
		if w.owner == tag && marked {
			// Taken over (an heir's promotion, rules 1 to 4) with the mark
			// of an event the owner was not called for: declared.
			dec.unrecorded, w.unrecorded = true, false
		} else if newEvent {
			w.unrecorded = false // a fresh word: recorded
		}
		if d.swapCut(reg, old, w) {
			if newEvent {
				// Counted once, after the swap that landed: a failed swap
				// (a claim, the idle rule, a release or a late finish in
				// between) loads the counter again for its retry, which
				// must find it as this call found it (model finding C6,
				// cut-x21: counted before the swap, a retry saw its own
				// count as a recorded event).
				atomic.AddUint64(d.word(eventsOffset), 1)
			}
			switch {
			case w.owner == tag:
				d.storeOwnerEvents(tag, me.events) // for rule 4
			case dec.HandedOver:
				d.storeOwnerEvents(w.owner, atomic.LoadUint64(d.word(heirMaskCut)))
			}
			if dec.Act {
				d.recordAct()
			}
			dec.saw = sighting{}
			if dec.HandedOver {
				// For this connection's next call: the heir, called
				// after it for this event, marks the word; if it does
				// not, the runtime dropped it (rule 4 at that call).
				dec.saw = sighting{valid: true, first: true, handed: true, owner: w.owner, kind: kind, key: key,
					events: atomic.LoadUint64(d.word(eventsOffset))}
			}
			return dec
		}
	}
}

// swapCut is decide's compare-and-swap of the register; call with genMu
// read-locked.
func (d *Dir) swapCut(reg *uint64, old uint64, w cutWord) bool {
	if d.beforeCutSwap != nil {
		d.beforeCutSwap()
	}
	return atomic.CompareAndSwapUint64(reg, old, w.encode())
}

// finish records that tag's handler for the event with key returned.
func (d *Dir) finish(tag uint16, key uint32) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return
	}
	reg := d.word(cutOffset)
	for {
		old := atomic.LoadUint64(reg)
		w := decodeCut(old)
		if w.owner != tag || w.key != key || !w.acted || w.done {
			return
		}
		w.done, w.quiet = true, false
		if atomic.CompareAndSwapUint64(reg, old, w.encode()) {
			return
		}
	}
}

// updateCut applies f to the register until the swap succeeds; f reports
// false to leave it unchanged. It returns the register as f left it.
func (d *Dir) updateCut(f func(w *cutWord) bool) (cutWord, bool) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return cutWord{}, false
	}
	reg := d.word(cutOffset)
	for {
		old := atomic.LoadUint64(reg)
		w := decodeCut(old)
		if !f(&w) {
			return w, false
		}
		if atomic.CompareAndSwapUint64(reg, old, w.encode()) {
			return w, true
		}
	}
}

// readCut returns the register and the events counter.
func (d *Dir) readCut() (cutWord, uint64, bool) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return cutWord{}, 0, false
	}
	return decodeCut(atomic.LoadUint64(d.word(cutOffset))), atomic.LoadUint64(d.word(eventsOffset)), true
}

// newConnTag hands out a connection tag, unique among the connections of
// the plugin's instances on the node for the next 65,535 connections.
func (d *Dir) newConnTag() uint16 {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return 0
	}
	for {
		if t := uint16(atomic.AddUint64(d.word(connTagOffset), 1)); t != 0 {
			return t
		}
	}
}

// recordAct records that a connection acts on an event now; call with
// genMu read-locked.
func (d *Dir) recordAct() {
	atomic.StoreUint64(d.word(prevActCut), atomic.LoadUint64(d.word(lastActCut)))
	atomic.StoreUint64(d.word(lastActCut), uint64(time.Now().UnixNano()))
}

// lastActed returns the start of the window in which no connection of the
// plugin may have acted on a live request: when one acted on the event
// before the last one acted on (zero: never, since the directory was
// created). Not the last act itself: that may have been late, a handler
// of a stopped process that resumed after the runtime had given up on its
// request and gone on without it (every event meanwhile reached nobody),
// and its act tells nothing about those events. So a gap declared from
// here may begin one act early; it never begins late.
func (d *Dir) lastActed() time.Time {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return time.Time{}
	}
	return d.actedSinceLocked()
}

// actedSinceLocked is lastActed; call with genMu read-locked and gen
// non-nil.
func (d *Dir) actedSinceLocked() time.Time {
	n := atomic.LoadUint64(d.word(prevActCut))
	if last := atomic.LoadUint64(d.word(lastActCut)); n == 0 || last < n {
		n = last
	}
	if n != 0 {
		return time.Unix(0, int64(n))
	}
	return time.Time{}
}

// setOwnerEvents records the events the owner connection tag subscribes
// to (rule 4 of decide uses them only while tag owns the register).
func (d *Dir) setOwnerEvents(tag uint16, mask uint64) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen != nil {
		d.storeOwnerEvents(tag, mask)
	}
}

// markDeadOwner records that connection tag, if it still owns the
// register, is closed: its instance knows (its connection dropped, or it
// took the register for a connection that had already closed). Events the
// runtime sends meanwhile reach nobody acting, and the instance that takes
// the register from tag next declares a gap (ownerDead), whichever
// instance it is.
func (d *Dir) markDeadOwner(tag uint16) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil || tag == 0 {
		return
	}
	if decodeCut(atomic.LoadUint64(d.word(cutOffset))).owner == tag {
		atomic.StoreUint64(d.word(deadOwnerCut), 1<<16|uint64(tag))
	}
}

// ownerDead reports whether markDeadOwner recorded connection tag.
func (d *Dir) ownerDead(tag uint16) bool {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	return d.gen != nil && tag != 0 && atomic.LoadUint64(d.word(deadOwnerCut)) == 1<<16|uint64(tag)
}

// storeOwnerEvents is setOwnerEvents; call with genMu read-locked.
func (d *Dir) storeOwnerEvents(tag uint16, mask uint64) {
	if m := uint64(tag)<<48 | mask&(1<<48-1); atomic.LoadUint64(d.word(ownerMaskCut)) != m {
		atomic.StoreUint64(d.word(ownerMaskCut), m)
	}
}

// setHeirEvents records the events the heir connection subscribes to.
func (d *Dir) setHeirEvents(mask uint64) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen != nil {
		atomic.StoreUint64(d.word(heirMaskCut), mask)
	}
}

// heirEvents returns the events the heir connection subscribes to.
func (d *Dir) heirEvents() uint64 {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return 0
	}
	return atomic.LoadUint64(d.word(heirMaskCut))
}
