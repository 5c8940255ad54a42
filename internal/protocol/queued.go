package protocol

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// A leaving owner waits for a successor to claim inside the Synchronize of
// a new runtime connection. On containerd that Synchronize may be unable
// to run before the owner exits: a CRI StopContainer holds the runtime's
// plugin-sync block for the whole stop (containerd issue 14083), and under
// Kubernetes the stop of the owner's own pod is such a call, which ends
// only when the owner's process does. The successor's connection is then
// registered and queued for its Synchronize, and the owner's wait is
// futile: it stalls every CRI call on the node (the queued
// synchronization keeps new ones out) until its leave timeout, and a quiet
// stop after it cannot register either (the runtime registers one
// connection at a time).
//
// So a successor whose new connection has waited for its Synchronize for
// a while (queuedAfter, in the harness) while another connection of its
// own is synchronized and serves tells the owner (Queued). A leaving owner
// yields to it outside any Synchronize: it gives up the per-event register
// (releaseCut) while it holds its event section, retires, and its Leave
// returns at once; the successor publishes itself, becomes owner, and
// takes the register outright for its serving connection, which acts from
// the next event on. That is no weaker than the fenced handover: events
// move through the register, not the role (docs/design.md, "The per-event
// cut"), and the successor's serving connection is in the runtime's chain
// already. The successor's queued connection claims later in its own
// Synchronize as a reconnecting owner does (its claim keeps the role), and
// the owner closes its connection plainly: no new CRI call reaches any
// plugin while a synchronization is queued.
//
// An instance that does not implement Queued (an older build) answers
// Unimplemented and the successor waits for its Synchronize, as before; an
// older successor never asks, and the owner waits for its claim, as
// before. A non-leaving owner refuses: its successor claims in its
// Synchronize whenever the runtime runs it.

// queued handles a Queued request (see above): it returns the answer.
func (c *Coordinator) queued(ctx context.Context, req *api.QueuedRequest) *api.QueuedResponse {
	taker := req.GetTaker()
	start := c.clock().Now()
	refuse := func(reason string) *api.QueuedResponse {
		c.log.WithFields(logrus.Fields{"taker": taker.GetId(), "taker_version": taker.GetVersion()}).
			Info("refused to yield to a queued successor: " + reason)
		c.mu.Lock()
		epoch := c.epoch
		c.mu.Unlock()
		return &api.QueuedResponse{Reason: reason, Epoch: epoch}
	}
	if why := c.takerProblem(taker); why != "" {
		return refuse(why)
	}
	// Atomic with this instance's event handling, as a yield is, and
	// between two events at the runtime; bounded by the request (a handler
	// that never returns keeps the owner owning until its Leave gives up
	// on it).
	lockCtx, cancel := withTimeout(c.clock(), ctx, c.cfg.ClaimTimeout)
	held := c.holdBetweenEvents(lockCtx)
	cancel()
	if !held {
		return refuse("an event did not end in time")
	}
	defer c.releaseEvents()
	c.mu.Lock()
	why := ""
	switch {
	case c.role != api.Role_ROLE_OWNER:
		why = fmt.Sprintf("instance %s is not the owner (%s)", c.self.Id, roleName(c.role))
	case c.stage != stageLeaving:
		why = "not leaving: claim in the new connection's Synchronize"
	case c.claiming || c.pending:
		why = "a claim is in progress"
	case c.superseded():
		c.retireSupersededLocked()
		why = supersededReason
	}
	c.mu.Unlock()
	if why != "" {
		return refuse(why)
	}
	// No handler of this instance runs (events are held): the register is
	// given up between two of its events. The runtime may be between two
	// calls of one event; the taker's connection, called second for it,
	// then finds it acted on (takeCutLocked marks it, rule 1 declares it).
	c.releaseCut()
	waited := time.Duration(req.GetWaitedNano())
	c.mu.Lock()
	c.epoch++
	c.successor = taker
	c.lastHandover = &api.HandoverRecord{
		FromId: c.self.Id, FromVersion: c.self.Version, ToId: taker.Id, ToVersion: taker.Version,
		AtUnixNano: c.clock().Now().UnixNano(), Epoch: c.epoch,
	}
	c.transitionLocked(api.Role_ROLE_RETIRED, fmt.Sprintf(
		"yielded to %s (%s), whose new runtime connection has waited %v for its Synchronize (queued; the runtime may not run it before this instance exits)",
		taker.Id, taker.Version, waited.Round(time.Millisecond)), OutcomeYieldedQueued)
	resp := &api.QueuedResponse{Accepted: true, Epoch: c.epoch, Owner: c.self}
	c.mu.Unlock()
	c.report(OutcomeYieldedQueued, start)
	return resp
}

