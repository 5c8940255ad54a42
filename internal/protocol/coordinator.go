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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-handover/nri-handover/internal/backoff"
	"github.com/nri-handover/nri-handover/internal/kithook"
	"github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/stamp"
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
	// docs/design.md). Must not block.
	OnInDoubt func()
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

	lastActing atomic.Uint32 // the connection that acted last (Decide tells Changed on a new one)
	// releasedTag is the connection that released the register when this
	// instance left (see caller.releaser): stored by releaseCut, read by
	// Decide and, with no lock, by Finish at every event.
	releasedTag atomic.Uint32
	inDoubt     atomic.Uint64 // events a dead owner was inside of when this instance took over
	gaps        atomic.Uint64 // takeovers that found no instance acting (see reportInDoubt)

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

// Claim negotiates this instance's role; it is ClaimThen with nothing to
// make ready.
func (c *Coordinator) Claim(ctx context.Context) (api.Role, error) { return c.ClaimThen(ctx, nil) }

// ClaimThen negotiates this instance's role. The plugin harness calls it
// from its NRI Synchronize handler: the runtime holds its sync lock then,
// so no event is in flight at any instance and ownership moves exactly
// between two events. It returns the role this instance now has; an error
// means the claim could not be made (the instance then keeps a role that
// does not act).
//
// If the claim makes this instance owner, ready (the author's Synchronize)
// runs before the claim settles, bounded by the settle deadline: ownership
// passes for good only once ready has succeeded. If ready fails or does not
// return in time (ErrNotReady), an instance that was not owner before gives
// ownership back: it becomes standby and waits, still inside the runtime's
// Synchronize and so still fenced, until the instance that yielded to it
// owns the plugin again (an owner that reconnected keeps its role). The same
// wait follows a claim that was granted but could not be finished (its
// deadline passed before publishing: model finding F7). A failed newcomer
// therefore changes nothing.
func (c *Coordinator) ClaimThen(ctx context.Context, ready func(context.Context) error) (api.Role, error) {
	return c.claimThen(ctx, ready, nil)
}

// claimThen is ClaimThen; settled, if not nil, runs once the claim settled
// as owner with ready done, before a Yield can be granted (see yield).
func (c *Coordinator) claimThen(ctx context.Context, ready func(context.Context) error, settled func()) (api.Role, error) {
	start := c.clock().Now()
	before := c.currentRole()
	c.mu.Lock()
	c.claimCutTag = 0
	c.mu.Unlock()
	w := newClaimWindow(ctx, start, c.cfg.ClaimTimeout, ready != nil)
	c.setClaiming(true)
	var grant claimGrant
	role, err := c.claim(ctx, w, &grant)
	c.mu.Lock()
	outcome := claimOutcome(before, role, c.outcome, err)
	c.mu.Unlock()
	// A superseded owner (the name leads elsewhere) retires at its next
	// event: its author does not synchronize (model finding F5).
	if role == api.Role_ROLE_OWNER && ready != nil && !c.superseded() {
		if rerr := runBy(c.clock(), ctx, w.settleBy, ready); rerr != nil {
			c.mu.Lock()
			prev, tag := c.claimCut, c.claimCutTag
			c.mu.Unlock()
			c.giveBackCut(prev, tag)
			outcome = OutcomeNotReady
			err = fmt.Errorf("%w: %w", ErrNotReady, rerr)
			if before != api.Role_ROLE_OWNER {
				c.transition(api.Role_ROLE_STANDBY, "not ready: "+rerr.Error(), OutcomeNotReady, true)
				role = api.Role_ROLE_STANDBY
			}
			// An owner that reconnected keeps its role: nobody else would
			// own, and its other connection may still be serving.
		} else if settled != nil {
			settled()
		}
	}
	c.setClaiming(false) // settled: a yielded owner waiting on it decides now
	if role != api.Role_ROLE_OWNER && grant.from != "" {
		c.awaitTakeBack(grant.from, w.returnBy)
	}
	c.report(outcome, start)
	return role, err
}

// refuseForLayout keeps an instance whose handover page has a layout it
// does not speak (Dir.LayoutErr) out of the handover: standby, not Ready,
// with the reason in its status, and no claim retried (a later claim finds
// the same page).
func (c *Coordinator) refuseForLayout(err error) {
	if r := c.currentRole(); r == api.Role_ROLE_JOINING || r == api.Role_ROLE_STANDBY {
		c.transition(api.Role_ROLE_STANDBY, "not taking part: "+err.Error(), "", false)
	}
}

// ErrNotReady is returned by ClaimThen when this instance claimed
// ownership but its ready function failed or overran: ownership was given
// back to the instance it was taken from.
var ErrNotReady = errors.New("not ready; ownership given back")

// claimWindow holds the deadlines of one claim, all on this process's
// monotonic clock.
type claimWindow struct {
	publishBy time.Time // the owner name is published before it, or not at all
	settleBy  time.Time // the claim settles (ready returned) before it; the owner is told
	returnBy  time.Time // a claim that did not settle as owner waits for the take-back until then
}

// newClaimWindow computes a claim's deadlines. The runtime's request
// timeout arrives as ctx's deadline: the claim proper takes at most half of
// what is left (and at most timeout), making ready may go on to five
// eighths, and waiting for a take-back to seven eighths, so the runtime
// never drops a newcomer for slowness, and a yielded owner that takes back
// from a taker hung past its settle deadline (plus takeBackGrace) does so
// before the runtime gives up on the taker and runs events again. Without a deadline, the claim takes
// timeout, ready as long again, the wait for a take-back another timeout.
func newClaimWindow(ctx context.Context, start time.Time, timeout time.Duration, withReady bool) claimWindow {
	budget := timeout
	deadline, ok := ctx.Deadline()
	left := deadline.Sub(start)
	if ok {
		budget = min(budget, left/2)
	}
	w := claimWindow{publishBy: start.Add(budget)}
	switch {
	case !withReady:
		w.settleBy = w.publishBy
	case ok:
		w.settleBy = start.Add(max(budget, left*5/8))
	default:
		w.settleBy = w.publishBy.Add(budget)
	}
	w.returnBy = w.settleBy.Add(budget)
	if ok {
		w.returnBy = start.Add(max(budget, left*7/8))
	}
	return w
}

