package plugin

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/lifecycle"
)

// Events in doubt declared at a later moment.
//
// An instance that takes over from an owner the runtime gave up on learns
// of the event the owner was inside of either at that very event (the
// runtime calls it next: Decision.InDoubt, handled in begin) or at a later
// one: it was called before the owner for that event, or the owner was
// dropped before its turn, and only the next call shows it. By then the
// runtime has answered that event's request. This file names such an
// event to the author (InDoubt) and, with WithAtLeastOnce, hands it to
// the author's handler late, as a catch-up hands a missed change: at the
// next event this instance acts on, before that event, with a context
// that says CatchingUp. Starts, stops and removals are left to the
// lifecycle record's settlement (settleInDoubt), a creation to the
// catch-up of unprocessed containers, a validation has nothing to hand
// late.
//
// An earlier event that the cut knows reached no handler at all (the
// owner was never called for it: it was dropped or frozen between events,
// or dropped right after a handover to it) is not in doubt: with or
// without WithAtLeastOnce, an event of the kinds above is handed late the
// same way, once, and counted as caught up (reachedNobody; a pod's run is
// recorded in the lifecycle record first, as a catch-up's are); the others
// go where their kind goes at a catch-up, and are declared in doubt.

// recentCalls keeps the events the runtime called this instance's
// connections for last (each connection's last one among them: the
// runtime calls a plugin's connections one after another), by protocol
// key, with what the runtime passed (pointers to its request, kept until
// eight later calls replace them). Its methods take mu, which no one
// holds for long.
type recentCalls struct {
	mu    sync.Mutex
	next  int
	calls [8]recentCall
}

// recentCall is one event the runtime called a connection for: its kind,
// object and protocol key, and the request's pod, container and resources
// as the event has them (nil where it has none).
type recentCall struct {
	key      uint32
	event    eventKind
	id       string
	pod      *api.PodSandbox
	ctr      *api.Container
	res      *api.LinuxResources // UpdateContainer's and UpdatePodSandbox's resources
	overhead *api.LinuxResources // UpdatePodSandbox's overhead
}

func (r *recentCalls) add(c recentCall) {
	r.mu.Lock()
	r.calls[r.next] = c
	r.next = (r.next + 1) % len(r.calls)
	r.mu.Unlock()
}

// find returns the latest call with key.
func (r *recentCalls) find(key uint32) (recentCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range len(r.calls) {
		c := r.calls[(r.next+len(r.calls)-1-i)%len(r.calls)]
		if c.key == key && c.id != "" {
			return c, true
		}
	}
	return recentCall{}, false
}

// owedCalls are the events this instance hands its author late, oldest
// first: events in doubt (WithAtLeastOnce) and events that reached no
// handler (unacted); at most maxOwed, a later one replaces the oldest
// (logged). n mirrors len(calls) for the event path's check.
type owedCalls struct {
	mu    sync.Mutex
	calls []owedCall
	n     atomic.Int32
}

// owedCall is one event owed: unacted if it reached no handler, else in
// doubt.
type owedCall struct {
	recentCall
	unacted bool
}

const maxOwed = 8

// pending reports whether a call is owed (no lock: the event path asks).
func (o *owedCalls) pending() bool { return o.n.Load() != 0 }

// add owes c, unless it is owed already (declared twice); it returns the
// call it dropped to make room, if any.
func (o *owedCalls) add(c owedCall) (dropped owedCall, full bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, owed := range o.calls {
		if owed.key == c.key && owed.event == c.event && owed.id == c.id {
			return owedCall{}, false
		}
	}
	if len(o.calls) == maxOwed {
		dropped, full = o.calls[0], true
		o.calls = o.calls[1:]
	}
	o.calls = append(o.calls, c)
	o.n.Store(int32(len(o.calls)))
	return dropped, full
}

// take returns the owed calls and owes none.
func (o *owedCalls) take() []owedCall {
	o.mu.Lock()
	defer o.mu.Unlock()
	calls := o.calls
	o.calls = nil
	o.n.Store(0)
	return calls
}

// handedLate reports whether an event in doubt of this kind, declared at
// a later moment, is handed to the author again by this file (with
// WithAtLeastOnce), not by a catch-up.
func handedLate(ev eventKind) bool {
	switch ev {
	case evRunPodSandbox, evUpdatePodSandbox, evPostUpdatePodSandbox, evPostCreateContainer,
		evPostStartContainer, evUpdateContainer, evPostUpdateContainer:
		return true
	}
	return false
}

// declaredInDoubt is the coordinator's OnInDoubt: it counts the event
// declared in doubt and, when the declaration is of an earlier event than
// the call that makes it (key not 0), names it to the author if this
// instance was called for it; with WithAtLeastOnce it owes the author that
// event (handOwed).
func (p *Plugin) declaredInDoubt(key uint32) {
	p.obs.InDoubt()
	if key == 0 {
		return
	}
	c, ok := p.recent.find(key)
	if !ok {
		return // never called for it: declared by its key only
	}
	if k, st, life := lifeEvent(c.event); life && p.rec != nil &&
		(k == lifecycle.Container && st > lifecycle.Created || k == lifecycle.Pod && st > lifecycle.Running) {
		// A start, stop or removal: the lifecycle record's settlement at
		// this instance's catch-up tells it, and hands it again with
		// WithAtLeastOnce (settleInDoubt).
		return
	}
	why := "the instance acting on it did not finish it (it died, froze or was dropped); declared at a later moment, not handed again"
	owed := p.cfg.atLeastOnce && handedLate(c.event)
	if owed {
		why = "the instance acting on it did not finish it (it died, froze or was dropped); declared at a later moment, handed again before the next event this instance acts on (WithAtLeastOnce)"
		p.owe(owedCall{recentCall: c})
	}
	// Not under the coordinator's hold on events, which a promotion may
	// keep while it declares: the author's InDoubt is the author's code.
	go p.inDoubt(c.event, c.id, owed, why)
}

