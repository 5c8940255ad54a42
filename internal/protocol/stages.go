package protocol

import (
	"fmt"
	"sync/atomic"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// stage is where a Coordinator is in its life. It only moves forward:
// active -> leaving -> left -> closed, skipping stages as needed (an
// instance that is not owner goes from active to left; one closed
// without a Leave goes from active to closed).
type stage int

const (
	stageActive  stage = iota // serving; may own
	stageLeaving              // Leave began as owner: acting until a successor takes over
	stageLeft                 // Leave finished: never owner again
	stageClosed               // Close ran: the service and goroutines are stopped
)

func (s stage) String() string {
	switch s {
	case stageActive:
		return "active"
	case stageLeaving:
		return "leaving"
	case stageLeft:
		return "left"
	case stageClosed:
		return "closed"
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// illegalChanges counts stage and role changes that broke the rules of
// this file since the process started. Each one is also logged at error
// level; the package's tests fail if any happened (see TestMain).
var illegalChanges atomic.Uint64

// illegal records a change that breaks the rules of this file: loudly,
// but without refusing it, so that a rule missing from a table shows in
// the logs and the tests instead of changing what the coordinator does.
func (c *Coordinator) illegal(what string, fields logrus.Fields) {
	illegalChanges.Add(1)
	c.log.WithFields(fields).Error("handover: illegal " + what + " (see internal/protocol/stages.go)")
}

// advanceLocked moves the stage forward to s. It refuses to move it
// backwards: that is a bug, logged at error level and counted (see
// illegalChanges), and the stage stays. Moving to the current stage again
// changes nothing. Call with mu held.
func (c *Coordinator) advanceLocked(s stage) {
	switch {
	case s < c.stage:
		c.illegal("stage change", logrus.Fields{"from": c.stage.String(), "to": s.String()})
		return
	case s == c.stage:
		return
	}
	c.stage = s
	c.notifyLocked()
}

// leavingLocked reports whether Leave or Close began: the instance is on
// its way out (it still acts while leaving as owner). Call with mu held.
func (c *Coordinator) leavingLocked() bool { return c.stage >= stageLeaving }

// goneLocked reports whether Leave finished or Close ran: the instance
// never owns again. Call with mu held.
func (c *Coordinator) goneLocked() bool { return c.stage >= stageLeft }

// legal lists every role change the coordinator makes: legal[from][to]
// says when. docs/design.md's "Role changes" table lists exactly these
// pairs (TestDesignListsTheRoleChanges). A role that stays while its
// reason changes is no role change and is always allowed. Every change
// goes through transitionLocked, which checks it here.
var legal = map[api.Role]map[api.Role]string{
	api.Role_ROLE_JOINING: {
		api.Role_ROLE_OWNER:   "its claim found no owner, or the owner yielded or did not answer; or its connection took the register over from an owner the runtime gave up on",
		api.Role_ROLE_STANDBY: "its claim was refused or could not be made, or it claimed but was not ready",
		api.Role_ROLE_RETIRED: "stopped (Leave)",
	},
	api.Role_ROLE_STANDBY: {
		api.Role_ROLE_OWNER:   "its claim in a new Synchronize succeeded, or the owner vanished (promotion), or the leaving owner yielded to it while the runtime held its new connection's Synchronize back (queued)",
		api.Role_ROLE_RETIRED: "stopped (Leave)",
	},
	api.Role_ROLE_OWNER: {
		api.Role_ROLE_RETIRED: "yielded to a taker (in the taker's Synchronize, or, leaving, to one whose new connection the runtime holds back: queued), found the owner name taken by another instance (superseded), or stopped",
		api.Role_ROLE_STANDBY: "claimed in this Synchronize but was not ready: gave ownership back",
		api.Role_ROLE_JOINING: "claimed again (reconnected) after another instance took the owner name: claims as a newcomer",
	},
	api.Role_ROLE_RETIRED: {
		api.Role_ROLE_OWNER:   "its successor vanished or did not finish its claim in time (take-back), or its leaving successor yielded back to it while the runtime held its new connection's Synchronize back (queued)",
		api.Role_ROLE_JOINING: "its successor is leaving: claims back as a newcomer",
		api.Role_ROLE_STANDBY: "a claim of its own ended not owner after it retired meanwhile (it yielded while its ready ran, or Leave ran)",
	},
}

// recordRoleChange, if set, is told every role change (tests only: set
// before any coordinator starts).
var recordRoleChange func(c *Coordinator, from, to api.Role)

// transitionLocked is the one place the role changes. It checks the
// change against legal — an unlisted one is logged at error level and
// counted (illegalChanges), but made all the same, so a missing entry
// cannot change what the coordinator does — and records the outcome the
// change came to (o; "" for none), which a claim reports once it settles
// (see claimOutcome). Call with events and mu held.
func (c *Coordinator) transitionLocked(to api.Role, why string, o Outcome) {
	from := c.role
	if from != to && legal[from][to] == "" {
		c.illegal("role change", logrus.Fields{"from": roleName(from), "to": roleName(to), "reason": why})
	}
	if from != to || c.reason != why {
		fields := logrus.Fields{"role": roleName(to), "epoch": c.epoch, "from": roleName(from)}
		if o != "" {
			fields["outcome"] = string(o)
		}
		c.log.WithFields(fields).Infof("role change: %s", why)
	}
	c.role, c.reason, c.outcome = to, why, o
	if from != to && recordRoleChange != nil {
		recordRoleChange(c, from, to)
	}
	c.notifyLocked()
}

// transition changes the role outside an event: it waits for the event
// in progress to end (not at all once closing: then nothing changes).
// With watch, an instance that becomes standby starts watching the owner,
// so it can claim again when the owner leaves or dies.
func (c *Coordinator) transition(to api.Role, why string, o Outcome, watch bool) {
	if !c.holdEvents(c.ctx) {
		return // closing
	}
	c.mu.Lock()
	wasStandby := c.role == api.Role_ROLE_STANDBY
	c.transitionLocked(to, why, o)
	closed := c.stage == stageClosed
	c.mu.Unlock()
	c.releaseEvents()
	if watch && to == api.Role_ROLE_STANDBY && !wasStandby && !closed {
		c.wg.Add(1)
		go c.watchOwner()
	}
}

// IllegalChanges returns how many stage and role changes broke the rules
// of this file in this process (each was logged at error level): tests of
// other packages fail on a non-zero count (internal/testutil.Main).
func IllegalChanges() uint64 { return illegalChanges.Load() }
