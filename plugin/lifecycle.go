package plugin

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/lifecycle"
)

// catchingUpKey marks the context of a handler call that hands a missed
// lifecycle change (see CatchingUp).
type catchingUpKey struct{}

// CatchingUp reports whether ctx is that of a late call of an author's
// handler: by a catch-up, for a lifecycle change (StartContainer,
// StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox, or a
// pod's RunPodSandbox) that happened while no instance of the plugin
// acted; for a pod's run, an update or a Post* event that reached no
// instance's handler (the owner was dropped or frozen before its call for it) and
// that an instance called for it hands once, late, as it takes over; or,
// with WithAtLeastOnce, for an event in doubt handed again after its
// request was answered (RunPodSandbox, UpdatePodSandbox, UpdateContainer
// and the Post* events). An UpdateContainer's updates handed late go
// through UpdateContainers. The runtime did not wait for it. For an
// object a catch-up finds the runtime no longer lists, only the ids are
// set: a container's Id, PodSandboxId and State (stopped), a pod's Id;
// the pod passed with a container is the listed pod, or one with only its
// Id set.
func CatchingUp(ctx context.Context) bool {
	v, _ := ctx.Value(catchingUpKey{}).(bool)
	return v
}

// recordSlots is the size of a new lifecycle record (a variable for the
// package's tests).
var recordSlots = lifecycle.DefaultSlots

// openRecord opens the lifecycle record if the author handles a
// lifecycle change a catch-up can hand; nil (logged) if not, or if the
// record cannot be used.
func (p *Plugin) openRecord() *lifecycle.Table {
	var m api.EventMask
	for _, e := range []api.Event{api.Event_START_CONTAINER, api.Event_STOP_CONTAINER, api.Event_REMOVE_CONTAINER,
		api.Event_STOP_POD_SANDBOX, api.Event_REMOVE_POD_SANDBOX} {
		m.Set(e)
	}
	if p.handles&m == 0 {
		return nil
	}
	t, err := lifecycle.OpenSlots(p.dir.Path(), recordSlots)
	if err != nil {
		msg := "no lifecycle record: the lifecycle changes of a window in which no instance acts cannot be handed to the author"
		if errors.Is(err, lifecycle.ErrLayout) {
			msg = "no lifecycle record (written by an incompatible build; left alone): the lifecycle changes of a window in which no instance acts cannot be handed to the author"
		}
		p.log.WithError(err).Warn(msg)
		return nil
	}
	return t
}

// lifeEvent is the record's view of an event: what it is about and the
// state it moves to.
func lifeEvent(ev eventKind) (lifecycle.Kind, lifecycle.State, bool) {
	switch ev {
	case evCreateContainer:
		return lifecycle.Container, lifecycle.Created, true
	case evStartContainer:
		return lifecycle.Container, lifecycle.Running, true
	case evStopContainer:
		return lifecycle.Container, lifecycle.Stopped, true
	case evRemoveContainer:
		return lifecycle.Container, lifecycle.Removed, true
	case evRunPodSandbox:
		return lifecycle.Pod, lifecycle.Running, true
	case evStopPodSandbox:
		return lifecycle.Pod, lifecycle.Stopped, true
	case evRemovePodSandbox:
		return lifecycle.Pod, lifecycle.Removed, true
	}
	return 0, 0, false
}

