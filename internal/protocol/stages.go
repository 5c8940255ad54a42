package protocol

import (
	"fmt"
	"sync/atomic"

	"github.com/sirupsen/logrus"
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