// claimGrant records that an owner accepted this claim's Yield.
type claimGrant struct {
	from  string // the instance that yielded
	epoch uint64 // the epoch it granted
}

// runBy runs ready with a context that ends at by, and returns its error,
// or an error saying it did not return in time. A ready that overruns is
// left running; its result is ignored.
func runBy(clock Clock, parent context.Context, by time.Time, ready func(context.Context) error) error {
	start := clock.Now()
	if !start.Before(by) {
		// Not started at all: past its settle deadline the claim is given
		// back, and a yielded owner may take back (at settleBy plus
		// takeBackGrace) at any moment, after which this instance is
		// not the owner (model finding F5).
		return fmt.Errorf("the plugin's Synchronize was not started: its deadline passed %v ago", start.Sub(by).Round(time.Millisecond))
	}
	ctx, cancel := clock.WithDeadline(parent, by)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ready(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if parent.Err() != nil {
			return fmt.Errorf("the Synchronize request ended before the plugin's Synchronize returned: %w", parent.Err())
		}
		// Not wrapped: the runtime would take the text for its own timeout.
		return fmt.Errorf("the plugin's Synchronize did not return within %v", by.Sub(start).Round(time.Millisecond))
	}
}

// awaitTakeBack waits, until by, for another instance to own the plugin
// again — an instance other than this one answers as owner behind the
// owner name — once this claim was granted but settled as not owner. It
// runs inside the runtime's Synchronize, so no event can fall between the
// give-back and the take-back. A rename of the name is not enough: the
// name may lead to the predecessor already (this claim never published),
// or lead there before the predecessor has taken the owner role (model
// findings F7 and F10).
func (c *Coordinator) awaitTakeBack(from string, by time.Time) {
	const poll = time.Millisecond
	for c.clock().Now().Before(by) && c.ctx.Err() == nil {
		ctx, cancel := c.clock().WithDeadline(c.ctx, by)
		if cl, err := Dial(ctx, c.cfg.Dir.OwnerSocket()); err == nil {
			st, err := cl.Status(ctx, &api.StatusRequest{})
			cl.Close()
			if err == nil && st.Role == api.Role_ROLE_OWNER && st.GetInstance().GetId() != c.self.Id {
				cancel()
				return
			}
		}
		cancel()
		time.Sleep(poll) // a poll's pause, not a deadline: real time
	}
	c.log.WithField("predecessor", from).Warn("gave ownership back, but no other instance owned the plugin in time")
}

// setClaiming records whether a claim is in progress; a yielded owner that
// waits for its taker to settle (Watch with until_settled) wakes on it.
func (c *Coordinator) setClaiming(on bool) {
	c.mu.Lock()
	c.claiming = on
	c.notifyLocked()
	c.mu.Unlock()
}

// errClaimDeadline means a claim did not get to a step before the deadline
// that bounds the whole claim.
var errClaimDeadline = errors.New("claim deadline passed")

// claimOutcome classifies a finished claim for Config.OnOutcome; last is
// the outcome the last role change recorded (transitionLocked).
func claimOutcome(before, after api.Role, last Outcome, err error) Outcome {
	switch {
	case after == api.Role_ROLE_OWNER && before == api.Role_ROLE_OWNER:
		return OutcomeKept
	case after == api.Role_ROLE_OWNER && before == api.Role_ROLE_RETIRED:
		return OutcomeTookBack
	case after == api.Role_ROLE_OWNER && (last == OutcomeForced || last == OutcomeTookOver):
		return last
	case after == api.Role_ROLE_OWNER:
		return OutcomeFirstOwner
	case err != nil:
		return OutcomeFailed
	case after == api.Role_ROLE_RETIRED:
		return OutcomeRetired
	}
	return OutcomeRefused
}

