package protocol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/ttrpc"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/kithook"
	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

const (
	// takeBackGrace is how long after a taker's claim deadline its yielded
	// owner still waits for the taker to finish the claim as owner before
	// it takes ownership back. The taker publishes only before its deadline,
	// so the grace covers the few steps between its last check and the end
	// of its claim.
	takeBackGrace = 100 * time.Millisecond
	// maxClaimWait caps the claim deadline a taker may ask an owner to
	// honour: a yielded owner never waits longer than this for a taker.
	maxClaimWait = 10 * time.Second
	// overdueLockWait is how long a take-back from an overdue taker tries
	// the claim lock before it goes on without it.
	overdueLockWait = 5 * time.Millisecond
)

// Config configures a Coordinator. Its callbacks (OnResync, OnPromoted,
// OnOutcome, OnInDoubt, OnGap) are called with the coordinator's mutex
// released, so they may call Status; those called during a yield or an
// event run inside its event section (see Coordinator). None may block.
type Config struct {
	// Dir is the plugin's handover directory.
	Dir *Dir
	// Self identifies this instance. Plugin, Id, Version and
	// StartedUnixNano are required.
	Self *api.Instance
	// Policy decides who may take over; nil means NewestInstance.
	Policy Policy
	// ClaimTimeout bounds Claim; zero means DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// Log receives structured logs; nil means the standard logger.
	Log *logrus.Entry
	// OnResync is called, from a coordinator goroutine, when this standby
	// should claim again inside a fresh Synchronize: the owner is leaving or
	// has changed. The caller reconnects to the runtime. Must not block.
	OnResync func(reason string)
	// OnPromoted is called, from a coordinator goroutine, when this instance
	// became owner outside a Synchronize because the previous owner is gone.
	// Must not block.
	OnPromoted func(epoch uint64)
	// OnOutcome, if set, is told the outcome of every claim, yield request
	// and promotion, with how long it took (e.g. for metrics). Must not block.
	OnOutcome func(o Outcome, took time.Duration)
	// OnInDoubt, if set, is called when this instance takes over from an
	// owner that died inside a handler: that event is in doubt (see
	// docs/design.md). key is the event's protocol key (EventKey) when it
	// is known and is not the event of the call that declares it (the
	// caller of Decide names that one: Decision.InDoubt); else 0. Must not
	// block.
	OnInDoubt func(key uint32)
	// OnUnacted, if set, is called with the key of an earlier event that
	// the cut knows reached no handler of any instance and that the
	// runtime is done with (the owner was never called for it: rule 4's
	// skipped event, an event handed over to an heir the runtime dropped
	// before its call); it returns whether the harness hands it to the
	// author late, once. If it does not (or OnUnacted is nil), the event
	// is declared in doubt as before (OnInDoubt). Must not block.
	OnUnacted func(key uint32) bool
	// OnGap, if set, is called when this instance takes over and no
	// instance has acted for gap (since the last event acted on): events
	// in that window reached no instance. Must not block.
	OnGap func(gap time.Duration)
	// AtLeastOnce: an event in doubt is acted on again by the connection
	// that took over (by default it is not: at most once).
	AtLeastOnce bool
	// Clock is the time source of every deadline of the coordinator (see
	// Clock); nil means the real time. Tests inject a fake one.
	Clock Clock
	// Failpoint, if set, is called at each step of the protocol (see Step).
	// Fault tests use it to stop or kill an instance at an exact step; it is
	// nil in production.
	Failpoint func(Step)
}

// Step names a point in the handover protocol, for Config.Failpoint.
type Step string

// Protocol steps, in the order a handover passes them.
const (
	StepClaimLocked   Step = "claim-locked"   // taker: holds the claim lock, about to ask the owner
	StepYieldReceived Step = "yield-received" // owner: a Yield request arrived, nothing decided
	StepYieldDecided  Step = "yield-decided"  // owner: retired, the answer not yet sent
	StepYieldAnswered Step = "yield-answered" // taker: the owner accepted, nothing published
	StepPublished     Step = "published"      // taker: owner name leads to it, role not yet owner
	StepOwner         Step = "owner"          // taker: owner, the claim lock still held
)

func (c *Coordinator) failpoint(s Step) {
	if c.cfg.Failpoint != nil {
		c.cfg.Failpoint(s)
	}
}

// Outcome names what a claim, a yield request or a promotion came to.
type Outcome string

