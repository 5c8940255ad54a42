package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"

	"github.com/nri-handover/nri-handover/internal/lifecycle"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/stamp"
)

// eventsOf returns the events the author's plugin has handlers for.
func eventsOf(p interface{}) api.EventMask {
	var m api.EventMask
	set := func(ok bool, e api.Event) {
		if ok {
			m.Set(e)
		}
	}
	_, ok := p.(stub.RunPodInterface)
	set(ok, api.Event_RUN_POD_SANDBOX)
	_, ok = p.(stub.UpdatePodInterface)
	set(ok, api.Event_UPDATE_POD_SANDBOX)
	_, ok = p.(stub.PostUpdatePodInterface)
	set(ok, api.Event_POST_UPDATE_POD_SANDBOX)
	_, ok = p.(stub.StopPodInterface)
	set(ok, api.Event_STOP_POD_SANDBOX)
	_, ok = p.(stub.RemovePodInterface)
	set(ok, api.Event_REMOVE_POD_SANDBOX)
	_, ok = p.(stub.CreateContainerInterface)
	set(ok, api.Event_CREATE_CONTAINER)
	_, ok = p.(stub.PostCreateContainerInterface)
	set(ok, api.Event_POST_CREATE_CONTAINER)
	_, ok = p.(stub.StartContainerInterface)
	set(ok, api.Event_START_CONTAINER)
	_, ok = p.(stub.PostStartContainerInterface)
	set(ok, api.Event_POST_START_CONTAINER)
	_, ok = p.(stub.UpdateContainerInterface)
	set(ok, api.Event_UPDATE_CONTAINER)
	_, ok = p.(stub.PostUpdateContainerInterface)
	set(ok, api.Event_POST_UPDATE_CONTAINER)
	_, ok = p.(stub.StopContainerInterface)
	set(ok, api.Event_STOP_CONTAINER)
	_, ok = p.(stub.RemoveContainerInterface)
	set(ok, api.Event_REMOVE_CONTAINER)
	_, ok = p.(stub.ValidateContainerAdjustmentInterface)
	set(ok, api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	return m
}

// adapter is the plugin the NRI stub sees, one per runtime connection. It
// implements every handler interface and gates each event on this
// instance's role before handing it to the author. Its Configure subscribes
// only to the events the author handles, plus CreateContainer for stamping.
type adapter struct {
	p          *Plugin
	stub       stub.Stub     // the stub of this connection, set before it starts
	synced     chan struct{} // closed when Synchronize has returned
	syncedOnce sync.Once
	closed     atomic.Bool // set before the connection is closed by this instance
	// replaces is the connection this one takes over from: it is closed
	// from inside this one's Synchronize (see replace). quiet: this
	// connection only does that, subscribed to quietEvent, acting on
	// nothing.
	replaces *conn
	quiet    bool
	// also, of a quiet connection, is a second connection it closes
	// (see stopQuietly).
	also *conn
	// tag is this connection's in the per-event cut (0 for a quiet one);
	// lost is closed when the connection is lost. retiring is the
	// connection this one replaced: it is closed from inside this
	// connection's first event once it does not own the cut (see begin).
	tag      uint16
	lost     <-chan struct{}
	retiring atomic.Pointer[conn]
	// self is the connection; answerFrames, of a quiet one, is how many
	// frames its stub had written on the plugin service's stream when its
	// Synchronize returned (the answer is the next one; closeAfterAnswer).
	self         *conn
	answerFrames atomic.Uint64
	// lastKey is the key of the event the runtime called this connection
	// for last: a connection that replaces this one closes it inside an
	// event only once this one has had that event (closeRetiring).
	lastKey atomic.Uint32
	// lateOlder collects, until this connection acts, the containers of
	// older versions its predecessor creates meanwhile (for Reconcile).
	lateOlder atomic.Pointer[lateOlder]
	// events is the subscription its Configure returned (written there,
	// read in its Synchronize, which the stub calls after it).
	events atomic.Uint64
	// recSeq is the lifecycle record's Seq when Configure returned.
	recSeq atomic.Uint64
}

// lateOlder is a list of containers, guarded.
type lateOlder struct {
	mu   sync.Mutex
	list []*StampedContainer
}

// awaitActing waits until this connection's Synchronize has returned and
// it acts (owns the cut); false if it is lost or the plugin stops first.
func (a *adapter) awaitActing() bool {
	select {
	case <-a.synced:
	case <-a.lost:
		return false
	}
	var stopped <-chan struct{} // nil (never) without a run
	if a.p.runCtx != nil {
		stopped = a.p.runCtx.Done()
	}
	for {
		ch := a.p.coord.Changed()
		if a.p.coord.OwnsCut(a.tag) {
			return true
		}
		select {
		case <-ch:
		case <-a.lost:
			return false
		case <-stopped:
			return false
		}
	}
}

var (
	_ stub.ConfigureInterface           = (*adapter)(nil)
	_ stub.SynchronizeInterface         = (*adapter)(nil)
	_ stub.CreateContainerInterface     = (*adapter)(nil)
	_ stub.UpdateContainerInterface     = (*adapter)(nil)
	_ stub.StopContainerInterface       = (*adapter)(nil)
	_ stub.RunPodInterface              = (*adapter)(nil)
	_ stub.PostUpdatePodInterface       = (*adapter)(nil)
	_ stub.UpdatePodInterface           = (*adapter)(nil)
	_ stub.StopPodInterface             = (*adapter)(nil)
	_ stub.RemovePodInterface           = (*adapter)(nil)
	_ stub.StartContainerInterface      = (*adapter)(nil)
	_ stub.PostCreateContainerInterface = (*adapter)(nil)
	_ stub.PostStartContainerInterface  = (*adapter)(nil)
	_ stub.PostUpdateContainerInterface = (*adapter)(nil)
	_ stub.RemoveContainerInterface     = (*adapter)(nil)
	_ stub.ShutdownInterface            = (*adapter)(nil)

	_ stub.ValidateContainerAdjustmentInterface = (*adapter)(nil)
)

// Configure subscribes to the author's events (narrowed by the author's own
// Configure, if any) and always to CreateContainer, which stamps.
func (a *adapter) Configure(ctx context.Context, config, runtime, version string) (api.EventMask, error) {
	if a.quiet {
		var m api.EventMask
		m.Set(quietEvent)
		return m, nil
	}
	// The stub has taken the timeouts and NRI version from this request
	// before calling here, on this goroutine: read them now.
	a.p.stubMu.Lock()
	a.p.runtime = runtimeInfo{
		name: runtime, version: version, nriVersion: a.stub.RuntimeNRIVersion(),
		registrationTimeout: a.stub.RegistrationTimeout(), requestTimeout: a.stub.RequestTimeout(),
	}
	if a.p.stub == a.stub {
		a.p.configured = true
	}
	a.p.stubMu.Unlock()
	events := a.p.handles
	if h, ok := a.p.author.(stub.ConfigureInterface); ok {
		m, err := h.Configure(ctx, config, runtime, version)
		if err != nil {
			return 0, err
		}
		if m != 0 {
			events = m & a.p.handles
		}
	}
	events.Set(api.Event_CREATE_CONTAINER)
	a.p.coord.ConnEvents(a.tag, kindBits(events))
	a.events.Store(uint64(events))
	a.recSeq.Store(a.p.rec.Seq()) // the runtime lists after this (see catchUpLifecycle)
	return events, nil
}

// kindBits converts an NRI event mask to the cut's bits (1<<event).
func kindBits(m api.EventMask) uint64 {
	var bits uint64
	for e := api.Event_RUN_POD_SANDBOX; e < api.Event_LAST; e++ {
		if m.IsSet(e) {
			bits |= 1 << uint(e)
		}
	}
	return bits
}

// nriEvents are the NRI events of the harness's event kinds.
var nriEvents = [...]api.Event{
	evRunPodSandbox:               api.Event_RUN_POD_SANDBOX,
	evUpdatePodSandbox:            api.Event_UPDATE_POD_SANDBOX,
	evPostUpdatePodSandbox:        api.Event_POST_UPDATE_POD_SANDBOX,
	evStopPodSandbox:              api.Event_STOP_POD_SANDBOX,
	evRemovePodSandbox:            api.Event_REMOVE_POD_SANDBOX,
	evCreateContainer:             api.Event_CREATE_CONTAINER,
	evPostCreateContainer:         api.Event_POST_CREATE_CONTAINER,
	evStartContainer:              api.Event_START_CONTAINER,
	evPostStartContainer:          api.Event_POST_START_CONTAINER,
	evUpdateContainer:             api.Event_UPDATE_CONTAINER,
	evPostUpdateContainer:         api.Event_POST_UPDATE_CONTAINER,
	evStopContainer:               api.Event_STOP_CONTAINER,
	evRemoveContainer:             api.Event_REMOVE_CONTAINER,
	evValidateContainerAdjustment: api.Event_VALIDATE_CONTAINER_ADJUSTMENT,
}

// Synchronize is where ownership moves: the runtime runs no event while a
// plugin synchronizes, so the claim made here falls exactly between two
// events for every instance. Only the owner's author sees Synchronize, with
// the containers no instance of this plugin has stamped, and ownership
// passes for good only once it has succeeded: an author Synchronize that
// fails or overruns gives ownership back to the previous owner before the
// runtime sees the error (protocol.Coordinator.ClaimThen).
func (a *adapter) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p := a.p
	defer a.syncedOnce.Do(func() { close(a.synced) })
	if a.quiet {
		p.closeQuietly(a.replaces) // no event is in flight: the runtime is synchronizing us
		if a.also != nil {
			p.closeQuietly(a.also)
		}
		if sock := a.self.socket.Load(); sock != nil {
			a.answerFrames.Store(sock.pluginFrames())
		}
		return nil, nil
	}
	wasOwner := p.coord.Status().Role == hapi.Role_ROLE_OWNER
	syncer, hasSync := p.author.(stub.SynchronizeInterface)
	r, hasReconcile := p.author.(ReconcileInterface)
	reconcile := hasReconcile && !wasOwner
	var (
		updates []*api.ContainerUpdate
		older   []*StampedContainer
		handed  []string // unstamped containers handed to the author
		// took: the missed creations taken to hand (takeMissed), before
		// the claim so that ready only reads it.
		took []*api.Container
		// handMu guards tookHanded (the author's Synchronize returned
		// with them) and abandoned (the claim returned: ready, which may
		// still run after the claim gave up on it, hands nothing more).
		handMu     sync.Mutex
		tookHanded bool
		abandoned  bool
		// lifeUpdates: what the author's StopContainer returned for the
		// missed stops handed (catchUpLifecycle), for UpdateContainers.
		lifeUpdates []*api.ContainerUpdate
	)
	if hasSync {
		took = p.takeMissed()
	}
	// ready runs once this instance has claimed ownership. Every stamp is
	// verified (a bad one is counted and logged); the lists are built only
	// for the hooks the author has: with 10,000 containers they are what
	// the harness holds on to while it synchronizes.
	ready := func(ctx context.Context) error {
		synced, err := p.dir.SyncedUnstamped()
		if err != nil {
			// Worst case the author sees some containers again.
			p.log.WithError(err).Warn("cannot tell which unstamped containers were synchronized before")
		}
		var fresh []*api.Container
		for _, c := range ctrs {
			by, wasSynced := synced[c.GetId()]
			if !reconcile {
				if hasSync && !wasSynced && p.check(c) != nil {
					fresh = append(fresh, c)
				}
				continue
			}
			st, err := p.verify(c)
			switch {
			case err != nil && wasSynced:
				// Synchronized by an earlier owner: its record is the stamp.
				if v, verr := stamp.ParseVersion(by.Version); verr == nil && v.LessThan(p.version) {
					older = append(older, &StampedContainer{Container: c, Stamp: stamp.Stamp{
						Plugin: p.cfg.name, ContainerID: c.GetId(), Version: v, Instance: by.Instance}})
				}
			case err != nil:
				if hasSync {
					fresh = append(fresh, c)
				}
			case st.Older(p.version):
				older = append(older, &StampedContainer{Container: c, Stamp: st})
			}
		}
		handMu.Lock()
		gaveUp := abandoned
		handMu.Unlock()
		if gaveUp {
			return errors.New("the claim gave up before the catch-up")
		}
		var life []*api.ContainerUpdate
		doubts := p.coord.InDoubt() // before the catch-up: a declaration after it is settled by the next
		if gap, upTo := p.lifecycleGap(); gap {
			p.doubtsSettled.Store(doubts) // the catch-up settles the changes in doubt too
			life = p.catchUpLifecycle(ctx, api.EventMask(a.events.Load()), a.recSeq.Load(), upTo, pods, ctrs)
		} else if p.doubtsSettled.Swap(doubts) < doubts {
			// No window without an instance acting since the last
			// catch-up: no change to compare with the list (one taken
			// just before this Synchronize may lag the record: a
			// container created but not listed yet, cri-o issue
			// 10090), but a takeover declared an event in doubt.
			life = p.catchUpInDoubt(ctx, api.EventMask(a.events.Load()), a.recSeq.Load(), pods, ctrs)
		}
		p.trackPods(api.EventMask(a.events.Load()), pods)
		if len(life) != 0 {
			handMu.Lock()
			lifeUpdates = life // read once the claim returned, if it had not yet
			handMu.Unlock()
		}
		if !hasSync {
			return nil
		}
		if len(took) != 0 {
			// Containers whose creation nobody processed, seen by a
			// later event: handed now, unless listed (then handed
			// above if still unprocessed) or synchronized meanwhile.
			listed := make(map[string]bool, len(ctrs))
			for _, c := range ctrs {
				listed[c.GetId()] = true
			}
			for _, c := range took {
				if _, wasSynced := synced[c.GetId()]; !listed[c.GetId()] && !wasSynced {
					fresh = append(fresh, c)
				}
			}
		}
		// viaNote: the containers handed from a note (this instance's
		// missed creations, and those of instances that are gone): only
		// if this catch-up takes the note (takeNotes).
		viaNote := map[string]bool{}
		for _, c := range took {
			viaNote[c.GetId()] = true
		}
		if p.coord.ActedBefore() {
			// Noted by an instance that died before its catch-up: handed
			// by this one unless listed (then handed above) or synchronized.
			mine := make(map[string]bool, len(took)+len(ctrs))
			for _, c := range took {
				mine[c.GetId()] = true
			}
			for _, c := range ctrs {
				mine[c.GetId()] = true
			}
			for _, c := range p.goneInstancesMissed(ctx, mine, synced) {
				viaNote[c.GetId()] = true
				fresh = append(fresh, c)
			}
		}
		handMu.Lock()
		late := abandoned
		handMu.Unlock()
		if late {
			return errors.New("the claim gave up before the author's Synchronize")
		}
		var notesTaken []string
		fresh, notesTaken = p.takeNotes(fresh, viaNote)
		u, err := syncer.Synchronize(ctx, pods, fresh)
		if err != nil {
			p.returnNotes(notesTaken)
			return fmt.Errorf("author Synchronize: %w", err)
		}
		if p.coord.ActedBefore() {
			// An instance of this plugin acted on this node before: these
			// were created while none did (a catch-up). Counted once the
			// author has them: a claim given up before, or a Synchronize
			// that failed, handed nothing.
			p.caughtUp.Add(uint64(len(fresh)))
		}
		handMu.Lock()
		tookHanded = true
		handMu.Unlock()
		updates = u
		handed = handed[:0]
		for _, c := range fresh {
			handed = append(handed, c.GetId())
		}
		return nil
	}
	// Settled as owner: the runtime applies the updates. Recorded before
	// this instance can yield (ClaimConn's settled), these containers are
	// not handed to a later owner's author again, that owner's included.
	settled := func() {
		if hasSync {
			p.recordHanded(handed, ctrs)
		}
	}
	role, err := p.coord.ClaimConn(ctx, a.tag, ready, settled)
	if err != nil {
		p.log.WithError(err).Warn("claim failed; this instance does not act")
	}
	if hasSync && (err != nil || role != hapi.Role_ROLE_OWNER) {
		p.noteListedUnhanded(ctrs)
	}
	handMu.Lock()
	abandoned = true
	handedTook := tookHanded
	lateUpdates := lifeUpdates
	handMu.Unlock()
	if len(took) != 0 && !handedTook {
		// For this instance's next Synchronize as owner. An author
		// Synchronize still running after the claim gave up on it may
		// have them too: handed again rather than lost.
		p.restoreMissed(took)
	}
	if errors.Is(err, protocol.ErrNotReady) {
		// The runtime drops an instance whose Synchronize fails, as it
		// would a bare stub plugin; the harness reconnects later (and a
		// connection this one was to replace stays in use).
		return nil, err
	}
	if old := a.replaces; old != nil {
		// It stays in the runtime's chain until this connection is seen
		// there: closed from inside this connection's first event once it
		// does not own the register (closeRetiring). Closed here, a
		// connection that owns nothing left a window on CRI-O (no
		// plugin-sync block around the append) between this Synchronize's
		// return and this connection's append in which no connection of
		// this instance was in the chain: if the owner died or was dropped
		// then, the events reached nobody, where the old one would have
		// taken over (the demo, cri-o, -faults 10: 120-628 events in a
		// declared gap in about 1 run in 30).
		if older := old.adapter.retiring.Load(); older != nil && !p.coord.OwnsCut(older.adapter.tag) &&
			old.adapter.retiring.CompareAndSwap(older, nil) {
			// The one old replaced, still open: old stays, so this
			// one may go now (no event is in flight: the runtime is
			// synchronizing us).
			p.closeQuietly(older)
		}
		a.retiring.Store(old)
	}
	if len(lateUpdates) != 0 {
		// Outside the request: UpdateContainers from inside it would
		// deadlock.
		go a.applyLate(lateUpdates)
	}
	if role != hapi.Role_ROLE_OWNER {
		return nil, nil
	}
	if !p.coord.OwnsCut(a.tag) {
		go a.promoteWhenIdle()
	}
	if reconcile {
		a.lateOlder.Store(&lateOlder{})
		go func() {
			// Outside the request (Reconcile may update containers), and
			// once this connection acts: until then the previous owner
			// acts, and the containers it creates meanwhile are
			// reconciled too.
			if !a.awaitActing() {
				return
			}
			late := a.lateOlder.Swap(nil)
			late.mu.Lock()
			older = append(older, late.list...)
			late.mu.Unlock()
			if err := r.Reconcile(p.runCtx, p, older); err != nil { // ends when the plugin stops
				p.log.WithError(err).Warn("reconcile failed")
			}
		}()
	}
	return updates, nil
}