// record notes, for turn t of a lifecycle event on id (pod: a
// container's pod id), that its change is being acted on; call done on
// what it returns once the author's handler returned. skip: the author
// must not get this change, because
//   - a catch-up already handed it (the runtime had changed the object's
//     state, as listed, before it sent the event), or
//   - the record is closed: Run has returned (release), or the test kit
//     crashed the instance, after this event's decision. Handed now, the
//     act would be in no record: the next owner declares the event in
//     doubt (its register shows it acted on, not finished) and, the record
//     showing the change not made, a later catch-up hands it again.
//     Dropped, the catch-up's act is the only one. (The demo, cri-o,
//     -faults 10: a RemovePodSandbox whose handler ran after its instance
//     was killed, handed again 1.3 s later.)
//   - the runtime gave up on the request (its context ended: the instance
//     was frozen between the decision and here, and the runtime went on
//     without it): a write now would come after other instances' acts on
//     the object's later events, and bring back an entry they removed (the
//     demo, mode exit-stop, -faults 10 -seed 3076: an owner killed by the
//     kit, whose handler ran on, recorded the RunPodSandbox it was inside
//     after the pod's stop and removal were acted on, both handed again by
//     a later catch-up; the kit now closes a killed instance's record at
//     once). The takeover declares the event in doubt.
//
// An event this connection does not act on but declared in doubt (the
// owner died inside it) is recorded as decided at once: it is not handed
// again by a catch-up. A creation is not: a catch-up hands no creation,
// and an object whose creation is in doubt may not be in the runtime's
// list yet (see catchUpLifecycle). No system call: a few loads and
// stores in the mapped record, and no allocation.
func (t turn) record(ctx context.Context, ev eventKind, id, pod string) (r recording, skip bool) {
	rec := t.a.p.rec
	if rec == nil {
		return recording{}, false
	}
	k, st, ok := lifeEvent(ev)
	if !ok {
		return recording{}, false
	}
	if t.act && ctx.Err() != nil {
		t.a.p.gaveUp(ev, id)
		return recording{}, true
	}
	if !t.act {
		if t.inDoubt && ev != evCreateContainer && ev != evRunPodSandbox {
			rec.Set(k, id, pod, st)
		}
		return recording{}, false
	}
	s := rec.Begin(k, id, pod, st)
	if s.Closed() {
		t.a.p.log.WithFields(logrus.Fields{"event": ev.String(), "object": id}).
			Warn("lifecycle record closed before this change was recorded (the instance is stopping): not handing it to the author; the next owner's catch-up will")
		return recording{}, true
	}
	if s.Handed() {
		t.a.p.handedBefore(ev, id)
	}
	return recording{rec: rec, slot: s}, s.Handed()
}

// handedBefore logs a lifecycle change that a catch-up handed to the
// author already (see turn.record). Apart from record, whose common path
// stays short.
func (p *Plugin) handedBefore(ev eventKind, id string) {
	p.log.WithFields(logrus.Fields{"event": ev.String(), "object": id}).
		Info("a catch-up handed this lifecycle change to the author already; not handing it again")
}

// recording is a change turn.record began in the lifecycle record; the
// zero value is none. A value, not a closure: one event acted on
// allocates nothing for it.
type recording struct {
	rec  *lifecycle.Table
	slot lifecycle.Slot
}

// done ends the change once the author's handler returned (lifecycle.Table.End:
// nothing for none, or once the record is closed: an instance the test kit
// killed meanwhile ends nothing, as a killed process would not).
func (r recording) done() { r.rec.End(r.slot) }

// eventOfChange is the harness's event kind of a missed change's NRI event.
func eventOfChange(e api.Event) eventKind {
	for k, n := range nriEvents {
		if n == e {
			return eventKind(k)
		}
	}
	return evRunPodSandbox
}

// noteGap is the coordinator's OnGap: this instance took over after a
// window in which no instance acted, and acts from here on. It notes the
// record's Seq at that moment for the gap's lifecycle catch-up (see
// lifecycleGap), then counts and reports the gap.
func (p *Plugin) noteGap(gap time.Duration) {
	seq := p.rec.Seq()
	p.gapSeq.Store(seq) // before the count: who reads the count reads this Seq or a later one
	if p.gaps.Add(1) > p.lifeGaps.Load() {
		// For whichever owner catches up next (see lifecycleGap). Not a
		// gap a catch-up covered already: one declared at the act of a
		// connection whose Synchronize caught up (GapPending), noted in
		// the record, made a newcomer's clean claim catch up with a list
		// that may lag the record (the demo, -faults 10: three more runs
		// in 800 with an event lost or a container handed twice).
		p.rec.NoteGap(seq)
	}
	p.obs.Gap(gap)
}