// Outcomes reported through Config.OnOutcome.
const (
	OutcomeFirstOwner Outcome = "first-owner" // claimed with no owner on the node
	OutcomeTookOver   Outcome = "took-over"   // the owner yielded to this instance
	OutcomeForced     Outcome = "forced"      // took over from an owner that did not answer
	OutcomeKept       Outcome = "kept"        // claimed again while owner (reconnection)
	OutcomeRefused    Outcome = "refused"     // claim refused: this instance is standby
	OutcomeRetired    Outcome = "retired"     // claimed while retired: stays retired
	OutcomeTookBack   Outcome = "took-back"   // retired instance whose successor vanished
	OutcomeFailed     Outcome = "failed"      // the claim could not be made
	OutcomeYielded    Outcome = "yielded"     // this owner yielded to a taker
	OutcomeDeclined   Outcome = "declined"    // this instance refused a taker
	OutcomePromoted   Outcome = "promoted"    // became owner after the owner vanished
	OutcomeNotReady   Outcome = "not-ready"   // claimed, but ready (the author's Synchronize) failed: given back
	// OutcomeYieldedQueued: this leaving owner yielded, outside any
	// Synchronize, to an instance whose new runtime connection the runtime
	// has queued (see Coordinator.TakeOverQueued).
	OutcomeYieldedQueued Outcome = "yielded-queued"
)

func (c *Coordinator) report(o Outcome, since time.Time) {
	if c.cfg.OnOutcome != nil {
		c.cfg.OnOutcome(o, c.clock().Now().Sub(since))
	}
}