// noteMissedCreation is called for a later event (not CreateContainer or
// RemoveContainer) of container c that this connection acts on. A
// container without this plugin's stamp that no owner's author was handed
// (it is not in the synced-unstamped record) was created while no
// instance acted and was listed to none: created while the new owner
// synchronized, between the runtime's listing and the append (containerd
// issue 13698, cri-o issue 10090), it reached nobody. It is a missed
// creation: the next catch-up hands it to the author as unprocessed, once
// (see Synchronize). A stamped container costs one map lookup here.
//
// RemoveContainer has its own check (noteRemoval), which also marks the
// container removed in the record.
func (a *adapter) noteMissedCreation(event eventKind, c *api.Container) {
	p := a.p
	if _, stamped := c.GetAnnotations()[p.stampKey]; stamped {
		return
	}
	if _, ok := p.author.(stub.SynchronizeInterface); !ok {
		return // nothing to hand it to
	}
	id := c.GetId()
	p.missedMu.Lock()
	defer p.missedMu.Unlock()
	if _, known := p.missed[id]; known {
		return
	}
	synced, err := p.dir.SyncedUnstamped()
	if err != nil {
		p.log.WithError(err).WithField("container", id).Warn("cannot tell whether an unstamped container was synchronized before; not handing it")
		return
	}
	if _, ok := synced[id]; ok {
		p.missed[id] = nil
		return
	}
	p.missed[id] = c
	p.log.WithFields(logrus.Fields{"container": id, "event": event.String()}).
		Warn("a container no instance processed at its creation (created while no instance was in the runtime's chain, listed to none): handing it to the author as unprocessed")
	p.noteMissedDurably(c)
	p.requestCatchUp()
}