// lifecycleGap reports whether the owner's Synchronize ends a window in
// which no instance acted: a connection of this instance claimed or was
// promoted while none acted and is to declare the gap
// (protocol.Coordinator.GapPending), or this instance declared a gap since
// its last lifecycle catch-up (a promotion, or a takeover at an event,
// whose catch-up this is). It notes the gaps as caught up.
//
// upTo bounds the record's entries the catch-up may compare with the
// runtime's list: for a gap declared earlier, the record's Seq when it
// was declared (noteGap). This instance has acted since, and the list
// may lag what it acted on: CRI-O sends a creation (RunPodSandbox,
// CreateContainer) before it lists the new object (cri-o issue 10090),
// and lists outside the lock its events take, so an object whose creation
// was acted on just before the list may be missing from it, and would
// read as gone (its stop and removal handed, then acted on again when the
// runtime sends them: TestDemoFaultsInEveryMode, cri-o). An entry
// written after the gap ended was written by an act: no change of that
// window is to be found in it. For a gap this Synchronize ends, upTo is
// the maximum: the connection's Configure bounds the entries (see
// catchUpLifecycle).
//
// A follow-up catch-up (see unsettled) is one too: upTo is then at least
// the bound of the catch-ups whose objects it compares.
//
// So is a gap another instance declared and did not catch up (it yielded
// before its catch-up: the demo, mode gap, -faults 10 -seed 2089, a pod
// run in the window never handed): noted in the record (NoteGap), taken
// here by whichever owner synchronizes next. Its Seq then counts as this
// instance's last gap's (gapSeq).
func (p *Plugin) lifecycleGap() (gap bool, upTo uint64) {
	pending := p.coord.GapPending()
	noted, another := p.rec.TakeGap()
	if another && noted > p.gapSeq.Load() {
		p.gapSeq.Store(noted)
	}
	gaps := p.gaps.Load()
	upTo = p.gapSeq.Load()
	if pending {
		gaps++ // declared when this connection takes the register
		upTo = math.MaxUint64
	}
	followUp, bound := p.unsettled.takeDue()
	for {
		seen := p.lifeGaps.Load()
		if !pending && gaps <= seen {
			if another {
				return true, max(upTo, bound)
			}
			return followUp, bound
		}
		if gaps <= seen || p.lifeGaps.CompareAndSwap(seen, gaps) {
			return true, max(upTo, bound)
		}
	}
}

