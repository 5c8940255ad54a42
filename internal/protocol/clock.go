package protocol

import (
	"context"
	"time"
)

// Clock is the time source of a Coordinator's deadlines: claim windows,
// the take-back after a yield (takeBackGrace), a yielded owner's wait for
// its taker (watchSuccessor), the waits for the claim lock and for a
// take-back, and the retry of a claim that found the lock busy. Tests
// inject a fake one to drive those deadlines step by step; the default is
// the real time.
//
// Not on it: the pauses of polls and back-offs (they bound no step of the
// protocol), the per-event cut's timings and the gap it measures (their
// times are shared with other processes through the handover directory),
// and Leave's deadline (the caller's context).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// WithDeadline returns a copy of parent that ends at t (on this
	// clock) with context.DeadlineExceeded, or when parent ends, or when
	// cancel is called.
	WithDeadline(parent context.Context, t time.Time) (context.Context, context.CancelFunc)
}

// Timer is a timer of a Clock.
type Timer interface {
	// C returns the channel the timer's time is sent on.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether it was still pending.
	Stop() bool
}

// realClock is the real time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) WithDeadline(parent context.Context, t time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, t)
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// withTimeout is context.WithTimeout on clock.
func withTimeout(clock Clock, parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return clock.WithDeadline(parent, clock.Now().Add(d))
}