// noteRemoval is called for a RemoveContainer this connection acts on. A
// container without a stamp that was handed (in the synced-unstamped
// record, or known here) is marked removed in the record and dropped from
// what this instance knows: it is gone. One that was never handed is a missed
// creation whose other events reached nobody (created and stopped while
// no instance was in the chain, removed after an owner appended): it is
// handed as noteMissedCreation does (and stays recorded).
func (a *adapter) noteRemoval(c *api.Container) {
	p := a.p
	if _, stamped := c.GetAnnotations()[p.stampKey]; stamped {
		return
	}
	if _, ok := p.author.(stub.SynchronizeInterface); !ok {
		return
	}
	id := c.GetId()
	p.missedMu.Lock()
	defer p.missedMu.Unlock()
	if v, known := p.missed[id]; known && v != nil {
		return // still to be handed
	}
	synced, err := p.dir.SyncedUnstamped()
	if err != nil {
		p.log.WithError(err).WithField("container", id).Warn("cannot tell whether a removed unstamped container was synchronized before")
		return
	}
	_, known := p.missed[id]
	if by, wasSynced := synced[id]; wasSynced || known {
		delete(p.missed, id)
		if wasSynced && by.Removed.IsZero() {
			// Marked, not dropped: a Synchronize listed before this
			// removal must still find it handed (see
			// protocol.Dir.MarkSyncedRemoved).
			if err := p.dir.MarkSyncedRemoved(id, time.Now()); err != nil {
				p.log.WithError(err).WithField("container", id).Warn("cannot mark a removed container in the synchronized record")
			}
		}
		return
	}
	p.missed[id] = c
	p.log.WithFields(logrus.Fields{"container": id, "event": evRemoveContainer.String()}).
		Warn("a container no instance processed at its creation (created while no instance was in the runtime's chain, listed to none): handing it to the author as unprocessed")
	p.noteMissedDurably(c)
	p.requestCatchUp()
}

