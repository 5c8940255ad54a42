package protocol

// The claim: how an instance becomes owner (or standby) at its runtime
// connection's Synchronize, by asking the owner to yield, within a
// deadline the runtime's request timeout bounds.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

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