// catchUpLifecycle hands the author, once, each lifecycle change of a
// pod or container some instance acted on that no instance acted on since
// (the record against the runtime's list: lifecycle.Diff), then brings the
// record in line with the list. It runs in the Synchronize of an owner,
// when no event is in flight. events is the connection's subscription:
// a change the author does not subscribe to is recorded, not handed. The
// updates the author's StopContainer returns are collected in updates.
//
// since is the record's Seq when the connection was configured: the
// runtime listed after that, so an entry written later (an instance acted
// meanwhile: a promoted owner's own connection) may be newer than the
// list, and is left alone. So is one written after upTo (see
// lifecycleGap): the gap ended before it.
func (p *Plugin) catchUpLifecycle(ctx context.Context, events api.EventMask, since, upTo uint64, pods []*api.PodSandbox,
	ctrs []*api.Container) (updates []*api.ContainerUpdate) {
	rec := p.rec
	if rec == nil {
		return nil
	}
	before := p.caughtUpChanges.Load()
	defer func() {
		p.log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(ctrs), "since": since, "up_to": upTo,
			"handed": p.caughtUpChanges.Load() - before, "pods_known": p.podsTracked()}).
			Info("lifecycle catch-up: the record compared with the runtime's list")
	}()
	if n := rec.Overflows(); n > p.unrecorded.Load() {
		p.unrecorded.Store(n)
		p.log.WithFields(logrus.Fields{"objects": n, "slots": rec.Slots(), "record": rec.Path()}).
			Warn("lifecycle record full: some pods or containers found no room in it, and their lifecycle changes in a window in which no instance acted cannot be known")
	}
	// Nobody acted since the connection's Configure: the list is not
	// older than the record, and the listed objects it lacks can be
	// added. Else one it lacks may have gone since the runtime listed it.
	configured := since
	quiet := rec.Seq() == since
	// lastBegun: the record's Seq when the last gap began, as far as
	// this instance knows it. For a gap this Synchronize ends (upTo is
	// the maximum: lifecycleGap), not declared yet, it is the Seq at the
	// connection's Configure: no instance acted in the window, so the
	// last change written before it was begun before the gap; the Seq
	// noted at an earlier gap (gapSeq) is stale then.
	lastBegun := []uint64{p.gapSeq.Load()}
	if upTo == math.MaxUint64 {
		lastBegun = append(lastBegun, since)
	}
	if upTo < since {
		since = upTo
	}
	entries, unreadable := rec.Entries()
	inHand := live(entries) // changes a handler of this process is inside of
	entries = notLive(olderThan(entries, since))
	if unreadable != 0 {
		p.log.WithFields(logrus.Fields{"entries": unreadable, "record": rec.Path()}).
			Warn("lifecycle record: unreadable entries dropped: their objects' lifecycle changes in a window in which no instance acted cannot be known")
		rec.Drop()
	}
	ctx = context.WithValue(ctx, catchingUpKey{}, true)
	// handed: the objects a change of which was handed here, marked late
	// (see below): the record already holds their state after it.
	handed := map[string]bool{}
	// Pods run while no instance acted (handMissedPodRuns), first,
	// before anything else this catch-up does: only while no instance
	// acted since the list.
	if events.IsSet(api.Event_RUN_POD_SANDBOX) && unreadable == 0 {
		if p.handMissedPodRuns(ctx, configured, pods, handed) {
			return updates // stopping: the next owner's catch-up hands the rest (see turn.record)
		}
	}
	// A change an instance began and did not finish: it died or froze
	// inside the author's handler with no instance to take over: in
	// doubt.
	pending := false
	// inFlight: the objects whose creation may still have been in the
	// runtime's hands when it listed. The runtime adds an object to its
	// list only once it is done with its creation's event (it gave up on
	// a dead instance, called the others), and CRI-O lists outside the
	// lock its events take, and lists a container only once the OCI
	// runtime created it: a list taken meanwhile lacks it, and Diff would
	// read it as gone (its stop, and removal, handed now, and the
	// runtime's own StartContainer found handed and dropped: the demo,
	// cri-o, -faults 10, an undeclared miss). They are the objects
	//   - whose creation an instance that died was inside of (pending in
	//     the record), or
	//   - whose creation (a container created, a pod run) was the last
	//     change any instance began before the last gap this instance
	//     declared (the entry's Seq is the record's Seq then: noteGap),
	//     or before the gap this Synchronize ends (lastBegun), not
	//     changed since: the instance that acted on it may have died
	//     before the runtime was done with it (-seed 97; mode gap -seed
	//     79: a first owner's catch-up read the stale Seq of an earlier
	//     gap, handed the stop of a container the runtime had not
	//     listed yet, and dropped the runtime's own StartContainer), or
	//   - containers whose creation is their last change, whenever it
	//     was: CRI-O lists a container only once the OCI runtime created
	//     it, after its CreateContainer returned and while later events
	//     go on, so the last creation is not the only one a list may
	//     lack (mode cri-o, -faults 10 -seed 3063: a container created
	//     3 ms before the list, others acted on between, read as gone,
	//     its StartContainer dropped undeclared). A container created and
	//     gone without a start in a window is handed its stop and
	//     removal by the follow-up, settleDelay later.
	// While the list lacks them they are left out of the comparison for
	// up to settleDelay, and a follow-up catch-up compares them then
	// (unsettled): listed by then, as any; still not listed, as gone (a
	// pod run just before the gap and removed within it is handed its
	// removal then).
	inFlight := map[string]bool{}
	for _, e := range entries {
		if e.Pending == lifecycle.Unknown {
			lastBeforeGap := e.Seq != 0 && slices.Contains(lastBegun, e.Seq)
			if justCreated(e) && (lastBeforeGap || e.Kind == lifecycle.Container) {
				inFlight[e.Kind.String()+"/"+e.ID] = true
			}
			continue
		}
		pending = true
		ev := pendingEvent(e)
		if ev == evCreateContainer || ev == evRunPodSandbox {
			inFlight[e.Kind.String()+"/"+e.ID] = true
		}
		if ev == evCreateContainer {
			// The creation catch-up covers it: an unstamped container
			// is handed to the author's Synchronize as unprocessed.
			rec.Resolve(e.Kind, e.ID)
			continue
		}
		updates = append(updates, p.settleInDoubt(ctx, e, ev, events, pods, ctrs)...)
	}
	// The removals an earlier catch-up handed, kept in case the
	// runtime still sent their events (see lifecycle.Entry.Late): done.
	for _, e := range entries {
		if e.State == lifecycle.Removed && e.Pending == lifecycle.Unknown {
			rec.Set(e.Kind, e.ID, e.PodID, lifecycle.Removed)
			pending = true
		}
	}
	if pending {
		entries, _ = rec.Entries()
		entries = notLive(olderThan(entries, since))
	}
	listed := make(map[string]bool, len(pods)+len(ctrs))
	for _, p := range pods {
		listed[lifecycle.Pod.String()+"/"+p.GetId()] = true
	}
	for _, c := range ctrs {
		listed[lifecycle.Container.String()+"/"+c.GetId()] = true
	}
	// leftOut: in flight (or left out by an earlier catch-up), not
	// listed, not settled yet, and changed by no event since its
	// creation (one that was is known to the runtime). A listed one is
	// compared as any (started while no instance acted, its start is
	// handed).
	leftOut := map[string]bool{}
	now := time.Now()
	kept := entries[:0:0]
	for _, e := range entries {
		k := e.Kind.String() + "/" + e.ID
		if !listed[k] && justCreated(e) && p.unsettled.leaveOut(k, inFlight[k], since, now) {
			leftOut[k] = true
			continue
		}
		kept = append(kept, e)
	}
	entries = kept
	p.unsettled.forget(leftOut, now, p.requestCatchUp)
	if len(leftOut) != 0 {
		p.log.WithFields(logrus.Fields{"objects": len(leftOut), "settle": settleDelay.String()}).
			Info("lifecycle catch-up: objects created just before the gap are not listed by the runtime yet; comparing them again once settled")
	}
	changes, sets := lifecycle.Diff(entries, pods, ctrs)
	for _, c := range changes {
		if events.IsSet(c.Event) {
			// Pending around the call, as on the event path; late after
			// it: the runtime may send the event yet (it changed the
			// state, as listed, before sending it: CRI-O and the kit's
			// runtime in its mode drop a removed pod from their list
			// before they send RemovePodSandbox, and list outside the
			// lock their events take), and then the event path finds
			// it handed.
			s := rec.Begin(c.Entry.Kind, c.Entry.ID, c.Entry.PodID, stateAfter(c.Event))
			if s.Closed() {
				return updates // stopping: the next owner's catch-up hands the rest (see turn.record)
			}
			updates = append(updates, p.handChange(ctx, c)...)
			rec.EndLate(s)
			p.caughtUpChanges.Add(1)
			handed[c.Entry.Kind.String()+"/"+c.Entry.ID] = true
			continue
		}
		rec.Set(c.Entry.Kind, c.Entry.ID, c.Entry.PodID, stateAfter(c.Event))
	}
	known := make(map[string]bool, len(entries))
	for _, e := range entries {
		known[e.Kind.String()+"/"+e.ID] = true
	}
	for _, s := range sets {
		if s.Kind == lifecycle.Pod && !p.recPods && s.State != lifecycle.Removed {
			continue // the author handles no pod change: pods are not recorded
		}
		if inHand[s.Kind.String()+"/"+s.ID] {
			continue // its handler ends the change (see notLive)
		}
		if leftOut[s.Kind.String()+"/"+s.ID] {
			continue // its creation's event may not be done at the runtime (see inFlight)
		}
		if !quiet && !known[s.Kind.String()+"/"+s.ID] {
			continue // listed, not recorded: may be gone since (see quiet)
		}
		if handed[s.Kind.String()+"/"+s.ID] {
			// Set to Removed would drop the late entry, and the
			// runtime's own RemovePodSandbox or RemoveContainer, still
			// to come, would reach the author a second time. It stays,
			// late, until that event or the next catch-up.
			continue
		}
		rec.Set(s.Kind, s.ID, s.PodID, s.State)
	}
	if quiet && events.IsSet(api.Event_RUN_POD_SANDBOX) && unreadable == 0 {
		// The record now holds the listed pods and no other: the
		// list's, with no act since it was taken.
		rec.SetPodsTracked(true)
	}
	return updates
}