// noteMissedDurably keeps the note of a missed creation in the handover
// directory as well (see protocol.Dir.NoteMissed): killed before its
// catch-up, this instance leaves it to the next owner's catch-up, even if
// the container is gone from the runtime's list by then.
func (p *Plugin) noteMissedDurably(c *api.Container) {
	b, err := proto.Marshal(c)
	if err == nil {
		err = p.dir.NoteMissed(c.GetId(), p.self.Id, b)
	}
	if err != nil {
		p.log.WithError(err).WithField("container", c.GetId()).
			Warn("cannot keep the note of a missed creation; if this instance dies before its catch-up, the container is not handed")
	}
}

// takeNotes takes the notes of the containers a catch-up is about to hand
// (protocol.Dir.TakeMissed), so that two instances that both noted a
// container do not both hand it (one saw a later event of it as owner,
// then yielded and handed what it had noted; its successor saw the next
// one: the demo, mode gap, "handed to a catch-up more than once"). It
// returns the containers to hand, and the notes it took: a container
// whose note another instance took is left to it; one without a note is
// handed unless a catch-up has recorded it synchronized by then.
func (p *Plugin) takeNotes(fresh []*api.Container, viaNote map[string]bool) (hand []*api.Container, taken []string) {
	var unnoted []*api.Container
	// One read of the notes instead of a rename per container: a first
	// owner's Synchronize may hand thousands of listed ones, with no note.
	names, err := p.dir.MissedNames()
	if err != nil {
		p.log.WithError(err).Warn("cannot list the notes of missed creations; trying each")
	}
	// Read after the notes: an instance that hands a noted container
	// records it before it drops the note, so one whose note is gone by
	// now is in this record if it was handed meanwhile. The caller's
	// earlier read can miss it, and the container went to two authors
	// (the demo, mode cri-o, -faults 10 -seed 93: 0.8 ms apart).
	handedMeanwhile, err := p.dir.SyncedUnstamped()
	if err != nil {
		p.log.WithError(err).Warn("cannot tell which unstamped containers were synchronized before")
	}
	for _, c := range fresh {
		id := c.GetId()
		if names != nil && !names[id] && !viaNote[id] {
			if _, was := handedMeanwhile[id]; !was {
				hand = append(hand, c) // listed, and no note to take
			}
			continue
		}
		if beforeTakeNote != nil {
			beforeTakeNote(id)
		}
		ok, busy, err := p.dir.TakeMissed(id)
		switch {
		case err != nil:
			p.log.WithError(err).WithField("container", id).Warn("cannot take the note of a missed creation; handing it")
			hand = append(hand, c)
		case ok:
			taken = append(taken, id)
			hand = append(hand, c)
		case busy:
			p.log.WithField("container", id).Info("another instance is handing this missed creation; leaving it to it")
		default:
			// No note any more: the one read above (or this
			// instance's own) was taken and dropped by an instance
			// that handed the container, which recorded it first.
			// Handed unless the record read below has it (the demo,
			// mode exit-stop, -faults 10 -seed 1002: a listed
			// container whose note another instance took and dropped
			// between the two reads went to two authors, 1 ms apart).
			unnoted = append(unnoted, c)
		}
	}
	if len(unnoted) == 0 {
		return hand, taken
	}
	synced, err := p.dir.SyncedUnstamped()
	if err != nil {
		p.log.WithError(err).Warn("cannot tell which unstamped containers were synchronized before")
	}
	for _, c := range unnoted {
		if _, was := synced[c.GetId()]; !was {
			hand = append(hand, c)
		}
	}
	return hand, taken
}

