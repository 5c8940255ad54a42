package plugin

import (
	"sync"
	"time"
)

// settleDelay is how long a lifecycle catch-up leaves out of its
// comparison an object whose creation may still have been in the
// runtime's hands when it listed, while the list lacks it (see
// catchUpLifecycle): CRI-O sends CreateContainer before it creates the
// container with the OCI runtime and lists it (cri-o issue 10090), tens
// to hundreds of milliseconds. Past it, an object still not listed is
// read as gone (removed while no instance acted). A variable for the
// package's tests.
var settleDelay = 2 * time.Second

// unsettled holds the objects lifecycle catch-ups left out of their
// comparison because the runtime's list lacked them while their creation
// may not have been done (see catchUpLifecycle), and asks for the
// follow-up catch-up that compares them once settleDelay has passed.
// Every field is guarded by mu.
type unsettled struct {
	mu sync.Mutex
	// first is when each object (kind/id) was first left out.
	first map[string]time.Time
	// bound is the highest Seq bound of the catch-ups that left them
	// out: the follow-up compares the record's entries up to it.
	bound uint64
	// due is set when the follow-up is to be made (the timer fired), and
	// cleared by the catch-up that makes it (takeDue).
	due bool
	// timer is the pending follow-up's; fired is closed when it fires
	// (awaitDue), and replaced with the next timer.
	timer *time.Timer
	fired chan struct{}
}

// leaveOut reports whether a catch-up, with upper bound bound, leaves out
// of its comparison the object key, which the runtime's list lacks while
// its creation may be in flight (inFlight), or which an earlier catch-up
// left out: yes until settleDelay has passed since it was first left out.
// An object not left out is forgotten.
func (u *unsettled) leaveOut(key string, inFlight bool, bound uint64, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	first, known := u.first[key]
	if !known {
		if !inFlight {
			return false
		}
		if u.first == nil {
			u.first = map[string]time.Time{}
		}
		u.first[key], first = now, now
	}
	if now.Sub(first) >= settleDelay {
		delete(u.first, key)
		return false
	}
	u.bound = max(u.bound, bound)
	return true
}

// forget drops the objects not in keep (their entries are no longer the
// catch-ups' to compare: an event of theirs was acted on since, or they
// left the record), then, if objects are left, makes sure a follow-up
// catch-up is asked for (request) once the first of them has settled.
func (u *unsettled) forget(keep map[string]bool, now time.Time, request func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var next time.Time
	for k, t := range u.first {
		if !keep[k] {
			delete(u.first, k)
			continue
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if len(u.first) == 0 {
		u.bound = 0
		return
	}
	if u.timer != nil {
		return // the follow-up already asked for makes the next one
	}
	fired := make(chan struct{})
	u.fired = fired
	u.timer = time.AfterFunc(next.Add(settleDelay).Sub(now), func() {
		u.mu.Lock()
		u.due, u.timer = true, nil
		close(fired)
		u.mu.Unlock()
		request()
	})
}

// takeDue reports whether the follow-up catch-up is due, and the bound of
// the entries it compares; the caller makes it.
func (u *unsettled) takeDue() (due bool, bound uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	due, u.due = u.due, false
	return due, u.bound
}

// awaitDue waits, up to limit, until no object is left out or the
// follow-up catch-up is due: a stopping owner makes it before it leaves
// (it alone knows the objects). It reports whether one is due.
func (u *unsettled) awaitDue(limit time.Duration) bool {
	u.mu.Lock()
	fired, waiting := u.fired, u.timer != nil
	due := u.due
	u.mu.Unlock()
	if due || !waiting {
		return due
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-fired:
		return true
	case <-t.C:
		return false
	}
}
