// Package backoff spaces out retries: a delay that doubles from a minimum
// up to a maximum, waited for under a context.
package backoff

import (
	"context"
	"time"
)

// Backoff is an exponential retry delay. Not safe for concurrent use: each
// retry loop owns its own.
type Backoff struct {
	min, max, next time.Duration
}

// New returns a backoff that starts at min and doubles up to max.
func New(min, max time.Duration) *Backoff {
	return &Backoff{min: min, max: max, next: min}
}

// Wait sleeps for the current delay, then doubles it. It returns false if
// ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, b.max)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Next returns the current delay, for a retry scheduled rather than
// waited for, and doubles it.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}

// Reset starts the delay over at the minimum.
func (b *Backoff) Reset() { b.next = b.min }