// beforeTakeNote, if set, is called by takeNotes before it tries to take
// the note of container id: the package's tests act as another instance
// there.
var beforeTakeNote func(id string)

// returnNotes puts back the notes takeNotes took, for a hand that failed.
func (p *Plugin) returnNotes(ids []string) {
	for _, id := range ids {
		if err := p.dir.ReturnMissed(id); err != nil {
			p.log.WithError(err).WithField("container", id).Warn("cannot return the note of a missed creation")
		}
	}
}

// listedNoter names, in a note of a missed creation, a Synchronize that
// listed the container and did not hand it (see noteListedUnhanded):
// any owner's catch-up hands it. No instance id has a colon
// (stamp.ValidateInstance).
const listedNoter = "listed:synchronize"

// noteListedUnhanded notes the containers a Synchronize listed that no
// instance processed (no valid stamp, not in the synced-unstamped record)
// when this Synchronize does not hand them: its claim failed, or another
// instance owns. Created while no instance acted and ended before the next
// owner's Synchronize could list them, they were known to this one alone
// and never handed (the demo, mode gap, -faults 10: "listed by a runtime
// Synchronize, never handed to an author"). A container noted already
// keeps its note.
func (p *Plugin) noteListedUnhanded(ctrs []*api.Container) {
	if !p.coord.ActedBefore() {
		return // before any instance acted: the first owner's Synchronize hands them
	}
	var fresh []*api.Container
	for _, c := range ctrs {
		if p.check(c) != nil {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) == 0 {
		return
	}
	synced, err := p.dir.SyncedUnstamped()
	if err != nil {
		p.log.WithError(err).Warn("cannot tell which listed containers were synchronized; not noting them")
		return
	}
	noted, err := p.dir.NotedMissed()
	if err != nil {
		p.log.WithError(err).Warn("cannot read the noted missed creations; not noting the listed ones")
		return
	}
	for _, c := range fresh {
		id := c.GetId()
		if _, ok := synced[id]; ok {
			continue
		}
		if _, ok := noted[id]; ok {
			continue
		}
		b, err := proto.Marshal(c)
		if err == nil {
			err = p.dir.NoteMissed(id, listedNoter, b)
		}
		if err != nil {
			p.log.WithError(err).WithField("container", id).Warn("cannot note a listed container no instance processed")
		}
	}
}

// goneInstancesMissed returns the missed creations noted by instances
// that are gone (see noteMissedDurably), except those in mine (listed, or
// this instance's own): a catch-up hands them. The notes of containers in
// synced (handed meanwhile) are dropped.
func (p *Plugin) goneInstancesMissed(ctx context.Context, mine map[string]bool, synced map[string]protocol.SyncedBy) []*api.Container {
	notes, err := p.dir.NotedMissed()
	if err != nil {
		p.log.WithError(err).Warn("cannot read the missed creations other instances noted")
		return nil
	}
	var (
		out    []*api.Container
		stale  []string
		goneBy = map[string]bool{}
	)
	for id, n := range notes {
		if _, ok := synced[id]; ok {
			stale = append(stale, id)
			continue
		}
		if n.Instance == p.self.Id || mine[id] {
			continue
		}
		gone, asked := goneBy[n.Instance]
		if n.Instance == listedNoter {
			gone, asked = true, true
		}
		if !asked {
			gone = p.dir.InstanceGone(ctx, n.Instance)
			goneBy[n.Instance] = gone
		}
		if !gone {
			continue // it hands them itself
		}
		c := &api.Container{}
		if err := proto.Unmarshal(n.Container, c); err != nil || c.GetId() != id {
			p.log.WithError(err).WithField("container", id).Warn("a note of a missed creation cannot be read; not handing it")
			continue
		}
		p.log.WithFields(logrus.Fields{"container": id, "noted_by": n.Instance}).
			Warn("a missed creation noted by an instance that is gone before its catch-up: handing it to the author as unprocessed")
		out = append(out, c)
	}
	if err := p.dir.DropMissed(stale); err != nil {
		p.log.WithError(err).Warn("cannot drop the notes of missed creations handed before")
	}
	return out
}

// takeMissed returns the missed creations still to be handed and marks
// them handed.
func (p *Plugin) takeMissed() []*api.Container {
	p.missedMu.Lock()
	defer p.missedMu.Unlock()
	var took []*api.Container
	for id, c := range p.missed {
		if c != nil {
			took = append(took, c)
			p.missed[id] = nil
		}
	}
	return took
}

// restoreMissed puts missed creations taken by takeMissed back, when the
// author's Synchronize did not get them.
func (p *Plugin) restoreMissed(took []*api.Container) {
	p.missedMu.Lock()
	for _, c := range took {
		p.missed[c.GetId()] = c
	}
	p.missedMu.Unlock()
}

// sign returns the stamp of a container this instance creates.
func (p *Plugin) sign(id string) (string, error) {
	if p.stamper == nil {
		// The version or instance id cannot be stamped: Sign says why.
		return p.signer.Sign(id, p.version, p.self.Id)
	}
	return p.stamper.Sign(id)
}

// verify returns a container's stamp of this plugin. A forged or malformed
// stamp is logged, counted and reported as an error, i.e. treated as absent.
func (p *Plugin) verify(c *api.Container) (stamp.Stamp, error) {
	st, err := p.signer.Verify(c.GetId(), c.GetAnnotations())
	p.noteInvalid(c, err)
	return st, err
}

// check is verify without the stamp (see stamp.Signer.Check).
func (p *Plugin) check(c *api.Container) error {
	err := p.signer.Check(c.GetId(), c.GetAnnotations())
	p.noteInvalid(c, err)
	return err
}

// noteInvalid logs and counts a stamp that did not verify.
func (p *Plugin) noteInvalid(c *api.Container, err error) {
	if err != nil && !errors.Is(err, stamp.ErrNoStamp) {
		p.badStamps.Add(1)
		p.obs.BadStamp()
		p.log.WithError(err).WithField("container", c.GetId()).Warn("ignoring invalid stamp")
	}
}

// turn is one event at one connection, from begin to end.
type turn struct {
	a   *adapter
	key uint32
	act bool
	// inDoubt: the cut declared the event in doubt (see turn.record).
	inDoubt bool
}

// begin enters the event section and decides, through the per-event cut,
// whether this connection acts on the event; the caller must call end.
//
// A connection that was closed never acts: the NRI stub may still run a
// handler for a request the runtime has already given up on (the runtime
// went on to the next plugin when the connection closed).
func (a *adapter) begin(ctx context.Context, call recentCall) turn {
	p := a.p
	event, id := call.event, call.id
	role := p.coord.Enter()
	t := turn{a: a, key: protocol.EventKey(uint32(event), id)}
	a.lastKey.Store(t.key)
	call.key = t.key
	p.recent.add(call)
	stale := ctx.Err() != nil && !a.closed.Load() && a.tag != 0
	if stale {
		// The runtime gave up on this request before its handler could
		// start (the instance was stopped or stuck for longer than the
		// request timeout): it went on without this plugin, so acting now
		// would change nothing and would record an act after the events
		// that reached nobody meanwhile. The runtime drops the connection
		// for it; whoever takes the register next declares the event (in
		// doubt, or in the gap since the act before).
		p.gaveUp(event, id)
	} else if !a.closed.Load() && a.tag != 0 {
		if old := a.retiring.Load(); old != nil && old.adapter.runtimeClosed() {
			// The connection this one replaces was dropped by the runtime
			// (a request to it timed out: the instance was frozen) before
			// this one was appended, while it still owned the register:
			// the events in between reached no connection of this
			// instance, and none of another took them (the register was
			// not taken). Reported lost now, not when its close is read,
			// so that this connection's takeover below declares the gap
			// since the last act (Coordinator.Decide: a takeover from a
			// dead owner). The demo, mode gap, -faults 10: 21 events
			// unsaid between a frozen owner's drop and its catch-up
			// connection's append.
			p.coord.DropConn(old.adapter.tag)
		}
		dec := p.coord.Decide(a.tag, t.key, 1<<uint(nriEvents[event]), a.runtimeClosed)
		t.act = dec.Act || dec.InDoubt && p.cfg.atLeastOnce
		t.inDoubt = dec.InDoubt
		a.closeRetiring(t.key)
		if dec.InDoubt {
			p.inDoubt(event, id, t.act, "another connection may have acted on it (it died inside its handler, the runtime gave up on it, or it left after an event with this key)")
		}
	}
	switch {
	case t.act:
		p.acted.Add(1)
		p.obs.Event(event, resultActed)
		if p.owed.pending() {
			a.handOwed(ctx) // events this instance owes (in doubt, WithAtLeastOnce; or unacted), before this one
		}
	case !stale: // (a stale request is no call of the runtime's any more: logged above)
		p.skip(event, id, role)
	}
	return t
}

// gaveUp logs a request the runtime gave up on before its handler started
// (see begin). Apart from begin, whose common path stays short.
func (p *Plugin) gaveUp(event eventKind, id string) {
	p.log.WithFields(logrus.Fields{"event": event.String(), "object": id}).
		Warn("the runtime gave up on this request before its handler started; not acting on it")
}

// runtimeClosed reports whether the runtime has closed this connection's
// socket, also before the stub has read to its end (a handler may run
// late, for a request read after the process was resumed). Asked by the
// cut only before a takeover; false when the socket is unknown (an
// author's dialer) or cannot be asked.
func (a *adapter) runtimeClosed() bool {
	if a.closed.Load() {
		return true
	}
	if sock := a.self.socket.Load(); sock != nil {
		return sock.peerGone()
	}
	return false
}

// inDoubt tells the author of an event in doubt (see InDoubtInterface).
func (p *Plugin) inDoubt(event eventKind, id string, acting bool, why string) {
	p.log.WithFields(logrus.Fields{"event": event.String(), "object": id, "acting": acting}).
		Warn("event in doubt: " + why)
	p.tellInDoubt(context.Background(), event, id, acting)
}

// tellInDoubt passes an event in doubt to the author's InDoubt, if it has
// one, within a quarter of the runtime's request timeout: it runs inside
// a runtime request (an event, or the Synchronize of a catch-up).
func (p *Plugin) tellInDoubt(ctx context.Context, event eventKind, id string, acting bool) {
	h, ok := p.author.(InDoubtInterface)
	if !ok {
		return
	}
	rt := p.RequestTimeout()
	if rt <= 0 {
		rt = api.DefaultPluginRequestTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, rt/4)
	defer cancel()
	h.InDoubt(ctx, event.String(), id, acting)
}

// end records that the event's handler returned and leaves the event
// section.
func (t turn) end() {
	if t.act && !t.a.p.crashed() { // (a killed process records nothing: the kit's crash neither)
		t.a.p.coord.Finish(t.a.tag, t.key)
	}
	t.a.p.coord.Exit()
}

// closeRetiring closes the connection this one replaced once it no longer
// owns the cut, inside this connection's event key: only if the runtime
// has called the old connection for that event already (it is earlier in
// the chain, as an older connection of the same index is), so that no
// request to it is in flight or still to come in this event. The runtime
// marks it closed before this event ends (closeQuietly) and drops it from
// its chain at the end of the event.
//
// The connection old replaced in turn, if still open (it owned the cut
// when old was synchronized), is this one's to close from then on.
func (a *adapter) closeRetiring(key uint32) {
	old := a.retiring.Load()
	if old == nil || a.p.coord.OwnsCut(old.adapter.tag) || old.adapter.lastKey.Load() != key ||
		!a.retiring.CompareAndSwap(old, nil) {
		return
	}
	if older := old.adapter.retiring.Swap(nil); older != nil {
		a.retiring.Store(older)
	}
	a.p.closeQuietly(old)
	a.closeRetiring(key)
}

// recordHanded records the unstamped containers an author's Synchronize
// was handed (handed; ctrs is the runtime's list), so that no later owner
// hands them again, and drops the notes of missed creations among them.
func (p *Plugin) recordHanded(handed []string, ctrs []*api.Container) {
	present := make(map[string]bool, len(ctrs))
	for _, c := range ctrs {
		present[c.GetId()] = true
	}
	by := protocol.SyncedBy{Version: p.version.Original(), Instance: p.self.Id}
	// A container not listed is stopped or removed. With removals seen
	// (noteRemoval), a stopped one stays recorded until its removal:
	// dropped now, its removal would look like a missed creation and it
	// would be handed again.
	keepStopped := p.handles.IsSet(api.Event_REMOVE_CONTAINER)
	if err := p.dir.RecordSyncedUnstamped(handed, by, func(id string) bool { return present[id] || keepStopped }); err != nil {
		p.log.WithError(err).Warn("cannot record the unstamped containers synchronized; a later owner sees them again")
	} else if err := p.dir.DropMissed(handed); err != nil {
		p.log.WithError(err).Warn("cannot drop the notes of the missed creations handed")
	}
}

// promoteWhenIdle makes this heir connection owner of the cut if no event
// comes to show it in the runtime's chain (see
// protocol.Coordinator.PromoteWhenIdle), then closes the connection it
// replaced, if any.
func (a *adapter) promoteWhenIdle() {
	select {
	case <-a.synced:
	case <-a.lost:
		return
	}
	parent := a.p.runCtx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	go func() {
		select {
		case <-a.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	var quiet time.Duration
	if a.stub != nil {
		quiet = a.stub.RequestTimeout()
	}
	if quiet <= 0 {
		quiet = api.DefaultPluginRequestTimeout
	}
	if a.p.coord.PromoteWhenIdle(ctx, a.tag, quiet) {
		// Outside any event: an event may begin at any moment, so the old
		// connection is closed from inside a Synchronize, as at a stop.
		if old := a.retiring.Swap(nil); old != nil {
			a.p.stopQuietly(context.WithoutCancel(parent), old)
		}
	}
}

// skip counts and logs an event this instance does not act on.
func (p *Plugin) skip(event eventKind, id string, role hapi.Role) {
	p.skipped.Add(1)
	p.obs.Event(event, resultSkipped)
	if p.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		p.log.WithFields(logrus.Fields{"event": event.String(), "object": id, "role": role.String()}).
			Debug("skipped: this instance does not own the plugin")
	}
}

// CreateContainer hands the container to the author when this instance owns
// it and no other instance stamped it already, then adds the stamp.
func (a *adapter) CreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p := a.p
	t := a.begin(ctx, recentCall{event: evCreateContainer, id: c.GetId(), pod: pod, ctr: c})
	defer t.end()
	if !t.act {
		if late := a.lateOlder.Load(); late != nil {
			// Created by the predecessor after this connection's
			// Synchronize: its stamp is on the container already.
			if st, err := p.verify(c); err == nil && st.Older(p.version) {
				late.mu.Lock()
				late.list = append(late.list, &StampedContainer{Container: c, Stamp: st})
				late.mu.Unlock()
			}
		}
		return nil, nil, nil
	}
	if st, err := p.verify(c); err == nil {
		// Another instance of this plugin got here first; a second claim on
		// the same fields would make the runtime reject the container.
		p.skippedStamped.Add(1)
		p.obs.Event(evCreateContainer, resultSkippedStamped)
		if p.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			p.log.WithFields(logrus.Fields{"container": c.GetId(), "by": st.Instance, "by_version": st.Version.Original()}).
				Debug("skipped: container already stamped")
		}
		return nil, nil, nil
	}
	var (
		adjust  *api.ContainerAdjustment
		updates []*api.ContainerUpdate
		err     error
	)
	if p.rec != nil {
		if p.recPods && ctx.Err() == nil && !p.crashed() { // (see turn.record)
			p.rec.Set(lifecycle.Pod, pod.GetId(), "", lifecycle.Running)
		}
		r, skip := t.record(ctx, evCreateContainer, c.GetId(), pod.GetId()) // a creation is never handed late: skip means closed
		defer r.done()
		if skip {
			return nil, nil, nil
		}
	}
	if h, ok := p.author.(stub.CreateContainerInterface); ok {
		if adjust, updates, err = h.CreateContainer(ctx, pod, c); err != nil {
			return nil, nil, err
		}
	}
	value, err := p.sign(c.GetId())
	if err != nil {
		return nil, nil, err
	}
	if adjust == nil {
		adjust = &api.ContainerAdjustment{}
	}
	adjust.AddAnnotation(p.stampKey, value)
	p.stamped.Add(1)
	return adjust, updates, nil
}