// claim runs one claim, which must be over by deadline: the runtime may
// give up on the Synchronize it runs in soon after, and a switch after that
// would no longer be fenced. The first quarter of the budget is for the
// claim lock (another claim may be in progress), the owner's answer must
// come before the last quarter, and nothing is published after the
// deadline (see becomeOwner). The owner is told the deadline: it refuses a
// request that comes too late, and takes ownership back if this instance
// yields no sign of owning shortly after it (watchSuccessor).
func (c *Coordinator) claim(parent context.Context, w claimWindow, grant *claimGrant) (api.Role, error) {
	if err := c.cfg.Dir.LayoutErr(); err != nil {
		// Before asking anyone to yield: the instances that speak the
		// page go on serving (a failed upgrade changes nothing).
		c.refuseForLayout(err)
		return c.currentRole(), fmt.Errorf("claim: %w", err)
	}
	deadline := w.publishBy
	clock := c.clock()
	budget := deadline.Sub(clock.Now())
	lctx, cancel := clock.WithDeadline(parent, clock.Now().Add(budget/4))
	defer cancel()
	unlock, err := c.cfg.Dir.Lock(lctx)
	if err != nil {
		c.giveUpClaim("claim: " + err.Error())
		return c.currentRole(), fmt.Errorf("claim: %w", err)
	}
	defer unlock()
	c.failpoint(StepClaimLocked)

	// Asking must be over before the last quarter, which is for publishing.
	askBy := deadline.Add(-budget / 4)
	if !clock.Now().Before(askBy) {
		// Delayed after taking the lock (frozen, starved): the runtime may
		// have given up on this Synchronize already.
		c.giveUpClaim(fmt.Sprintf("claim: budget of %v spent before asking the owner", budget.Round(time.Millisecond)))
		return c.currentRole(), fmt.Errorf("claim: asking the owner: %w", errClaimDeadline)
	}
	ctx, cancel := clock.WithDeadline(parent, askBy)
	defer cancel()
	switch c.currentRole() {
	case api.Role_ROLE_OWNER:
		if !c.superseded() {
			// Reconnected to the runtime (e.g. after a runtime restart):
			// keep the role, and repair the owner name if it is missing.
			err := c.ensurePublished(ctx)
			var taken cutTaken
			c.mu.Lock()
			if c.role == api.Role_ROLE_OWNER {
				// The new connection is heir of the old one (if the
				// register is still with a predecessor's, of that one).
				if w, _, _ := c.cfg.Dir.readCut(); c.connEventsLocked(w.owner) != 0 || w.owner == 0 {
					c.heirFrom = ""
				}
				taken = c.takeCutLocked(true)
				c.recordCutLocked(taken)
			}
			c.mu.Unlock()
			c.reportInDoubt(taken)
			return c.currentRole(), err
		}
		// Another instance published itself while this one was away (it
		// took over from us by force, or took ownership back from a claim
		// of ours that overran): claim like any newcomer.
		c.transition(api.Role_ROLE_JOINING, supersededReason, "", false)
	case api.Role_ROLE_RETIRED:
		c.mu.Lock()
		leaving := c.successorLeaving
		c.successorLeaving = false
		c.mu.Unlock()
		if !leaving {
			return c.takeBackIfOrphaned(ctx)
		}
		// Claim like a newcomer: the leaving owner yields to any taker.
		c.transition(api.Role_ROLE_JOINING, "the successor is leaving: claiming back", "", false)
	}

	if id, err := c.cfg.Dir.ownerID(); err == nil && id == c.ownSocket {
		// The name leads here, to an instance that does not own: it gave
		// ownership back with nobody to take it (its ready failed with no
		// previous owner). Nobody else owns.
		return c.becomeOwner(nil, 0, "owner name leads to this instance", OutcomeFirstOwner, clock.Now(), deadline)
	}
	owner, err := Dial(ctx, c.cfg.Dir.OwnerSocket())
	if errors.Is(err, ErrNoInstance) {
		return c.becomeOwner(nil, 0, "no owner on the node", OutcomeFirstOwner, clock.Now(), deadline)
	}
	if err != nil {
		c.transition(api.Role_ROLE_STANDBY, "owner unreachable: "+err.Error(), "", true)
		return api.Role_ROLE_STANDBY, fmt.Errorf("claim: %w", err)
	}
	defer owner.Close()
	return c.askToYield(ctx, owner, true, w, grant)
}

// giveUpClaim ends a claim that could not be made in time. Only an instance
// that does not own anything becomes standby and tries again later: an
// owner (promoted meanwhile) or a retired one keeps its role.
func (c *Coordinator) giveUpClaim(reason string) {
	if r := c.currentRole(); r == api.Role_ROLE_JOINING || r == api.Role_ROLE_STANDBY {
		c.transition(api.Role_ROLE_STANDBY, reason, "", true)
		c.retryClaimLater()
	}
}

// retryClaimLater asks for a new claim after a pause when a claim found the
// lock busy: the holder may be a newcomer that hangs or died, which the
// owner's state does not show, so watching the owner alone would wait forever.
func (c *Coordinator) retryClaimLater() {
	if c.cfg.OnResync == nil || c.isClosed() {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := c.clock().NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-c.ctx.Done():
		case <-t.C():
			if c.currentRole() == api.Role_ROLE_STANDBY {
				c.cfg.OnResync("claim lock was busy; trying again")
			}
		}
	}()
}

// askToYield sends Yield to owner and takes the answer. A retired instance
// that still holds the owner name answers with its successor, which is
// asked once in its turn. Call with the claim lock.
func (c *Coordinator) askToYield(ctx context.Context, owner *Client, redirect bool, w claimWindow, grant *claimGrant) (api.Role, error) {
	start := c.clock().Now()
	deadline := w.publishBy
	resp, err := owner.Yield(ctx, &api.YieldRequest{
		Taker: c.self,
		// The owner waits for the claim to settle until then (wall clock,
		// for the peer).
		ClaimDeadlineUnixNano: start.Add(w.settleBy.Sub(start)).UnixNano(),
	})
	if err != nil && ctx.Err() == context.Canceled {
		// The Synchronize this claim runs in has ended (the connection
		// closed): a takeover now would not be fenced.
		c.giveUpClaim("claim: the runtime request ended while asking the owner")
		return c.currentRole(), fmt.Errorf("claim: asking the owner: %w", err)
	}
	if err != nil {
		// The owner is hung (e.g. stopped, stuck terminating) or died just
		// now. Either way it is not acting: the runtime runs no event while
		// we synchronize. Take over; should it wake up, its next event finds
		// the owner name changed and it retires (Enter).
		return c.becomeOwner(nil, 0, fmt.Sprintf("owner unresponsive (%v); took over", err), OutcomeForced, start, deadline)
	}
	if resp.Accepted {
		grant.from, grant.epoch = resp.Owner.GetId(), resp.Epoch
		c.failpoint(StepYieldAnswered)
		return c.becomeOwner(resp.Owner, resp.Epoch, fmt.Sprintf("took over from %s (%s)",
			resp.Owner.GetId(), resp.Owner.GetVersion()), OutcomeTookOver, start, deadline)
	}
	if resp.Owner.GetId() == c.self.Id {
		// The owner name still leads to an instance whose successor is us:
		// publishing was interrupted. We own the plugin already.
		return c.becomeOwner(nil, resp.Epoch, "owner name repaired", OutcomeFirstOwner, start, deadline)
	}
	if redirect && resp.Owner != nil && resp.Owner.GetId() != "" {
		next, err := Dial(ctx, c.cfg.Dir.InstanceSocket(resp.Owner.Id))
		if err == nil {
			defer next.Close()
			return c.askToYield(ctx, next, false, w, grant)
		}
		if errors.Is(err, ErrNoInstance) {
			return c.becomeOwner(nil, resp.Epoch, "owner's successor is gone", OutcomeFirstOwner, start, deadline)
		}
	}
	c.transition(api.Role_ROLE_STANDBY, resp.Reason, "", true)
	return api.Role_ROLE_STANDBY, nil
}

