package protocol

// The owner's side of a claim: answering a Yield, and the checks of the
// instance that asks.

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/stamp"
)

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