func (a *adapter) UpdateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container, r *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	t := a.begin(ctx, recentCall{event: evUpdateContainer, id: c.GetId(), pod: pod, ctr: c, res: r})
	defer t.end()
	if !t.act {
		return nil, nil
	}
	a.noteMissedCreation(evUpdateContainer, c)
	return a.p.author.(stub.UpdateContainerInterface).UpdateContainer(ctx, pod, c, r)
}

func (a *adapter) StopContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	t := a.begin(ctx, recentCall{event: evStopContainer, id: c.GetId(), pod: pod, ctr: c})
	defer t.end()
	r, skip := t.record(ctx, evStopContainer, c.GetId(), c.GetPodSandboxId())
	defer r.done()
	if !t.act || skip {
		return nil, nil
	}
	a.noteMissedCreation(evStopContainer, c)
	return a.p.author.(stub.StopContainerInterface).StopContainer(ctx, pod, c)
}

func (a *adapter) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	t := a.begin(ctx, recentCall{event: evUpdatePodSandbox, id: pod.GetId(), pod: pod, res: res, overhead: overhead})
	defer t.end()
	if !t.act {
		return nil
	}
	return a.p.author.(stub.UpdatePodInterface).UpdatePodSandbox(ctx, pod, overhead, res)
}

// event gates an event whose only result is an error: call names it and
// the pod or container it is about.
func (a *adapter) event(ctx context.Context, call recentCall, run func() error) error {
	return a.podEvent(ctx, call, "", run)
}