// settleInDoubt decides the change of entry e (event ev) that the
// instance acting on it began and did not finish (it died or froze inside
// the author's handler): in doubt. The protocol's register recorded that
// event as acted on and not finished, and the takeover declared it (log,
// count), by its key only when it took over at a later event. The
// author's InDoubt hears of it here, once: an instance the runtime called
// for this very event told it then and settled the entry (turn.record),
// so it is not pending any more. It is not handed again, or, with
// WithAtLeastOnce, handed (a pod's run never is: no catch-up hands a
// creation, and no InDoubt names it here: an instance called for it
// leaves it pending, see turn.record). ctx says plugin.CatchingUp.
func (p *Plugin) settleInDoubt(ctx context.Context, e lifecycle.Entry, ev eventKind, events api.EventMask,
	pods []*api.PodSandbox, ctrs []*api.Container) (updates []*api.ContainerUpdate) {
	act := p.cfg.atLeastOnce && ev != evRunPodSandbox && events.IsSet(nriEvents[ev])
	p.log.WithFields(logrus.Fields{"event": ev.String(), "object": e.ID, "acting": act}).
		Warn("lifecycle record: a change the instance acting on it died or froze inside (in doubt, declared by the takeover)")
	if ev != evRunPodSandbox {
		p.tellInDoubt(ctx, ev, e.ID, act)
	}
	if act {
		updates = p.handChange(ctx, lifecycle.Change{Event: nriEvents[ev], Entry: e,
			Container: findContainer(ctrs, e.ID), Pod: findPod(pods, podOf(e))})
	}
	p.rec.Resolve(e.Kind, e.ID)
	return updates
}