// holdBetweenEvents is holdEvents at a moment the runtime is not between
// its calls of one event to another connection and to this instance's
// owning one: then the other connection, a standby or fallback called
// first, has marked the register (cutWord.unrecorded) and skipped the
// event, and this instance's connection, called next, acts on it. Given up
// there, the event would reach nobody: the connection closes right after
// the yield, before the runtime calls it. It waits until ctx ends for the
// mark to go (the owning connection's call records the event).
func (c *Coordinator) holdBetweenEvents(ctx context.Context) bool {
	const poll = time.Millisecond
	for {
		if !c.holdEvents(ctx) {
			return false
		}
		w, _, ok := c.cfg.Dir.readCut()
		c.mu.Lock()
		_, mine := c.conns[w.owner]
		c.mu.Unlock()
		if !ok || !w.unrecorded || !mine {
			return true
		}
		c.releaseEvents()
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C: // a poll's pause, not a deadline: real time
		}
	}
}

// TakeOverQueued is called by the harness when the runtime registered
// connection tag of this instance waited ago and has not synchronized it
// since. If the owner is leaving and yields (see
// Queued above), this instance becomes owner outside any Synchronize, and
// its connection that claimed last (it serves, in the runtime's chain)
// takes the per-event register at once; tag claims later, in its
// Synchronize, as a reconnection. It reports whether this instance became
// owner. It does nothing for an owner, a leaving instance, an instance
// whose claim is in progress, or one without another connection.
func (c *Coordinator) TakeOverQueued(ctx context.Context, tag uint16, waited time.Duration) bool {
	able := func() bool {
		_, serving := c.conns[c.mainTag]
		return (c.role == api.Role_ROLE_STANDBY || c.role == api.Role_ROLE_RETIRED) &&
			serving && c.mainTag != tag && c.claimTag == 0 && !c.claiming && !c.leavingLocked()
	}
	c.mu.Lock()
	ok := able()
	c.mu.Unlock()
	if !ok || c.cfg.Dir.LayoutErr() != nil {
		return false
	}
	start := c.clock().Now()
	log := c.log.WithField("waited", waited.Round(time.Millisecond).String())
	lctx, lcancel := withTimeout(c.clock(), ctx, c.cfg.ClaimTimeout/4)
	unlock, err := c.cfg.Dir.Lock(lctx)
	lcancel()
	if err != nil {
		log.WithError(err).Debug("queued connection: claim lock busy; waiting for the Synchronize")
		return false
	}
	defer unlock()
	c.mu.Lock()
	ok = able()
	c.mu.Unlock()
	if !ok {
		return false
	}
	rctx, cancel := withTimeout(c.clock(), ctx, c.cfg.ClaimTimeout)
	defer cancel()
	cl, err := Dial(rctx, c.cfg.Dir.OwnerSocket())
	if err != nil {
		return false // no owner: the claim in the Synchronize finds none
	}
	defer cl.Close()
	st, err := cl.Status(rctx, &api.StatusRequest{})
	if err != nil || st.GetRole() != api.Role_ROLE_OWNER || !st.GetLeaving() || st.GetInstance().GetId() == c.self.Id {
		return false // only a leaving owner yields so
	}
	resp, err := cl.Queued(rctx, &api.QueuedRequest{Taker: c.self, WaitedNano: int64(waited)})
	switch {
	case status.Code(err) == codes.Unimplemented:
		log.WithField("owner", st.GetInstance().GetId()).Info(
			"queued connection: the leaving owner is an older build that does not yield to a queued successor; waiting for the Synchronize")
		return false
	case err != nil:
		log.WithError(err).Info("queued connection: the leaving owner did not answer; waiting for the Synchronize")
		return false
	case !resp.GetAccepted():
		log.WithField("reason", resp.GetReason()).Info("queued connection: the leaving owner did not yield; waiting for the Synchronize")
		return false
	}
	from := resp.GetOwner()
	if _, err := c.becomeOwner(from, resp.GetEpoch(), fmt.Sprintf(
		"took over from leaving %s (%s) while this instance's new runtime connection is queued for its Synchronize",
		from.GetId(), from.GetVersion()), OutcomeTookOver, start, time.Time{}); err != nil {
		// The owner gave the register up: this instance's serving
		// connection takes it over at the next event (rule 5), and the
		// queued connection claims in its Synchronize.
		log.WithError(err).Warn("queued connection: the leaving owner yielded, but taking ownership failed")
		return false
	}
	c.report(OutcomeTookOver, start)
	return true
}

// YieldedToQueued reports whether this instance yielded, while leaving, to
// a successor whose new runtime connection the runtime had queued (see
// Queued above). Its connection is then best closed plainly: a quiet
// connection could not be registered before that successor's is
// synchronized, which may need this process to exit first.
func (c *Coordinator) YieldedToQueued() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.role == api.Role_ROLE_RETIRED && c.outcome == OutcomeYieldedQueued
}