// podEvent is event for an event the lifecycle record keeps (turn.record):
// pod is a container's pod id.
func (a *adapter) podEvent(ctx context.Context, call recentCall, pod string, run func() error) error {
	t := a.begin(ctx, call)
	defer t.end()
	r, skip := t.record(ctx, call.event, call.id, pod)
	defer r.done()
	if !t.act || skip {
		return nil
	}
	return run()
}

// containerEvent is event for a later event of container c: acted on, it
// also notes a missed creation (noteMissedCreation).
func (a *adapter) containerEvent(ctx context.Context, event eventKind, pod *api.PodSandbox, c *api.Container, run func() error) error {
	t := a.begin(ctx, recentCall{event: event, id: c.GetId(), pod: pod, ctr: c})
	defer t.end()
	r, skip := t.record(ctx, event, c.GetId(), c.GetPodSandboxId())
	defer r.done()
	if !t.act || skip {
		return nil
	}
	a.noteMissedCreation(event, c)
	return run()
}

func (a *adapter) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.event(ctx, recentCall{event: evRunPodSandbox, id: pod.GetId(), pod: pod}, func() error {
		return a.p.author.(stub.RunPodInterface).RunPodSandbox(ctx, pod)
	})
}

func (a *adapter) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.event(ctx, recentCall{event: evPostUpdatePodSandbox, id: pod.GetId(), pod: pod}, func() error {
		return a.p.author.(stub.PostUpdatePodInterface).PostUpdatePodSandbox(ctx, pod)
	})
}