// catchUpInDoubt settles, in the Synchronize of an owner that took over
// from an instance that died inside a handler with no window in which no
// instance acted (so no lifecycle catch-up: see lifecycleGap), the
// changes in doubt in the record (settleInDoubt), written before the
// connection's Configure (since): without it, the author heard of such a
// change, and WithAtLeastOnce handed it, only at the next gap's
// catch-up, if one came. A creation in doubt stays pending for that
// catch-up, which compares it with the list (see catchUpLifecycle); an
// unstamped container is handed as unprocessed meanwhile.
func (p *Plugin) catchUpInDoubt(ctx context.Context, events api.EventMask, since uint64, pods []*api.PodSandbox,
	ctrs []*api.Container) (updates []*api.ContainerUpdate) {
	if p.rec == nil {
		return nil
	}
	entries, _ := p.rec.Entries()
	ctx = context.WithValue(ctx, catchingUpKey{}, true)
	for _, e := range notLive(olderThan(entries, since)) {
		if e.Pending == lifecycle.Unknown {
			continue
		}
		if ev := pendingEvent(e); ev != evCreateContainer && ev != evRunPodSandbox {
			updates = append(updates, p.settleInDoubt(ctx, e, ev, events, pods, ctrs)...)
		}
	}
	return updates
}

// handMissedPodRuns hands the author, as a RunPodSandbox, each pod run
// while no instance acted: listed, and in no entry of the record, while
// the record knows the node's pods (podsTracked). The runtime lists a pod
// once its RunPodSandbox is done; one an instance acted on was recorded
// before its handler ran. A pod removed since the runtime listed (after
// configured, the record's Seq at the connection's Configure) is listed
// and not recorded too, its entry dropped by the act on its removal (the
// demo, mode gap: its run handed, then its stop and removal by a later
// catch-up, all acted on already): such pods are known only while this
// process made every write since (lifecycle.Table.PodsRemovedSince: a
// promoted owner's old connection acts on, as under load it almost
// always does), and are left out; else no run is handed, and the catch-up
// says so. Each run handed is marked late and noted in handed. It reports
// whether the record was closed (the instance is stopping).
func (p *Plugin) handMissedPodRuns(ctx context.Context, configured uint64, pods []*api.PodSandbox, handed map[string]bool) (closed bool) {
	if !p.podsTracked() {
		return false
	}
	recorded := p.recordedPods()
	// After the record is read: a removal acted on meanwhile dropped an
	// entry read above.
	removed, onlyMine := p.rec.PodsRemovedSince(configured)
	if !onlyMine {
		// Say what cannot be told: a listed pod the record lacks was
		// run in the window, or removed since the list.
		unknown := 0
		for _, pod := range pods {
			if !recorded[pod.GetId()] {
				unknown++
			}
		}
		if unknown != 0 {
			p.log.WithField("pods", unknown).Warn("lifecycle catch-up: listed pods the record lacks, run while no instance acted or removed since the runtime listed (another instance acted since): their runs are not handed")
		}
		return false
	}
	for _, pod := range pods {
		id := pod.GetId()
		if recorded[id] || removed[id] {
			continue
		}
		s := p.rec.Begin(lifecycle.Pod, id, "", lifecycle.Running)
		if s.Closed() {
			return true
		}
		if gone, _ := p.rec.PodsRemovedSince(configured); gone[id] {
			// This process's other connection acted on its removal
			// between the check above and Begin (Begin then recorded it
			// anew): the run is not handed, and the entry goes.
			p.rec.Resolve(lifecycle.Pod, id)
			p.rec.Set(lifecycle.Pod, id, "", lifecycle.Removed)
			continue
		}
		p.handChange(ctx, lifecycle.Change{Event: api.Event_RUN_POD_SANDBOX,
			Entry: lifecycle.Entry{Kind: lifecycle.Pod, ID: id}, Pod: pod})
		p.rec.EndLate(s)
		p.caughtUpChanges.Add(1)
		handed[lifecycle.Pod.String()+"/"+id] = true
	}
	return false
}