// Coordinator owns the role of one plugin instance and speaks the handover
// protocol with the plugin's other instances on the node.
//
// Locking: events is a one-slot semaphore held by the plugin harness for
// the whole of each NRI event (Enter/Exit) and by every role change, so a
// role never changes while an event is being handled; every wait for it
// outside an event is bounded (by a request, the coordinator's life or the
// leave timeout), so an author's handler that never returns cannot hang a
// stop. mu guards the fields below it and is always taken after events,
// never before; the directory's genMu (Dir) is taken after mu, never
// before (Decide holds mu around the register's decision, takeCutLocked
// around its moves).
type Coordinator struct {
	cfg  Config
	self *api.Instance
	log  *logrus.Entry

	events chan struct{}

	mu           sync.Mutex
	role         api.Role
	reason       string
	outcome      Outcome // what the last role change came to ("": nothing to report)
	epoch        uint64
	stage        stage // active -> leaving -> left -> closed (stages.go)
	claiming     bool  // a Claim is in progress (peers waiting to settle see it)
	pending      bool  // yielded; the successor's claim not yet settled
	successor    *api.Instance
	lastHandover *api.HandoverRecord
	watchers     map[string]*api.Instance
	changed      chan struct{} // closed and replaced on every change of the fields above
	// conns are this instance's runtime connections (see connState;
	// connSeq numbers them in the order they were registered); claimTag
	// is the connection a claim in progress is made for, mainTag the last
	// one that claimed: once the runtime has called it, it is the one that
	// may take the cut over, and a promotion outside a Synchronize takes
	// the cut for it (see takerLocked in cutconn.go).
	conns             map[uint16]*connState
	connSeq           uint64
	claimTag, mainTag uint16
	claimCut          cutWord         // the register before the claim in progress moved it
	claimCutTag       uint16          // the connection it moved it for (0: not moved)
	heirOfNobody      uint16          // an heir that claimed with no live owner
	gapHeir           uint16          // an heir that claimed when the register's owner did not act
	gapSince          time.Time       // and since when no connection acted then
	dropped           map[uint16]bool // this instance's connections that closed (the last few)
	heirFrom          string          // the instance an heir's claim was granted by ("": none, or this one)
	successorLeaving  bool            // the instance this one yielded to is stopping
	claimHeirEvents   uint64          // the heir mask the claim in progress replaced
	promotingFrom     loss            // of a promotion in progress: the register as the loss was seen (see promoteIfOrphaned)
	followingOverrun  bool            // an ownAfterOverrun in progress (see moveCutLocked)
	markPending       pendingMark     // a take's own standby mark, decided at its connection's next call

	lastActing atomic.Uint32 // the connection that acted last (Decide tells Changed on a new one)
	// releasedTag is the connection that released the register when this
	// instance left (see caller.releaser): stored by releaseCut, read by
	// Decide and, with no lock, by Finish at every event.
	releasedTag atomic.Uint32
	inDoubt     atomic.Uint64 // events a dead owner was inside of when this instance took over
	gaps        atomic.Uint64 // takeovers that found no instance acting (see reportInDoubt)
	unacted     atomic.Uint64 // events that reached no handler, handed late (see declareUnacted)

	ownSocket fileID // identity of this instance's socket file, set once in serve
	// fencedAt is 1 + the owner-name generation at which the name was last
	// seen to lead to this instance (0: never): while the generation is
	// unchanged, the name cannot have changed (see superseded).
	fencedAt atomic.Uint64

	server   *ttrpc.Server
	listener net.Listener
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New validates cfg, starts serving the handover service on this
// instance's own socket and returns a coordinator in the joining role.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Dir == nil {
		return nil, errors.New("handover: no directory")
	}
	s := cfg.Self
	if s == nil || s.Id == "" || s.Version == "" || s.StartedUnixNano == 0 {
		return nil, errors.New("handover: instance identity needs id, version and start time")
	}
	if s.Plugin != cfg.Dir.Plugin() {
		return nil, fmt.Errorf("handover: instance of plugin %q in directory of %q",
			s.Plugin, cfg.Dir.Plugin())
	}
	if cfg.Policy == nil {
		cfg.Policy = NewestInstance{}
	}
	if cfg.ClaimTimeout <= 0 {
		cfg.ClaimTimeout = DefaultClaimTimeout
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	c := &Coordinator{
		cfg:      cfg,
		self:     s,
		role:     api.Role_ROLE_JOINING,
		events:   make(chan struct{}, 1),
		watchers: map[string]*api.Instance{},
		changed:  make(chan struct{}),
		conns:    map[uint16]*connState{},
		dropped:  map[uint16]bool{},
	}
	c.log = cfg.Log.WithFields(logrus.Fields{
		"plugin": s.Plugin, "version": s.Version, "instance": s.Id,
	})
	if err := cfg.Dir.LayoutErr(); err != nil {
		c.log.WithError(err).Error("handover page of another layout: this instance takes no part in the handover (standby, not Ready); the instances that speak it go on serving")
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if err := c.serve(); err != nil {
		c.cancel()
		return nil, err
	}
	return c, nil
}

// maxSocketPath is the longest path a unix socket can be bound to on Linux
// (sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// serve listens on the instance's own socket, mode 0600, and serves the
// handover service to peers of the same user only.
func (c *Coordinator) serve() error {
	path := c.cfg.Dir.InstanceSocket(c.self.Id)
	if len(path) > maxSocketPath {
		return fmt.Errorf("handover: socket path %s is %d bytes, longer than the %d a unix socket address holds: "+
			"use a shorter handover directory, plugin name or instance id", path, len(path), maxSocketPath)
	}
	if _, err := Dial(c.ctx, path); err == nil {
		return fmt.Errorf("handover: instance id %q is already in use (%s answers)", c.self.Id, path)
	} else if !errors.Is(err, ErrNoInstance) {
		return fmt.Errorf("handover: check instance socket: %w", err)
	}
	_ = os.Remove(path) // stale file of a dead instance with our id
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("handover: listen on %s: %w", path, err)
	}
	// The socket file is ours alone (the owner name is a separate link).
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("handover: chmod %s: %w", path, err)
	}
	if c.ownSocket, err = statID(path); err != nil {
		l.Close()
		return fmt.Errorf("handover: %w", err)
	}
	// The test kit may freeze this service (nothing registered in production).
	opts := append([]ttrpc.ServerOpt{ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser())},
		kithook.Lookup(path).ServerOptions()...)
	srv, err := ttrpc.NewServer(opts...)
	if err != nil {
		l.Close()
		return fmt.Errorf("handover: new ttrpc server: %w", err)
	}
	api.RegisterHandoverService(srv, &service{c: c})
	c.server, c.listener = srv, l
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := srv.Serve(c.ctx, l); err != nil && !errors.Is(err, ttrpc.ErrServerClosed) {
			c.log.WithError(err).Warn("handover service stopped")
		}
	}()
	return nil
}

// Self returns this instance's identity.
func (c *Coordinator) Self() *api.Instance { return c.self }

// Enter starts the handling of one NRI event and returns the role to act
// in: only ROLE_OWNER acts. The role cannot change until Exit.
//
// An owner first checks that the owner name still leads to its own socket
// (one stat(2)). If another instance has published itself there — it took
// over by force while this one was unresponsive, e.g. stopped with SIGSTOP —
// this instance retires on the spot instead of acting a second time.
func (c *Coordinator) Enter() api.Role {
	c.events <- struct{}{}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.role == api.Role_ROLE_OWNER && c.superseded() {
		c.retireSupersededLocked()
	}
	return c.role
}