// reachedNobody is the coordinator's OnUnacted: the event with key, which
// this instance was called for, reached no handler of any instance. An
// event handedLate can hand is owed to the author (handOwed) and true
// returned; else false, and the coordinator declares it in doubt. A pod's
// run is recorded in the lifecycle record as it is handed (handOwed), as a
// catch-up's missed pod runs are (handMissedPodRuns): whichever of the two
// comes first hands it.
func (p *Plugin) reachedNobody(key uint32) bool {
	c, ok := p.recent.find(key)
	if !ok || !handedLate(c.event) {
		return false
	}
	p.owe(owedCall{recentCall: c, unacted: true})
	return true
}

// owe adds c to the events owed, logging one dropped for room.
func (p *Plugin) owe(c owedCall) {
	if dropped, full := p.owed.add(c); full {
		p.log.WithFields(logrus.Fields{"event": dropped.event.String(), "object": dropped.id, "unacted": dropped.unacted}).
			Warn("event not handed late: more events owed than kept (no act since they were declared)")
	}
}

// handOwed hands the author, late, the events this instance owes
// (declaredInDoubt, reachedNobody), oldest first: called as a connection
// of this instance acts on an event, inside its event section, before
// that event's handler. The updates an UpdateContainer returns go through
// UpdateContainers once the request is answered.
func (a *adapter) handOwed(ctx context.Context) {
	p := a.p
	ctx = context.WithValue(ctx, catchingUpKey{}, true)
	var updates []*api.ContainerUpdate
	for _, c := range p.owed.take() {
		slot, handed := p.recordLateRun(c)
		if handed {
			continue
		}
		u, err := p.handLate(ctx, c.recentCall)
		p.rec.EndLate(slot)
		log := p.log.WithFields(logrus.Fields{"event": c.event.String(), "object": c.id})
		what := "event in doubt handed again (WithAtLeastOnce)"
		if c.unacted {
			// A change no instance acted on, caught up as a catch-up's.
			p.caughtUpChanges.Add(1)
			what = "event that reached no handler handed late (caught up)"
		}
		if err != nil {
			log.WithError(err).Warn(what + ": the author's handler failed")
		} else {
			log.Warn(what)
		}
		updates = append(updates, u...)
	}
	if len(updates) != 0 {
		go func() {
			// Outside the request: from inside it the call would deadlock.
			if failed, err := p.UpdateContainers(updates); err != nil || len(failed) != 0 {
				p.log.WithError(err).WithField("failed", len(failed)).
					Warn("event handed late: the updates the author returned were not all applied")
			}
		}()
	}
}

// recordLateRun records, for a pod's run that reached no handler (c), the
// pod as run in the lifecycle record before it is handed late, marked late
// as a catch-up's missed runs are; handed reports that the record has the
// pod already (a catch-up handed its run, or an instance acted on it) or
// is closed: not handed again. Any other call: nothing recorded.
func (p *Plugin) recordLateRun(c owedCall) (slot lifecycle.Slot, handed bool) {
	if !c.unacted || c.event != evRunPodSandbox || p.rec == nil {
		return lifecycle.Slot{}, false
	}
	id := c.pod.GetId()
	if p.recordedPods()[id] {
		p.log.WithField("object", id).Info("a pod's run that reached no handler is in the lifecycle record already (a catch-up handed it): not handed late")
		return lifecycle.Slot{}, true
	}
	slot = p.rec.Begin(lifecycle.Pod, id, "", lifecycle.Running)
	return slot, slot.Closed() || slot.Handed()
}

// handLate calls the author's handler of c's event with what the runtime
// passed (see handedLate for the kinds).
func (p *Plugin) handLate(ctx context.Context, c recentCall) ([]*api.ContainerUpdate, error) {
	switch c.event {
	case evRunPodSandbox:
		if h, ok := p.author.(stub.RunPodInterface); ok {
			return nil, h.RunPodSandbox(ctx, c.pod)
		}
	case evUpdatePodSandbox:
		if h, ok := p.author.(stub.UpdatePodInterface); ok {
			return nil, h.UpdatePodSandbox(ctx, c.pod, c.overhead, c.res)
		}
	case evPostUpdatePodSandbox:
		if h, ok := p.author.(stub.PostUpdatePodInterface); ok {
			return nil, h.PostUpdatePodSandbox(ctx, c.pod)
		}
	case evPostCreateContainer:
		if h, ok := p.author.(stub.PostCreateContainerInterface); ok {
			return nil, h.PostCreateContainer(ctx, c.pod, c.ctr)
		}
	case evPostStartContainer:
		if h, ok := p.author.(stub.PostStartContainerInterface); ok {
			return nil, h.PostStartContainer(ctx, c.pod, c.ctr)
		}
	case evUpdateContainer:
		if h, ok := p.author.(stub.UpdateContainerInterface); ok {
			return h.UpdateContainer(ctx, c.pod, c.ctr, c.res)
		}
	case evPostUpdateContainer:
		if h, ok := p.author.(stub.PostUpdateContainerInterface); ok {
			return nil, h.PostUpdateContainer(ctx, c.pod, c.ctr)
		}
	}
	return nil, nil
}
