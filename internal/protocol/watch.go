package protocol

// The watches between instances after a handover or a claim: an owner's
// standbys watch it, a yielded owner watches its successor, and each takes
// back or is promoted when the other is gone.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-handover/nri-handover/internal/backoff"
	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

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