// retireSupersededLocked retires an owner whose name another instance took
// by force, and watches that instance as it would a successor it yielded
// to, so it can take back if that one dies. Call with events and mu held.
func (c *Coordinator) retireSupersededLocked() {
	c.transitionLocked(api.Role_ROLE_RETIRED, supersededReason, "")
	if c.stage == stageClosed {
		return
	}
	c.wg.Add(1)
	go func() {
		// Who holds the name now? Nobody reachable: watchSuccessor finds no
		// such instance and takes back at once.
		holder, epoch := &api.Instance{}, uint64(0)
		ctx, cancel := withTimeout(c.clock(), c.ctx, c.cfg.ClaimTimeout)
		if cl, err := Dial(ctx, c.cfg.Dir.OwnerSocket()); err == nil {
			if st, err := cl.Status(ctx, &api.StatusRequest{}); err == nil && st.GetInstance().GetId() != "" {
				holder, epoch = st.GetInstance(), st.GetEpoch()
			}
			cl.Close()
		}
		cancel()
		c.watchSuccessor(holder, epoch, time.Time{}) // it calls c.wg.Done
	}()
}

const supersededReason = "superseded: the owner name leads to another instance"

// superseded reports whether the owner name leads to another instance's
// socket: someone took over while this instance did not answer. A missing
// name means nobody did (a claimer always publishes one).
//
// The generation of the owner name, in memory shared by every instance,
// changes after every rename of the name; while it is the one at which this
// instance last saw the name lead to it, no stat is needed. The generation
// is read before the stat and recorded only if the name led here, so the
// record is never newer than what was seen.
func (c *Coordinator) superseded() bool {
	gen, ok := c.cfg.Dir.ownerGeneration()
	if ok && c.fencedAt.Load() == gen+1 {
		return false
	}
	id, err := c.cfg.Dir.ownerID()
	if err != nil || id != c.ownSocket {
		return err == nil
	}
	if ok {
		c.fencedAt.Store(gen + 1)
	}
	return false
}

// Exit ends the handling of the event begun by Enter.
func (c *Coordinator) Exit() { <-c.events }

// holdEvents waits, until ctx ends, for no event to be in progress and
// keeps the next one out until releaseEvents. It reports whether it got
// there.
func (c *Coordinator) holdEvents(ctx context.Context) bool {
	select {
	case c.events <- struct{}{}: // free: taken even if ctx has ended
		return true
	default:
	}
	select {
	case c.events <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Coordinator) releaseEvents() { <-c.events }

// Status returns a snapshot of this instance's state.
func (c *Coordinator) Status() *api.StatusResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statusLocked()
}

func (c *Coordinator) statusLocked() *api.StatusResponse {
	st := &api.StatusResponse{
		Instance:     c.self,
		Role:         c.role,
		Epoch:        c.epoch,
		Reason:       c.reason,
		LastHandover: c.lastHandover,
		Leaving:      c.leavingLocked(),
	}
	for _, w := range c.watchers {
		st.Watchers = append(st.Watchers, w)
	}
	return st
}

// Ready reports whether this instance owns the plugin, or is the live
// fallback of the instance it yielded to (see LiveFallback), with a
// one-line reason: the readiness a DaemonSet rollout should wait for, and
// keep the old pod for.
func (c *Coordinator) Ready() (bool, string) {
	c.mu.Lock()
	st, settling := c.statusLocked(), c.claiming
	c.mu.Unlock()
	if st.Role == api.Role_ROLE_OWNER && settling {
		// Owner inside its Synchronize, not yet made ready: it may still
		// give ownership back.
		return false, "owner: claim not settled yet"
	}
	if st.Role == api.Role_ROLE_OWNER {
		if c.superseded() {
			return false, "owner: " + supersededReason
		}
		if c.hasConns() && !c.Acting() {
			return false, "owner: waiting to be seen in the runtime's chain (the previous owner acts until then)"
		}
		return true, fmt.Sprintf("owner since epoch %d", st.Epoch)
	}
	if st.Role == api.Role_ROLE_RETIRED {
		ctx, cancel := context.WithTimeout(context.Background(), fallbackProbeTimeout)
		defer cancel()
		if succ, ok := LiveFallback(ctx, c.cfg.Dir, st); ok {
			return true, FallbackReason(succ)
		}
	}
	if st.Reason != "" {
		return false, fmt.Sprintf("%s: %s", roleName(st.Role), st.Reason)
	}
	return false, roleName(st.Role)
}

// Changed returns a channel closed at the next change of role, epoch,
// leaving state or set of watchers.
func (c *Coordinator) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// notifyLocked wakes everyone waiting on Changed; call with mu held.
func (c *Coordinator) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// clock is the time source of the coordinator's deadlines (Config.Clock).
func (c *Coordinator) clock() Clock { return c.cfg.Clock }

func (c *Coordinator) currentRole() api.Role {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.role
}

