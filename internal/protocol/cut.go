package protocol

import (
	"sync/atomic"
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
// survivor reads after a crash).

// connTagOffset etc. are the offsets of the cut's words in owner.gen
// (after the generation and epoch counters, see dir.go).
const (
	cutOffset     = 16 // the register
	eventsOffset  = 24 // events the owner or heir was first called for
	connTagOffset = 32 // the last connection tag handed out
	heirMaskCut   = 40 // the events the heir connection subscribes to
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
}

func decodeCut(w uint64) cutWord {
	return cutWord{
		owner:     uint16(w),
		heir:      uint16(w >> 16),
		key:       uint32(w>>32) & keyMask,
		ownerSeen: w&(1<<56) != 0,
		heirSeen:  w&(1<<57) != 0,
		acted:     w&(1<<58) != 0,
		done:      w&(1<<59) != 0,
		inDoubt:   w&(1<<60) != 0,
		quiet:     w&(1<<61) != 0,
	}
}

func (c cutWord) encode() uint64 {
	w := uint64(c.owner) | uint64(c.heir)<<16 | uint64(c.key&keyMask)<<32
	for i, b := range []bool{c.ownerSeen, c.heirSeen, c.acted, c.done, c.inDoubt, c.quiet} {
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
	// handler (this one took over from it meanwhile); Act is false.
	InDoubt bool
}

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
//     this call shows: it becomes owner and acts. The owner hands over to
//     its heir here if the heir was called for the recorded event, this
//     event has a different key (so that call was not for this event: see
//  1. and the heir subscribes to this kind; it then does not act, and
//     the heir acts when called (1). Otherwise the owner acts.
func (d *Dir) decide(tag uint16, key uint32, kind uint64) Decision {
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
		if !isOwner && !isHeir {
			return Decision{}
		}
		var dec Decision
		newEvent := false
		seen := (isOwner && w.ownerSeen) || (isHeir && w.heirSeen)
		if w.key == key && !seen {
			// 1: second for the recorded event (or ambiguous).
			if isOwner {
				w.ownerSeen = true
			} else {
				w.heirSeen = true
			}
			dec.InDoubt = w.inDoubt && isOwner
			if !w.acted {
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
			case handOver:
				n.owner, n.heir = w.heir, 0
				dec.HandedOver = true
			default:
				n.ownerSeen, n.acted, dec.Act = true, true, true
			}
			w = n
		}
		w.quiet = false
		if newEvent {
			atomic.AddUint64(d.word(eventsOffset), 1)
		}
		if atomic.CompareAndSwapUint64(reg, old, w.encode()) {
			return dec
		}
	}
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