// podsTracked reports whether the record knows every pod of the node, so
// that a listed pod it lacks was run while no instance acted: it records
// pods (p.recPods), every object found room, and an owner recorded the
// runtime's list of pods with no act since it was taken (trackPods, or a
// quiet lifecycle catch-up), no owner that records no pod acting since.
func (p *Plugin) podsTracked() bool {
	return p.recPods && p.rec.Overflows() == 0 && p.rec.PodsTracked()
}

// recordedPods returns the ids of the pods in the record, whatever their
// Seq.
func (p *Plugin) recordedPods() map[string]bool {
	entries, _ := p.rec.Entries()
	ids := make(map[string]bool, len(entries))
	for _, e := range entries {
		if e.Kind == lifecycle.Pod {
			ids[e.ID] = true
		}
	}
	return ids
}

// trackPods keeps, in an owner's Synchronize, the record's word on
// whether it knows every pod (see podsTracked). events is the
// connection's subscription: an owner not called for RunPodSandbox
// records no pod run, and clears it; the first owner on the node (no
// instance has acted yet, so none acts now, and the list is the node's
// pods) records the listed pods and sets it. A quiet lifecycle catch-up
// sets it too (catchUpLifecycle). A pod run while no instance acted
// before that is not handed as a missed run: it cannot be told from one
// that ran before any instance did.
func (p *Plugin) trackPods(events api.EventMask, pods []*api.PodSandbox) {
	switch {
	case p.rec == nil:
	case !events.IsSet(api.Event_RUN_POD_SANDBOX):
		if p.rec.PodsTracked() {
			p.rec.SetPodsTracked(false)
		}
	case !p.rec.PodsTracked() && !p.coord.ActedBefore():
		for _, pod := range pods {
			p.rec.Set(lifecycle.Pod, pod.GetId(), "", lifecycle.Running)
		}
		p.rec.SetPodsTracked(true)
	}
}

// justCreated reports whether an entry shows its object's creation as
// its last change: a container created, a pod run.
func justCreated(e lifecycle.Entry) bool {
	return e.Kind == lifecycle.Container && e.State == lifecycle.Created ||
		e.Kind == lifecycle.Pod && e.State == lifecycle.Running
}

// notLive leaves out the entries whose pending change a handler of this
// process is inside of (lifecycle.Entry.Mine): a catch-up runs while the
// instance's other connection may act (a promoted owner's old one), and
// such a change is neither in doubt nor a state to compare with the list;
// the handler ends it. The record still holds the entry, so a listed
// object it is about is not taken for one the record lacks.
func notLive(entries []lifecycle.Entry) []lifecycle.Entry {
	out := entries[:0]
	for _, e := range entries {
		if !e.Mine {
			out = append(out, e)
		}
	}
	return out
}

// live is the keys (kind/id) of the entries notLive leaves out.
func live(entries []lifecycle.Entry) map[string]bool {
	keys := map[string]bool{}
	for _, e := range entries {
		if e.Mine {
			keys[e.Kind.String()+"/"+e.ID] = true
		}
	}
	return keys
}

// olderThan keeps the entries written at or before seq.
func olderThan(entries []lifecycle.Entry, seq uint64) []lifecycle.Entry {
	out := entries[:0]
	for _, e := range entries {
		if e.Seq <= seq {
			out = append(out, e)
		}
	}
	return out
}