// hasLeft reports whether Leave has finished: the instance never owns again.
func (c *Coordinator) hasLeft() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goneLocked()
}

func (c *Coordinator) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stage == stageClosed
}

// Leave is called when the instance is asked to stop. An owner tells its
// standbys that it is leaving, keeps acting, and waits until ctx ends for a
// successor to take over: one of its standbys (which reconnects to the
// runtime and claims inside its new Synchronize, so the switch stays
// fenced) or, with none running, a new instance (a DaemonSet re-creates a
// deleted pod within tens of milliseconds). Whatever the outcome, the
// instance acts on no event afterwards, with one exception: if it gave the
// register up with no successor seen (releaseCut), its connection, until
// it is closed, takes back an event that reached it and nobody else took
// (caller.releaser), and gives the register up again after it. Leave returns by the time ctx ends
// even if an event handler never returns. It returns true if ownership was
// handed over (or was not held).
func (c *Coordinator) Leave(ctx context.Context) bool {
	c.mu.Lock()
	owner := c.role == api.Role_ROLE_OWNER
	if owner && c.stage < stageLeaving { // Close may have run already
		c.advanceLocked(stageLeaving)
		c.log.WithField("standbys", len(c.watchers)).Info("leaving: acting until a successor takes over")
	}
	c.mu.Unlock()
	if owner {
		c.awaitSuccessor(ctx)
	}
	// A successor acts from the first event it is seen in (cut.go); until
	// then this instance still does.
	if !c.awaitCutReleased(ctx) {
		c.log.Warn("leaving: the successor was not seen in the runtime's chain in time")
		c.releaseCut()
	}

	// A handler that does not return by ctx's end is left behind: the
	// event it is in was this instance's; no later one is.
	held := c.holdEvents(ctx)
	if !held {
		c.log.Warn("leaving: an event handler has not returned; stopping without waiting for it")
	}
	c.mu.Lock()
	handed := c.role != api.Role_ROLE_OWNER
	if c.stage < stageLeft { // Close may have run already
		c.advanceLocked(stageLeft)
	}
	if c.role != api.Role_ROLE_RETIRED {
		c.transitionLocked(api.Role_ROLE_RETIRED, "stopped", "")
	}
	c.mu.Unlock()
	if held {
		c.releaseEvents()
	}
	return handed
}

// awaitSuccessor waits, until ctx ends, for this leaving owner to have
// handed over: it yielded and its successor finished its claim as owner.
// A successor that does not finish is taken back from (watchSuccessor),
// and the wait goes on for another.
func (c *Coordinator) awaitSuccessor(ctx context.Context) {
	for {
		c.mu.Lock()
		handed := c.role != api.Role_ROLE_OWNER && !c.pending
		ch := c.changed
		c.mu.Unlock()
		if handed {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			c.log.Warn("leaving: no successor took over in time")
			return
		}
	}
}

// Close stops the handover service and the coordinator's goroutines. The
// instance's own socket file is removed; the owner name and the key file
// are never touched, so a successor that serves them is not disturbed.
func (c *Coordinator) Close() {
	c.mu.Lock()
	if c.stage == stageClosed {
		c.mu.Unlock()
		return
	}
	c.advanceLocked(stageClosed)
	c.mu.Unlock()
	c.cancel()
	if c.server != nil {
		_ = c.server.Close()
	}
	c.wg.Wait()
}

// roleName is a short lower-case name of a role for logs and reasons.
func roleName(r api.Role) string {
	switch r {
	case api.Role_ROLE_JOINING:
		return "joining"
	case api.Role_ROLE_OWNER:
		return "owner"
	case api.Role_ROLE_STANDBY:
		return "standby"
	case api.Role_ROLE_RETIRED:
		return "retired"
	}
	return "unknown"
}

// RoleName is the short name of a role used in logs, status and probes.
func RoleName(r api.Role) string { return roleName(r) }

// service adapts the Coordinator to the generated ttrpc interface.
type service struct{ c *Coordinator }

func (s *service) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	return s.c.Status(), nil
}

func (s *service) Yield(ctx context.Context, req *api.YieldRequest) (*api.YieldResponse, error) {
	if resp := s.c.yield(ctx, req); resp != nil {
		return resp, nil
	}
	return nil, fmt.Errorf("yield: the owner is stuck in an event: %w", context.DeadlineExceeded)
}

func (s *service) Watch(ctx context.Context, req *api.WatchRequest) (*api.WatchResponse, error) {
	return s.c.watch(ctx, req)
}

func (s *service) Queued(ctx context.Context, req *api.QueuedRequest) (*api.QueuedResponse, error) {
	return s.c.queued(ctx, req), nil
}