// becomeOwner makes this instance the owner and publishes its socket under
// the owner name. from is the previous owner (nil if none); epoch is the
// epoch granted by it, or 0 to take the next epoch on record; o is the
// outcome the change comes to (see transitionLocked). A claim
// passes its deadline: past it, nothing is published and the instance
// becomes standby (its yielded owner takes ownership back). Call with the
// claim lock, except for a take-back from an overdue taker (watchSuccessor).
func (c *Coordinator) becomeOwner(from *api.Instance, epoch uint64, reason string, o Outcome, start, deadline time.Time) (api.Role, error) {
	if !deadline.IsZero() && !c.clock().Now().Before(deadline) {
		c.giveUpClaim(fmt.Sprintf("claim: deadline passed before publishing (%s)", reason))
		return c.currentRole(), fmt.Errorf("claim: publishing: %w", errClaimDeadline)
	}
	if c.hasLeft() {
		return c.currentRole(), errors.New("handover: instance is stopping; not taking ownership")
	}
	if epoch == 0 {
		last, err := c.cfg.Dir.readEpoch()
		if err != nil {
			c.log.WithError(err).Warn("epoch record unreadable; starting from the local epoch")
		}
		c.mu.Lock()
		epoch = max(last, c.epoch) + 1
		c.mu.Unlock()
	}
	// Publish first: an owner acts only while the owner name leads to it
	// (see Enter), and the previous owner no longer acts (it yielded, is
	// gone, or will find the name changed at its next event).
	if err := c.cfg.Dir.publishOwner(c.cfg.Dir.InstanceSocket(c.self.Id), deadline, c.clock().Now); err != nil {
		if errors.Is(err, errClaimDeadline) {
			c.giveUpClaim(fmt.Sprintf("claim: deadline passed before publishing (%s)", reason))
			return c.currentRole(), fmt.Errorf("claim: %w", err)
		}
		c.transition(api.Role_ROLE_STANDBY, "cannot publish the owner name: "+err.Error(), "", true)
		return api.Role_ROLE_STANDBY, err
	}
	c.failpoint(StepPublished)
	if err := c.cfg.Dir.writeEpoch(epoch); err != nil {
		c.log.WithError(err).Warn("epoch not recorded")
	}
	if !c.holdEvents(c.ctx) {
		return c.currentRole(), errors.New("handover: instance is closing; not taking ownership")
	}
	c.mu.Lock()
	if c.goneLocked() {
		// Leave finished (or Close ran) while publishing: the name leads to an instance
		// that will not act; its watchers claim once it is gone.
		c.mu.Unlock()
		c.releaseEvents()
		return c.currentRole(), errors.New("handover: instance is stopping; not taking ownership")
	}
	c.epoch = epoch
	c.successor = nil
	c.pending = false
	c.successorLeaving = false // it was this instance's successor's; an owner has none
	if from != nil {
		c.lastHandover = &api.HandoverRecord{
			FromId: from.Id, FromVersion: from.Version, ToId: c.self.Id, ToVersion: c.self.Version,
			AtUnixNano: start.UnixNano(), Epoch: epoch, DurationNano: int64(c.clock().Now().Sub(start)),
		}
	}
	c.transitionLocked(api.Role_ROLE_OWNER, reason, o)
	c.heirFrom = from.GetId()
	taken := c.moveCutLocked(from != nil, o == OutcomePromoted)
	c.recordCutLocked(taken)
	c.mu.Unlock()
	c.reportInDoubt(taken)
	c.releaseEvents()
	c.failpoint(StepOwner)
	return api.Role_ROLE_OWNER, nil
}

// recordCutLocked keeps what a claim in progress did to the register, for
// giveBackCut. Call with mu.
func (c *Coordinator) recordCutLocked(t cutTaken) {
	if c.claimTag != 0 && t.tag == c.claimTag {
		c.claimCut, c.claimCutTag = t.prev, t.tag
	}
}