// handChange calls the author's handler for a missed change (ctx marked,
// see CatchingUp) and logs it.
func (p *Plugin) handChange(ctx context.Context, c lifecycle.Change) []*api.ContainerUpdate {
	e := c.Entry
	ctr := c.Container
	if ctr == nil {
		ctr = &api.Container{Id: e.ID, PodSandboxId: e.PodID, State: api.ContainerState_CONTAINER_STOPPED}
	}
	pod := c.Pod
	if pod == nil {
		pod = &api.PodSandbox{Id: podOf(e)}
	}
	ev := eventOfChange(c.Event)
	log := p.log.WithFields(logrus.Fields{"event": ev.String(), "object": e.ID, "gone": c.Container == nil && c.Pod == nil})
	var (
		updates []*api.ContainerUpdate
		err     error
	)
	switch c.Event {
	case api.Event_RUN_POD_SANDBOX:
		if h, ok := p.author.(stub.RunPodInterface); ok {
			err = h.RunPodSandbox(ctx, pod)
		}
	case api.Event_START_CONTAINER:
		if h, ok := p.author.(stub.StartContainerInterface); ok {
			err = h.StartContainer(ctx, pod, ctr)
		}
	case api.Event_STOP_CONTAINER:
		if h, ok := p.author.(stub.StopContainerInterface); ok {
			updates, err = h.StopContainer(ctx, pod, ctr)
		}
	case api.Event_REMOVE_CONTAINER:
		if h, ok := p.author.(stub.RemoveContainerInterface); ok {
			err = h.RemoveContainer(ctx, pod, ctr)
		}
	case api.Event_STOP_POD_SANDBOX:
		if h, ok := p.author.(stub.StopPodInterface); ok {
			err = h.StopPodSandbox(ctx, pod)
		}
	case api.Event_REMOVE_POD_SANDBOX:
		if h, ok := p.author.(stub.RemovePodInterface); ok {
			err = h.RemovePodSandbox(ctx, pod)
		}
	}
	if err != nil {
		log.WithError(err).Warn("caught up: the author's handler of a missed lifecycle change failed")
	} else {
		log.Warn("caught up: a lifecycle change no instance acted on (it happened while none did) handed to the author")
	}
	return updates
}

// pendingEvent is the event of an entry's pending change.
func pendingEvent(e lifecycle.Entry) eventKind {
	if e.Kind == lifecycle.Pod {
		switch e.Pending {
		case lifecycle.Running:
			return evRunPodSandbox
		case lifecycle.Stopped:
			return evStopPodSandbox
		default:
			return evRemovePodSandbox
		}
	}
	switch e.Pending {
	case lifecycle.Created:
		return evCreateContainer
	case lifecycle.Running:
		return evStartContainer
	case lifecycle.Stopped:
		return evStopContainer
	default:
		return evRemoveContainer
	}
}

// stateAfter is the record's state once a missed change is handed.
func stateAfter(e api.Event) lifecycle.State {
	switch e {
	case api.Event_START_CONTAINER:
		return lifecycle.Running
	case api.Event_STOP_CONTAINER, api.Event_STOP_POD_SANDBOX:
		return lifecycle.Stopped
	}
	return lifecycle.Removed
}

func podOf(e lifecycle.Entry) string {
	if e.Kind == lifecycle.Pod {
		return e.ID
	}
	return e.PodID
}

func findContainer(ctrs []*api.Container, id string) *api.Container {
	for _, c := range ctrs {
		if c.GetId() == id {
			return c
		}
	}
	return nil
}

func findPod(pods []*api.PodSandbox, id string) *api.PodSandbox {
	for _, p := range pods {
		if p.GetId() == id {
			return p
		}
	}
	return nil
}

// applyLate sends the updates the author returned for the missed stops a
// catch-up handed, through UpdateContainers once this connection's
// Synchronize has returned (from inside it the call would deadlock).
func (a *adapter) applyLate(updates []*api.ContainerUpdate) {
	select {
	case <-a.synced:
	case <-a.lost:
		return
	}
	if failed, err := a.p.UpdateContainers(updates); err != nil {
		a.p.log.WithError(err).WithField("updates", len(updates)).Warn("caught up: cannot apply the updates the author returned for missed stops")
	} else if len(failed) != 0 {
		a.p.log.WithField("failed", len(failed)).Warn("caught up: the runtime refused some updates the author returned for missed stops")
	}
}
