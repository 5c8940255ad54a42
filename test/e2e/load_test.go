//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// nriEvents are the NRI events containerd v2.2 sends to a plugin for each
// CRI call the load makes (TestOnePlugin checks this table against a real
// ledger). StopContainer's event comes either from the call itself or from
// containerd's task-exit handler, whichever runs first; it is sent once.
var nriEvents = map[string][]string{
	"RunPodSandbox":            {"RunPodSandbox"},
	"CreateContainer":          {"CreateContainer", "PostCreateContainer"},
	"StartContainer":           {"StartContainer", "PostStartContainer"},
	"UpdateContainerResources": {"UpdateContainer", "PostUpdateContainer"},
	"StopContainer":            {"StopContainer"},
	"RemoveContainer":          {"RemoveContainer"},
	"StopPodSandbox":           {"StopPodSandbox"},
	"RemovePodSandbox":         {"RemovePodSandbox"},
}

// call is one CRI call the load made.
type call struct {
	op, obj string
	start   time.Time
	dur     time.Duration
	err     error
}

// created is a container the load created and inspected while it ran.
type created struct {
	id      string
	spec    *runtimeSpec
	specErr error
}

// loadGen drives pods and containers through their whole life cycle, as
// fast as containerd takes them, from a few goroutines.
type loadGen struct {
	c            *criClient
	cgroupParent string
	workers      int
	perPod       int // containers per pod before the pod is replaced

	mu    sync.Mutex
	calls []call
	ctrs  []*created
	pods  int

	stopping atomic.Bool

	// gate guards paused and inFlight; gateCond signals their changes.
	// inFlight counts CRI calls and the workers' units of work (a pod's
	// creation, a container's whole life cycle, a pod's removal); a worker
	// waits at the gate while paused before it starts a pod or a life cycle.
	gate     sync.Mutex
	gateCond *sync.Cond
	paused   bool
	inFlight int
	wg       sync.WaitGroup
	stopOnce sync.Once
	began    time.Time
	ended    time.Time
}

func newLoad(e *env, workers int) *loadGen {
	l := &loadGen{c: e.cri, cgroupParent: e.runID, workers: workers, perPod: 5}
	l.gateCond = sync.NewCond(&l.gate)
	return l
}

func (l *loadGen) start() {
	l.began = time.Now()
	for w := 0; w < l.workers; w++ {
		l.wg.Add(1)
		go l.worker(w)
	}
}

// stop lets every worker finish the life cycle it is in (so every pod and
// container it created is removed again) and waits for them.
func (l *loadGen) stop() {
	l.stopOnce.Do(func() {
		l.stopping.Store(true)
		l.gate.Lock()
		l.gateCond.Broadcast() // workers held by a pause finish too
		l.gate.Unlock()
		l.wg.Wait()
		l.ended = time.Now()
	})
}

// pause holds the workers between two container life cycles; resume lets
// them go on. pauseWait returns once no call and no life cycle is in
// progress, so that no event is delivered until resume.
func (l *loadGen) pause() {
	l.gate.Lock()
	l.paused = true
	l.gate.Unlock()
}

func (l *loadGen) resume() {
	l.gate.Lock()
	l.paused = false
	l.gateCond.Broadcast()
	l.gate.Unlock()
}