func (a *adapter) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.event(ctx, recentCall{event: evStopPodSandbox, id: pod.GetId(), pod: pod}, func() error {
		return a.p.author.(stub.StopPodInterface).StopPodSandbox(ctx, pod)
	})
}

func (a *adapter) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.event(ctx, recentCall{event: evRemovePodSandbox, id: pod.GetId(), pod: pod}, func() error {
		return a.p.author.(stub.RemovePodInterface).RemovePodSandbox(ctx, pod)
	})
}

func (a *adapter) StartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return a.containerEvent(ctx, evStartContainer, pod, c, func() error {
		return a.p.author.(stub.StartContainerInterface).StartContainer(ctx, pod, c)
	})
}

func (a *adapter) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return a.containerEvent(ctx, evPostCreateContainer, pod, c, func() error {
		return a.p.author.(stub.PostCreateContainerInterface).PostCreateContainer(ctx, pod, c)
	})
}

func (a *adapter) PostStartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return a.containerEvent(ctx, evPostStartContainer, pod, c, func() error {
		return a.p.author.(stub.PostStartContainerInterface).PostStartContainer(ctx, pod, c)
	})
}

func (a *adapter) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return a.containerEvent(ctx, evPostUpdateContainer, pod, c, func() error {
		return a.p.author.(stub.PostUpdateContainerInterface).PostUpdateContainer(ctx, pod, c)
	})
}

func (a *adapter) RemoveContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return a.podEvent(ctx, recentCall{event: evRemoveContainer, id: c.GetId(), pod: pod, ctr: c}, c.GetPodSandboxId(), func() error {
		a.noteRemoval(c)
		return a.p.author.(stub.RemoveContainerInterface).RemoveContainer(ctx, pod, c)
	})
}

// ValidateContainerAdjustment hands the validation to the author's
// validator on the owner only; the other instances accept, so the owner's
// verdict is the plugin's.
func (a *adapter) ValidateContainerAdjustment(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	return a.event(ctx, recentCall{event: evValidateContainerAdjustment, id: req.GetContainer().GetId()}, func() error {
		return a.p.author.(stub.ValidateContainerAdjustmentInterface).ValidateContainerAdjustment(ctx, req)
	})
}

// Shutdown tells the author's Shutdown, on the owner only, that the runtime
// is shutting down.
func (a *adapter) Shutdown(ctx context.Context) {
	h, ok := a.p.author.(stub.ShutdownInterface)
	if !ok || a.closed.Load() || !a.p.coord.OwnsCut(a.tag) {
		return
	}
	h.Shutdown(ctx)
}
