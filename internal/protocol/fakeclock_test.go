package protocol

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when a test advances it. It starts
// an hour after the real now, so a context with one of its deadlines that
// reaches a peer over ttrpc (which sends the deadline as a real timeout)
// never ends there first.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer  // pending
	changed chan struct{} // closed and replaced when a timer is added
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	d    time.Duration // how far ahead it was set
	ch   chan time.Time
	fire func() // instead of a send on ch (a context's deadline)
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now().Add(time.Hour), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	return c.add(d, nil)
}

// add sets a timer d ahead; one not ahead fires at once.
func (c *fakeClock) add(d time.Duration, fire func()) *fakeTimer {
	c.mu.Lock()
	t := &fakeTimer{c: c, at: c.now.Add(d), d: d, ch: make(chan time.Time, 1), fire: fire}
	if d <= 0 {
		now := c.now
		c.mu.Unlock()
		t.expire(now)
		return t
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return t
}

func (t *fakeTimer) expire(now time.Time) {
	if t.fire != nil {
		t.fire()
		return
	}
	t.ch <- now
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, p := range t.c.timers {
		if p == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock d forward and fires, in order, the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due, left []*fakeTimer
	for _, t := range c.timers {
		if t.at.After(now) {
			left = append(left, t)
		} else {
			due = append(due, t)
		}
	}
	c.timers = left
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.expire(now)
	}
}

// awaitTimer waits (10 s at most) until a timer set d ahead is pending.
func (c *fakeClock) awaitTimer(t *testing.T, d time.Duration) {
	t.Helper()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		c.mu.Lock()
		ch := c.changed
		for _, p := range c.timers {
			if p.d == d {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-limit.C:
			t.Fatalf("fake clock: no timer of %v was set", d)
		}
	}
}

func (c *fakeClock) WithDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	fc := &fakeCtx{Context: ctx, deadline: at}
	t := c.add(at.Sub(c.Now()), func() {
		fc.expired.Store(true)
		cancel()
	})
	return fc, func() {
		t.Stop()
		cancel()
	}
}

// fakeCtx is a context that ends at a fakeClock's deadline.
type fakeCtx struct {
	context.Context
	deadline time.Time
	expired  atomic.Bool
}

func (c *fakeCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *fakeCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// TestFakeClock: timers and deadlines fire when the clock is advanced to
// them, in order, and not before.
func TestFakeClock(t *testing.T) {
	c := newFakeClock()
	start := c.Now()
	ctx, cancel := c.WithDeadline(context.Background(), start.Add(time.Second))
	defer cancel()
	tm := c.NewTimer(2 * time.Second)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
		t.Fatalf("deadline %v, %v", d, ok)
	}
	c.Advance(999 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("ended before its deadline")
	}
	c.Advance(time.Millisecond)
	<-ctx.Done()
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("ended with %v", ctx.Err())
	}
	select {
	case <-tm.C():
		t.Fatal("2 s timer fired at 1 s")
	default:
	}
	c.Advance(time.Second)
	if at := <-tm.C(); !at.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("timer fired at %v", at.Sub(start))
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reports it pending")
	}
	past, cancelPast := c.WithDeadline(context.Background(), start)
	defer cancelPast()
	if past.Err() != context.DeadlineExceeded {
		t.Fatalf("a deadline already passed: %v", past.Err())
	}
}