func (l *loadGen) pauseWait(timeout time.Duration) error {
	l.pause()
	timer := time.AfterFunc(timeout, func() {
		l.gate.Lock()
		l.gateCond.Broadcast() // wake the wait below to see the deadline
		l.gate.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	l.gate.Lock()
	defer l.gate.Unlock()
	for l.inFlight > 0 {
		if !time.Now().Before(deadline) {
			return fmt.Errorf("load did not pause within %v", timeout)
		}
		l.gateCond.Wait()
	}
	return nil
}

// enter counts a call or a unit of work in flight; with hold, it first
// waits while the load is paused (unless it is stopping). exit ends it.
func (l *loadGen) enter(hold bool) {
	l.gate.Lock()
	for hold && l.paused && !l.stopping.Load() {
		l.gateCond.Wait()
	}
	l.inFlight++
	l.gate.Unlock()
}

func (l *loadGen) exit() {
	l.gate.Lock()
	l.inFlight--
	l.gateCond.Broadcast()
	l.gate.Unlock()
}

// do runs one CRI call and records it.
func (l *loadGen) do(op, obj string, f func(ctx context.Context) (string, error)) (string, error) {
	l.enter(false)
	defer l.exit()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	id, err := f(ctx)
	d := time.Since(start)
	if obj == "" {
		obj = id
	}
	l.mu.Lock()
	l.calls = append(l.calls, call{op: op, obj: obj, start: start, dur: d, err: err})
	l.mu.Unlock()
	return id, err
}

func (l *loadGen) worker(w int) {
	defer l.wg.Done()
	for !l.stopping.Load() {
		var p *pod
		l.enter(true)
		_, err := l.do("RunPodSandbox", "", func(ctx context.Context) (string, error) {
			var err error
			p, err = l.c.runPod(ctx, l.cgroupParent, fmt.Sprintf("load%d", w))
			if err != nil {
				return "", err
			}
			return p.id, nil
		})
		l.exit()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		l.pods++
		l.mu.Unlock()
		for k := 0; k < l.perPod && !l.stopping.Load(); k++ {
			l.enter(true)
			l.lifecycle(p, k)
			l.exit()
		}
		l.enter(false)
		l.do("StopPodSandbox", p.id, func(ctx context.Context) (string, error) { return "", l.c.stopPod(ctx, p.id) })
		l.do("RemovePodSandbox", p.id, func(ctx context.Context) (string, error) { return "", l.c.removePod(ctx, p.id) })
		l.exit()
	}
}

// lifecycle creates, starts, inspects, updates, stops and removes one
// container.
func (l *loadGen) lifecycle(p *pod, k int) {
	id, err := l.do("CreateContainer", "", func(ctx context.Context) (string, error) {
		return l.c.createContainer(ctx, p, "c")
	})
	if err != nil {
		return
	}
	rec := &created{id: id}
	l.mu.Lock()
	l.ctrs = append(l.ctrs, rec)
	l.mu.Unlock()
	l.do("StartContainer", id, func(ctx context.Context) (string, error) { return "", l.c.startContainer(ctx, id) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	rec.spec, rec.specErr = l.c.spec(ctx, id)
	cancel()
	l.do("UpdateContainerResources", id, func(ctx context.Context) (string, error) {
		return "", l.c.updateContainer(ctx, id, int64(256+k))
	})
	l.do("StopContainer", id, func(ctx context.Context) (string, error) { return "", l.c.stopContainer(ctx, id) })
	l.do("RemoveContainer", id, func(ctx context.Context) (string, error) { return "", l.c.removeContainer(ctx, id) })
}

// expected returns the NRI events the successful calls must have caused,
// as "<event> <object>" with their count.
func (l *loadGen) expected() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, c := range l.calls {
		if c.err != nil {
			continue
		}
		for _, ev := range nriEvents[c.op] {
			out[ev+" "+c.obj]++
		}
	}
	return out
}

// failures returns the failed calls by operation.
func (l *loadGen) failures() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for _, c := range l.calls {
		if c.err != nil {
			out[c.op] = append(out[c.op], c.err.Error())
		}
	}
	return out
}

// callsFor returns the calls that caused the event "<event> <object>".
func (l *loadGen) callsFor(key string) []call {
	ev, obj, _ := strings.Cut(key, " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []call
	for _, c := range l.calls {
		if c.obj == obj && c.err == nil && contains(nriEvents[c.op], ev) {
			out = append(out, c)
		}
	}
	return out
}

// podsAcross returns the pods that were running at t: run before it,
// stopped (if at all) after it.
func (l *loadGen) podsAcross(t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ran, stopped := map[string]bool{}, map[string]bool{}
	for _, c := range l.calls {
		if c.err != nil {
			continue
		}
		switch {
		case c.op == "RunPodSandbox" && c.start.Before(t):
			ran[c.obj] = true
		case c.op == "StopPodSandbox" && c.start.Add(c.dur).Before(t):
			stopped[c.obj] = true
		}
	}
	var out []string
	for p := range ran {
		if !stopped[p] {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (l *loadGen) count(op string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if c.op == op && c.err == nil {
			n++
		}
	}
	return n
}

// window is a stretch of time in which a switch of owner happened.
type window struct {
	label    string
	from, to time.Time
}

// latency summarizes the calls' durations, in all and for the calls that
// overlapped one of the windows.
type latency struct {
	n                  int
	p50, p90, p99, max time.Duration
	maxOp              string
	inWindows          int
	maxInWindow        time.Duration
	maxInWindowOp      string
}

func (l *loadGen) latency(windows []window) latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	var r latency
	for _, c := range l.calls {
		if c.err != nil {
			continue
		}
		ds = append(ds, c.dur)
		if c.dur > r.max {
			r.max, r.maxOp = c.dur, c.op
		}
		end := c.start.Add(c.dur)
		for _, w := range windows {
			if c.start.Before(w.to) && end.After(w.from) {
				r.inWindows++
				if c.dur > r.maxInWindow {
					r.maxInWindow, r.maxInWindowOp = c.dur, c.op+" during "+w.label
				}
				break
			}
		}
	}
	r.n = len(ds)
	r.p50, r.p90, r.p99 = percentile(ds, 50), percentile(ds, 90), percentile(ds, 99)
	return r
}

// overlaps reports whether c overlaps one of the windows, widened by slack.
func (c call) overlaps(windows []window, slack time.Duration) bool {
	end := c.start.Add(c.dur)
	for _, w := range windows {
		if c.start.Before(w.to.Add(slack)) && end.After(w.from.Add(-slack)) {
			return true
		}
	}
	return false
}

// maxOutside is the longest successful call that overlapped none of the
// windows.
func (l *loadGen) maxOutside(windows []window) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, c := range l.calls {
		if c.err == nil && !c.overlaps(windows, 0) {
			m = max(m, c.dur)
		}
	}
	return m
}

func (r latency) String() string {
	return fmt.Sprintf("%d calls: p50 %v, p90 %v, p99 %v, max %v (%s); %d calls overlapped a switch, longest %v (%s)",
		r.n, ms(r.p50), ms(r.p90), ms(r.p99), ms(r.max), r.maxOp, r.inWindows, ms(r.maxInWindow), r.maxInWindowOp)
}

func ms(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := (p*len(s) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

func summarizeFailures(f map[string][]string) string {
	var parts []string
	for op, errs := range f {
		parts = append(parts, fmt.Sprintf("%s: %d failed (%s)", op, len(errs), strings.Join(first(errs, 3), "; ")))
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}