// ensurePublished checks that the owner name leads to this instance and
// fixes it if it leads nowhere. If another instance answers there as owner,
// this one was superseded and retires. Call with the claim lock.
func (c *Coordinator) ensurePublished(ctx context.Context) error {
	cl, err := Dial(ctx, c.cfg.Dir.OwnerSocket())
	if errors.Is(err, ErrNoInstance) {
		return c.cfg.Dir.publishOwner(c.cfg.Dir.InstanceSocket(c.self.Id), time.Time{}, nil)
	}
	if err != nil {
		return fmt.Errorf("check owner name: %w", err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx, &api.StatusRequest{})
	if err != nil {
		return fmt.Errorf("check owner name: %w", err)
	}
	if st.Instance.GetId() == c.self.Id {
		return nil
	}
	if st.Role == api.Role_ROLE_OWNER {
		c.transition(api.Role_ROLE_RETIRED, "superseded by "+st.Instance.GetId(), "", false)
		return nil
	}
	return c.cfg.Dir.publishOwner(c.cfg.Dir.InstanceSocket(c.self.Id), time.Time{}, nil)
}

// takeBackIfOrphaned makes a retired instance owner again when nobody owns
// the plugin any more (its successor died). Call with the claim lock.
func (c *Coordinator) takeBackIfOrphaned(ctx context.Context) (api.Role, error) {
	if c.ownerAlive(ctx) {
		return api.Role_ROLE_RETIRED, nil
	}
	return c.becomeOwner(nil, 0, "successor gone; took ownership back", OutcomeTookBack, c.clock().Now(), time.Time{})
}

// ownerAlive reports whether another instance answers on the owner name as
// owner. Call with the claim lock.
func (c *Coordinator) ownerAlive(ctx context.Context) bool {
	cl, err := Dial(ctx, c.cfg.Dir.OwnerSocket())
	if err != nil {
		return !errors.Is(err, ErrNoInstance)
	}
	defer cl.Close()
	st, err := cl.Status(ctx, &api.StatusRequest{})
	if err != nil {
		// Slow (hung, stopped) counts as alive: never risk two owners. A
		// connection that broke instead belongs to an instance that is
		// exiting: a killed process's listener may still accept for a moment
		// while the kernel closes its files.
		return timedOut(ctx, err)
	}
	if st.Instance.GetId() == c.self.Id {
		return false
	}
	if st.Role == api.Role_ROLE_OWNER {
		return true
	}
	// A retired instance still holds the name; ask for its successor. A
	// standby or joining holder owns nothing: it published, then gave
	// ownership back (its ready failed) or could not finish its claim.
	if succ := st.LastHandover.GetToId(); st.Role == api.Role_ROLE_RETIRED && succ != "" && succ != c.self.Id {
		if sc, err := Dial(ctx, c.cfg.Dir.InstanceSocket(succ)); err == nil {
			sc.Close()
			return true
		}
	}
	return false
}

// clock is the time source of the coordinator's deadlines (Config.Clock).
func (c *Coordinator) clock() Clock { return c.cfg.Clock }

func (c *Coordinator) currentRole() api.Role {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.role
}

// yield handles a Yield request: see service.Yield. It returns nil when
// it does not answer (an owner stuck in an event).
// ctx is the request's: it ends when the taker's call is abandoned (its
// deadline passed, or its connection closed because it died).
func (c *Coordinator) yield(ctx context.Context, req *api.YieldRequest) *api.YieldResponse {
	taker := req.GetTaker()
	c.failpoint(StepYieldReceived)
	// The taker's claim deadline, on this process's monotonic clock.
	wait := c.cfg.ClaimTimeout
	if d := req.GetClaimDeadlineUnixNano(); d != 0 {
		wait = time.Unix(0, d).Sub(c.clock().Now())
	}
	deadline := c.clock().Now().Add(min(wait, maxClaimWait))
	c.awaitOwnClaim(ctx, deadline)
	// Wait for the event in progress for as long as the taker waits for the
	// answer: a taker that gets none takes over by force (its claim is
	// fenced), which is right for an owner stuck in an event.
	lockCtx, cancel := withTimeout(c.clock(), ctx, maxClaimWait)
	held := c.holdEvents(lockCtx)
	cancel()
	if held {
		defer c.releaseEvents()
	}
	c.mu.Lock()
	resp, o := c.yieldLocked(ctx, taker, held, deadline)
	c.mu.Unlock()
	// Told with mu released (a callback may ask for Status), events still
	// held: the answer is not sent yet.
	if o != "" {
		c.report(o, c.clock().Now())
	}
	if o == OutcomeYielded {
		c.failpoint(StepYieldDecided)
	}
	return resp
}

// awaitOwnClaim waits, until deadline, while this instance is owner and a
// claim of its own is settling (a reconnection or a catch-up: its author's
// Synchronize is being handed the containers no instance processed, and
// what it hands is recorded when the claim settles, claimThen's settled).
// Yielding before that, the taker's catch-up read the record without them
// and handed them again (the demo, mode cri-o, -faults 10 -seed 16: one
// container handed by two instances 1.5 ms apart).
func (c *Coordinator) awaitOwnClaim(ctx context.Context, deadline time.Time) {
	for {
		c.mu.Lock()
		settling, changed := c.claiming && c.role == api.Role_ROLE_OWNER, c.changed
		c.mu.Unlock()
		wait := deadline.Sub(c.clock().Now())
		if !settling || wait <= 0 {
			return
		}
		wctx, cancel := withTimeout(c.clock(), ctx, wait)
		select {
		case <-changed:
		case <-wctx.Done():
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// yieldLocked decides a Yield request (see yield) and returns the answer,
// nil for none, and the outcome to report. Call with mu held, and events
// if held.
func (c *Coordinator) yieldLocked(ctx context.Context, taker *api.Instance, held bool, deadline time.Time) (*api.YieldResponse, Outcome) {
	wait := deadline.Sub(c.clock().Now()) // the locks may have taken a while
	refuse := func(reason string) (*api.YieldResponse, Outcome) {
		c.log.WithFields(logrus.Fields{"taker": taker.GetId(), "taker_version": taker.GetVersion()}).
			Info("refused to yield: " + reason)
		// Owner is set only to redirect the taker to this one's successor.
		return &api.YieldResponse{Reason: reason, Epoch: c.epoch, Owner: c.successor}, OutcomeDeclined
	}
	switch {
	case !held && ctx.Err() != nil:
		// Stuck in an event for as long as the taker waited: no answer,
		// as from a hung owner (a refusal that reaches the taker just
		// before its own deadline would keep it from taking over).
		c.log.WithField("taker", taker.GetId()).Info("yield: an event handler did not return while the taker waited; not answering")
		return nil, ""
	case !held:
		// An event handler of this instance has not returned by the
		// taker's deadline: answering now would not be atomic with it.
		return refuse("an event handler did not return by the taker's claim deadline")
	case c.takerProblem(taker) != "":
		return refuse(c.takerProblem(taker))
	case c.role == api.Role_ROLE_OWNER && c.superseded():
		// A request that waited while this instance was unresponsive; its
		// sender took over by force meanwhile.
		c.retireSupersededLocked()
		return refuse(supersededReason)
	case c.role != api.Role_ROLE_OWNER:
		return refuse(fmt.Sprintf("instance %s is not the owner (%s)", c.self.Id, roleName(c.role)))
	case wait <= 0:
		// The taker's claim is over: it would not publish (becomeOwner),
		// and the runtime may have given up on its Synchronize.
		return refuse(fmt.Sprintf("the taker's claim deadline passed %v ago", (-wait).Round(time.Microsecond)))
	case ctx.Err() != nil:
		// The taker gave up on this request or died (its connection
		// closed): its Synchronize is over, yielding now would be unfenced.
		return refuse(fmt.Sprintf("the taker's request ended (%v)", ctx.Err()))
	}
	if !c.leavingLocked() {
		if ok, reason := c.cfg.Policy.Allow(PublicInstance(c.self), PublicInstance(taker)); !ok {
			return refuse(reason)
		}
	}
	c.epoch++
	c.successor = taker
	c.lastHandover = &api.HandoverRecord{
		FromId: c.self.Id, FromVersion: c.self.Version, ToId: taker.Id, ToVersion: taker.Version,
		AtUnixNano: c.clock().Now().UnixNano(), Epoch: c.epoch,
	}
	c.transitionLocked(api.Role_ROLE_RETIRED, fmt.Sprintf("yielded to %s (%s)", taker.Id, taker.Version), OutcomeYielded)
	if c.stage != stageClosed {
		c.pending = true
		c.wg.Add(1)
		go c.watchSuccessor(taker, c.epoch, c.clock().Now().Add(wait+takeBackGrace))
	}
	return &api.YieldResponse{Accepted: true, Epoch: c.epoch, Owner: c.self}, OutcomeYielded
}

// watch handles a Watch request: it returns when this instance's epoch
// differs from the caller's, when it leaves or stops owning, or when the
// caller goes away.
func (c *Coordinator) watch(ctx context.Context, req *api.WatchRequest) (*api.WatchResponse, error) {
	w := req.GetWatcher()
	c.mu.Lock()
	if w.GetId() != "" && req.GetWatcherRole() == api.Role_ROLE_STANDBY {
		c.watchers[w.Id] = w
		c.notifyLocked()
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.watchers, w.GetId())
		c.notifyLocked()
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		// A joining or claiming instance (a successor between the yield and
		// the end of its claim) is waited on, not reported: its state is
		// about to change.
		settled := c.role != api.Role_ROLE_JOINING && !c.claiming
		changed := c.epoch != req.Epoch || c.leavingLocked() || c.role != api.Role_ROLE_OWNER || req.GetUntilSettled()
		if settled && changed || c.stage == stageClosed {
			resp := &api.WatchResponse{Role: c.role, Epoch: c.epoch, Leaving: c.leavingLocked(),
				Reason: c.reason, Claiming: c.claiming}
			c.mu.Unlock()
			return resp, nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// watchOwner runs while this instance is standby: it watches the owner and
// asks for a new claim when the owner leaves or changes, or promotes this
// instance at once when the owner is gone.
func (c *Coordinator) watchOwner() {
	defer c.wg.Done()
	retry := backoff.New(10*time.Millisecond, 2*time.Second)
	for c.currentRole() == api.Role_ROLE_STANDBY {
		cl, err := Dial(c.ctx, c.cfg.Dir.OwnerSocket())
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			if errors.Is(err, ErrNoInstance) {
				c.promoteIfOrphaned("owner gone", loss{})
			}
			if !retry.Wait(c.ctx) {
				return
			}
			continue
		}
		st, err := cl.Status(c.ctx, &api.StatusRequest{})
		if err != nil {
			cl.Close()
			if !retry.Wait(c.ctx) {
				return
			}
			continue
		}
		resp, err := cl.Watch(c.ctx, &api.WatchRequest{Watcher: c.self, Epoch: st.Epoch, WatcherRole: api.Role_ROLE_STANDBY})
		cl.Close()
		switch {
		case c.ctx.Err() != nil:
			return
		case err != nil:
			// The connection broke: the owner exited or crashed.
			c.promoteIfOrphaned("owner connection lost", c.noteLoss())
		case resp.Leaving || resp.Role != api.Role_ROLE_OWNER || resp.Epoch != st.Epoch:
			if c.cfg.OnResync != nil && c.currentRole() == api.Role_ROLE_STANDBY {
				c.cfg.OnResync(fmt.Sprintf("owner %s changed (role %s, leaving %v)",
					st.Instance.GetId(), roleName(resp.Role), resp.Leaving))
			}
		}
		// Give the resync (or a new owner) time to act before watching again.
		if !retry.Wait(c.ctx) {
			return
		}
	}
}

// watchSuccessor runs on a retired instance: if its successor disappears
// while nobody else owns the plugin, it takes ownership back. After a
// yield (takeBackAt set), the successor must first finish its claim as
// owner of the granted epoch by takeBackAt; if it does not — it hangs, its
// claim overran its deadline, or it was not the instance that asked — this
// instance takes ownership back at once, even with the claim lock held by
// the hung taker.
func (c *Coordinator) watchSuccessor(successor *api.Instance, epoch uint64, takeBackAt time.Time) {
	defer c.wg.Done()
	if !takeBackAt.IsZero() {
		settled, why := c.awaitClaim(successor, epoch, takeBackAt)
		if why != "" {
			c.log.WithField("taker", successor.GetId()).Info("yielded owner: " + why)
		}
		// claimGone: the loop below finds it gone and promotes.
		if settled == claimOverdue || settled == claimNotOwned {
			c.takeBack(why, settled == claimOverdue)
		}
		c.mu.Lock()
		c.pending = false
		c.notifyLocked()
		c.mu.Unlock()
	}
	retry := backoff.New(10*time.Millisecond, 2*time.Second)
	var lost loss // kept over the retries after the watch broke
	for c.ctx.Err() == nil && c.currentRole() == api.Role_ROLE_RETIRED {
		if cl, err := Dial(c.ctx, c.cfg.Dir.InstanceSocket(successor.Id)); err == nil {
			inOrder := c.watchUntilGone(cl, epoch)
			cl.Close()
			if inOrder || c.ctx.Err() != nil {
				return
			}
			lost = c.noteLoss()
		}
		if c.promoteIfOrphaned("successor "+successor.Id+" gone", lost) == ownedElsewhere {
			return // another live instance owns the plugin; it is watched by its own
		}
		// Promotion failed or was undecidable (lock busy, owner slow): try
		// again rather than leave the node without a watcher.
		if !retry.Wait(c.ctx) {
			return
		}
	}
}

// timedOut reports whether a call failed because ctx's deadline passed.
// ttrpc sends the deadline along, so the peer may end the call with a
// DeadlineExceeded status a moment before ctx itself reports it.
func timedOut(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) ||
		status.Code(err) == codes.DeadlineExceeded
}

// claimResult is what a yielded owner learnt of its taker's claim.
type claimResult int

const (
	claimOwned    claimResult = iota // the taker owns the granted epoch, or handed on since
	claimNotOwned                    // the taker's claim is over and it does not own the plugin
	claimOverdue                     // the claim was not over in time (the taker hangs)
	claimGone                        // the taker is gone (its socket is dead)
	claimStopped                     // this instance is closing
)

// awaitClaim waits until the taker the plugin was yielded to at epoch has
// finished its claim, or until takeBackAt.
func (c *Coordinator) awaitClaim(taker *api.Instance, epoch uint64, takeBackAt time.Time) (claimResult, string) {
	ctx, cancel := c.clock().WithDeadline(c.ctx, takeBackAt)
	defer cancel()
	cl, err := Dial(ctx, c.cfg.Dir.InstanceSocket(taker.GetId()))
	if err == nil {
		defer cl.Close()
		var resp *api.WatchResponse
		resp, err = cl.Watch(ctx, &api.WatchRequest{Watcher: c.self, Epoch: epoch,
			WatcherRole: api.Role_ROLE_RETIRED, UntilSettled: true})
		if err == nil {
			if resp.Epoch > epoch || resp.Role == api.Role_ROLE_OWNER && resp.Epoch == epoch {
				return claimOwned, ""
			}
			return claimNotOwned, fmt.Sprintf("taker %s did not take ownership (%s at epoch %d: %s)",
				taker.GetId(), roleName(resp.Role), resp.Epoch, resp.Reason)
		}
	}
	switch {
	case c.ctx.Err() != nil:
		return claimStopped, ""
	case timedOut(ctx, err):
		return claimOverdue, fmt.Sprintf("taker %s did not finish its claim by its deadline", taker.GetId())
	}
	return claimGone, fmt.Sprintf("taker %s gone (%v)", taker.GetId(), err)
}

// takeBack makes this yielded instance owner again because its taker did
// not take ownership (see watchSuccessor). The claim lock serializes this
// with other claims; an overdue taker may hold it for as long as it hangs,
// so then (overdue) this goes on without it. That is safe: a taker that
// wakes up publishes only before its deadline, and should it have published
// just before, whichever of the two published last owns the plugin and the
// other one retires at its next event (Enter), as after a forced takeover.
func (c *Coordinator) takeBack(why string, overdue bool) {
	start := c.clock().Now()
	lockWait := c.cfg.ClaimTimeout / 4
	if overdue {
		lockWait = overdueLockWait // the hung taker most likely holds it
	}
	lctx, lcancel := withTimeout(c.clock(), c.ctx, lockWait)
	unlock, err := c.cfg.Dir.Lock(lctx)
	lcancel()
	ctx, cancel := withTimeout(c.clock(), c.ctx, c.cfg.ClaimTimeout/4)
	defer cancel()
	switch {
	case err == nil:
		defer unlock()
		if c.ownerAlive(ctx) {
			return // the taker did finish after all, or another claim won
		}
	case !overdue || c.ctx.Err() != nil:
		c.log.WithError(err).Warn("take-back: claim lock busy")
		return
	default:
		c.log.WithError(err).Warn("take-back: claim lock held (by the overdue taker?); going on without it")
	}
	if c.currentRole() != api.Role_ROLE_RETIRED {
		return
	}
	if err := c.ownOutsideFence("took ownership back: "+why, OutcomeTookBack, start); err != nil {
		c.log.WithError(err).Warn("take-back failed")
	}
}

// ownOutsideFence makes this instance owner outside a Synchronize (a
// promotion or a take-back), reports the outcome and tells the harness.
func (c *Coordinator) ownOutsideFence(reason string, o Outcome, start time.Time) error {
	if err := c.cfg.Dir.LayoutErr(); err != nil {
		c.refuseForLayout(err)
		return fmt.Errorf("%s: %w", reason, err)
	}
	if _, err := c.becomeOwner(nil, 0, reason, o, start, time.Time{}); err != nil {
		return err
	}
	c.report(o, start)
	if c.cfg.OnPromoted != nil {
		c.cfg.OnPromoted(c.Status().Epoch)
	}
	return nil
}

// watchUntilGone watches the instance behind cl. It returns true when that
// instance handed ownership on in order (its own successor watches it now),
// false once its connection is gone.
func (c *Coordinator) watchUntilGone(cl *Client, epoch uint64) bool {
	for {
		resp, err := cl.Watch(c.ctx, &api.WatchRequest{Watcher: c.self, Epoch: epoch, WatcherRole: api.Role_ROLE_RETIRED})
		switch {
		case err != nil:
			return false
		case resp.Role == api.Role_ROLE_RETIRED && !resp.Leaving:
			return true
		case resp.Leaving:
			// The successor is stopping: claim it back in a new
			// Synchronize (it yields to any taker) instead of waiting
			// for its leave timeout to end.
			c.mu.Lock()
			c.successorLeaving = true
			c.mu.Unlock()
			if c.cfg.OnResync != nil {
				c.cfg.OnResync("the successor is leaving")
			}
			select {
			case <-cl.Closed():
			case <-c.ctx.Done():
			}
			return false
		}
		epoch = resp.Epoch
	}
}

// promotion is what promoteIfOrphaned found.
type promotion int

const (
	promoted       promotion = iota // this instance owns the plugin now
	ownedElsewhere                  // a live instance owns it
	undecided                       // the lock was busy or publishing failed
)

// loss is what a watcher saw of the register when the instance it watched
// went away: the connection that held it, and when.
type loss struct {
	owner uint16
	at    time.Time
}

// noteLoss records the register's owner now, as the watched instance's
// loss is seen.
func (c *Coordinator) noteLoss() loss {
	w, _, _ := c.cfg.Dir.readCut()
	return loss{owner: w.owner, at: c.clock().Now()}
}

// takenSince reports whether, for up to a claim timeout after the loss l
// was seen, the register is held by a connection of another instance that
// took it since: since the loss, or since this instance's newest
// connection was last called (and saw another owner), which also covers a
// takeover the runtime made before the loss reached this instance (the
// next event goes to the survivor in the chain within microseconds of a
// kill). A dead owner moves nothing: that connection took over by the cut,
// acts, and its roles follow within that time (ownAfterOverrun, which
// waits for the claim lock).
func (c *Coordinator) takenSince(l loss) bool {
	if l.at.IsZero() || !c.clock().Now().Before(l.at.Add(c.cfg.ClaimTimeout)) {
		return false
	}
	w, _, _ := c.cfg.Dir.readCut()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.promotionFindsTakerLocked(w.owner) || c.takenSinceLocked(l, w.owner)
}

// takenSinceLocked reports whether owner, the register's owner now, is a
// connection of another instance than the one noted at the loss l. Call
// with mu.
func (c *Coordinator) takenSinceLocked(l loss, owner uint16) bool {
	_, mine := c.conns[owner]
	return !mine && owner != 0 && l.owner != 0 && owner != l.owner
}

// promoteIfOrphaned makes this instance owner, outside a Synchronize, when
// no live instance owns the plugin. The previous owner is gone, so it cannot
// act any more: taking over between two of its events is safe. lost is the
// register as the loss was seen (zero if unknown): if another instance's
// connection took it over since, this one leaves it to that one.
func (c *Coordinator) promoteIfOrphaned(why string, lost loss) promotion {
	ctx, cancel := withTimeout(c.clock(), c.ctx, c.cfg.ClaimTimeout)
	defer cancel()
	unlock, err := c.cfg.Dir.Lock(ctx)
	if err != nil {
		c.log.WithError(err).Warn("promotion: claim lock busy")
		return undecided
	}
	defer unlock()
	switch {
	case c.currentRole() == api.Role_ROLE_OWNER:
		return promoted
	case c.isClosed():
		return undecided
	case c.ownerAlive(ctx):
		return ownedElsewhere
	case c.takenSince(lost):
		// Taken outright now, the register would leave that live owner in
		// the middle of an event: the event it acted on would be declared
		// in doubt, or go to nobody (the demo, -faults 10 -seed 53: two
		// survivors of a kill, one taking over by the cut, the other by
		// this promotion).
		c.log.WithField("why", why).Info("promotion: another instance took the events over since; leaving them to it")
		return undecided
	}
	// The take inside the promotion checks the loss again (moveCutLocked):
	// a survivor may take over by the cut between takenSince and the swap.
	c.mu.Lock()
	c.promotingFrom = lost
	c.mu.Unlock()
	err = c.ownOutsideFence("promoted: "+why, OutcomePromoted, c.clock().Now())
	c.mu.Lock()
	c.promotingFrom = loss{}
	c.mu.Unlock()
	if err != nil {
		c.log.WithError(err).Warn("promotion: publish failed")
		return undecided
	}
	return promoted
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

// takerProblem says what is wrong with taker as another instance of this
// plugin asking for ownership (a Yield or a Queued request); "" if
// nothing is.
func (c *Coordinator) takerProblem(taker *api.Instance) string {
	switch {
	case taker.GetPlugin() != c.self.Plugin:
		return fmt.Sprintf("taker is plugin %q, not %q", taker.GetPlugin(), c.self.Plugin)
	case taker.GetId() == "" || taker.GetId() == c.self.Id:
		return "taker has no distinct instance id"
	case stamp.ValidateInstance(taker.GetId()) != nil:
		return fmt.Sprintf("taker id %q is not an instance id", taker.GetId())
	}
	return ""
}
