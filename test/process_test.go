package test

// A rollout as Kubernetes plays it, with real processes: the in-process
// runtime (internal/sim, a real NRI unix socket) in the test process, the
// nri-audit sample plugin as separate processes that connect to it, and the
// nri-handover binary as the kubelet's exec probe. The test plays the
// DaemonSet controller (maxSurge: start the new pod, wait until its
// readiness probe passes, delete the old pod) and the kubelet (probes every
// probePeriod, SIGTERM, SIGKILL after the grace period), and checks the
// plugins' shared ledger file against the events the runtime delivered.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/internal/sim"
)

const (
	// probePeriod is the kubelet's periodSeconds, scaled down from its 1 s
	// minimum to keep the test short: probes run at once and then every
	// period, as the kubelet runs them.
	probePeriod = 200 * time.Millisecond
	// probeExecTimeout is the probe's timeoutSeconds: the kubelet gives up
	// on an exec probe that runs longer.
	probeExecTimeout = 2 * time.Second
	// probeAnswerTimeout is what the probe command gives the instance
	// (its --timeout), below probeExecTimeout.
	probeAnswerTimeout = "500ms"
	// gracePeriod is the pod's terminationGracePeriodSeconds, scaled down.
	gracePeriod = time.Second
	// scenarioTimeout bounds each scenario.
	scenarioTimeout = 45 * time.Second
)

// run runs the nri-handover binary with args, bounded as a kubelet exec
// probe is, and returns its exit code and output.
func (n *procNode) run(ctx context.Context, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, probeExecTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bins.handover, args...)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case ctx.Err() != nil:
		return -1, fmt.Sprintf("timed out after %v: %s", probeExecTimeout, out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	n.t.Fatalf("nri-handover %v: %v", args, err)
	return -1, ""
}

// probe runs `nri-handover probe kind` for an instance, as the pod's exec
// probe does.
func (n *procNode) probe(ctx context.Context, kind, id string) (int, string) {
	code, out := n.run(ctx, "probe", kind, "--dir", n.root, "--plugin", "audit", "--instance", id,
		"--timeout", probeAnswerTimeout)
	return code, strings.TrimSpace(out)
}

// waitProbe runs the probe every probePeriod, as the kubelet does, until
// it succeeds; it fails the test if the process exits first.
func (n *procNode) waitProbe(ctx context.Context, kind string, p *proc) string {
	n.t.Helper()
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	var last string
	for {
		code, line := n.probe(ctx, kind, p.id)
		if code == 0 {
			return line
		}
		last = line
		select {
		case <-tick.C:
		case <-p.done:
			n.t.Fatalf("%s exited (%v) while waiting for its %s probe; last: %s", p.id, p.state, kind, last)
		case <-ctx.Done():
			n.t.Fatalf("%s: %s probe never passed: %s", p.id, kind, last)
		}
	}
}

// checkHandover checks that every delivered event was acted on exactly
// once, by old up to one point of the stream and by new from there on.
func checkHandover(t *testing.T, a attribution, old, new *proc) {
	t.Helper()
	switched := -1
	for i, k := range a.log {
		acts := a.actors[i]
		if len(acts) != 1 {
			t.Errorf("event #%d %v acted on %d times: %v", i, k, len(acts), acts)
			continue
		}
		want := old
		if switched >= 0 || acts[0].instance == new.id {
			want = new
			if switched < 0 {
				switched = i
			}
		}
		if acts[0] != (actor{want.id, want.version}) {
			t.Errorf("event #%d %v acted on by %v, want %s (%s); the switch was at #%d",
				i, k, acts[0], want.id, want.version, switched)
		}
	}
	if switched <= 0 {
		t.Errorf("no switch from %s to %s in %d events (at #%d)", old.id, new.id, len(a.log), switched)
	}
	t.Logf("%d events, each acted on once: #0-#%d by %s, #%d-#%d by %s",
		len(a.log), switched-1, old.id, switched, len(a.log)-1, new.id)
}

// syncedAt is the position in the runtime's delivery log of the first
// Synchronize the runtime completed with a plugin after since (the
// runtime makes it under its event lock: every delivery ended before it or
// started after it): the number of events delivered before it.
func syncedAt(t *testing.T, n *procNode, since time.Time) int {
	t.Helper()
	for _, s := range n.rt.Syncs() {
		if !s.OK || s.At.Before(since) {
			continue
		}
		i := 0
		for _, d := range n.rt.Deliveries() {
			if d.Start.Before(s.At) {
				i++
			}
		}
		return i
	}
	t.Fatalf("no Synchronize after %v", since)
	return 0
}

// caughtUpKind reports whether a catch-up may hand an event of this kind
// to the author late (plugin.CatchingUp).
func caughtUpKind(e sim.Event) bool {
	switch e {
	case sim.EventStartContainer, sim.EventStopContainer, sim.EventRemoveContainer,
		sim.EventRunPodSandbox, sim.EventStopPodSandbox, sim.EventRemovePodSandbox:
		return true
	}
	return false
}

// regexpLine reports whether a line of out starts (after indentation)
// with a match of pattern.
func regexpLine(out, pattern string) bool {
	return regexp.MustCompile(`(?m)^\s*` + pattern).MatchString(out)
}

// ownerIs checks that the new pod is still ready and owner.sock leads to it.
func ownerIs(ctx context.Context, t *testing.T, n *procNode, p *proc) {
	t.Helper()
	if code, line := n.probe(ctx, "ready", p.id); code != 0 {
		t.Errorf("%s: readiness probe: exit %d: %s", p.id, code, line)
	}
	if !sameFile(t, ownerSocket(n.root), instanceSocket(n.root, p.id)) {
		t.Errorf("owner.sock does not lead to %s", p.id)
	}
}

// finishRollout ends a scenario in which no request timed out and every
// event was acted on once, by old up to one point and by newp from there
// on: it stops the stream's workers and the new pod, checks that, and logs
// how long the scenario took since begin.
func finishRollout(ctx context.Context, t *testing.T, n *procNode, s *stream, old, newp *proc, begin time.Time) {
	t.Helper()
	s.finish()
	stopPod(ctx, t, newp)
	checkRuntime(t, n, s, map[string]int{})
	checkHandover(t, n.attribute(t), old, newp)
	t.Logf("scenario took %v", time.Since(begin).Round(time.Millisecond))
}

func TestProcessRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs plugin processes")
	}
	bins := buildBinaries(t)

	// The DaemonSet's maxSurge rollout: the new pod starts next to the old
	// one, takes over inside its Synchronize, passes its readiness probe,
	// and only then is the old pod deleted (SIGTERM). Every event is acted
	// on exactly once, by the old version up to one point and by the new
	// one afterwards; nothing fails, nothing times out.
	t.Run("maxSurge rollout", func(t *testing.T) {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		defer cancel()
		n := newProcNode(t, bins, sim.Options{})
		old := n.startPlugin("audit-old", "1.0.0")
		if line := n.waitProbe(ctx, "ready", old); line != "ready: owner since epoch 1" {
			t.Fatalf("old pod ready: %q", line)
		}
		s := n.startStream(ctx, 2)
		s.waitEvents(ctx, t, 300)

		started := time.Now()
		newp := n.startPlugin("audit-new", "2.0.0")
		if line := n.waitProbe(ctx, "ready", newp); line != "ready: owner since epoch 2" {
			t.Fatalf("new pod ready: %q", line)
		}
		t.Logf("new pod ready %v after its start", time.Since(started).Round(time.Millisecond))
		// The old pod stays ready as the live fallback of the new owner (so
		// the DaemonSet controller keeps it for minReadySeconds), and live:
		// its liveness probe must not restart it while it is deleted.
		if code, line := n.probe(ctx, "ready", old.id); code != 0 || line != "ready: retired: live fallback for owner audit-new" {
			t.Errorf("old pod readiness: exit %d: %s", code, line)
		}
		if code, line := n.probe(ctx, "live", old.id); code != 0 || line != "live: retired: yielded to audit-new (2.0.0)" {
			t.Errorf("old pod liveness: exit %d: %s", code, line)
		}

		took := stopPod(ctx, t, old)
		t.Logf("old pod exited %v after SIGTERM", took.Round(time.Millisecond))
		s.waitEvents(ctx, t, n.rt.Stats().Events+300)
		ownerIs(ctx, t, n, newp)
		code, out := n.run(ctx, "status", "--dir", n.root, "audit")
		if code != 0 || !strings.Contains(out, "owner          audit-new, version 2.0.0, epoch 2") ||
			!strings.Contains(out, "last handover  audit-old (1.0.0) -> audit-new (2.0.0)") {
			t.Errorf("status: exit %d:\n%s", code, out)
		}
		finishRollout(ctx, t, n, s, old, newp, begin)
	})

	// Trident's seed scenario, a pod stuck terminating: the old owner is
	// frozen (SIGSTOP) while events flow, then the new pod starts. The
	// runtime drops the frozen instance after one request timeout; the
	// newcomer's Yield gets no answer within half its claim budget and it
	// takes over by force inside its Synchronize. Thawed, the old process
	// finds the owner name changed and acts on nothing.
	//
	// What may be missed, exactly: the events delivered from the freeze up
	// to the newcomer's Synchronize. The first of them is sent to the
	// frozen owner and times out (500 ms here), the rest find no instance
	// connected. The old process may still have acted on at most two of
	// them: one that completed between the test's snapshot and the signal,
	// and the one it was handling when it stopped (recorded, never
	// answered). Everything before the freeze is acted on once by the old
	// version, everything from the newcomer's Synchronize on once by the
	// new one, nothing twice. (In practice the window is small: the
	// newcomer's Synchronize waits, on the runtime's sync lock, for the CRI
	// operation stuck on the frozen owner, so what is missed is the event
	// that timed out and the rest of its operation, e.g. CreateContainer
	// and PostCreateContainer. The assertions hold for any window.)
	//
	// The newcomer's catch-up may hand, inside that Synchronize, a
	// lifecycle change of the window late (plugin.CatchingUp: the start of
	// a container whose StartContainer timed out at the frozen owner): the
	// audit sample records it as it records an event, so the ledger shows
	// the newcomer on a window event. The boundary is therefore the
	// newcomer's Synchronize as the runtime made it (Syncs, under the
	// event lock), not the newcomer's first act in the ledger.
	t.Run("old owner frozen", func(t *testing.T) {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		defer cancel()
		n := newProcNode(t, bins, sim.Options{RequestTimeout: 500 * time.Millisecond})
		old := n.startPlugin("audit-old", "1.0.0")
		n.waitProbe(ctx, "ready", old)
		s := n.startStream(ctx, 2)
		s.waitEvents(ctx, t, 300)

		frozenAt := len(n.rt.IssuedLog())
		old.signal(t, syscall.SIGSTOP)
		old.waitStopped(ctx, t)
		startedAt := len(n.rt.IssuedLog())
		started := time.Now()
		newp := n.startPlugin("audit-new", "2.0.0")
		n.waitProbe(ctx, "ready", newp)
		readyAt := len(n.rt.IssuedLog())
		t.Logf("new pod ready %v after its start, the old one frozen", time.Since(started).Round(time.Millisecond))

		// The kubelet's liveness probe of the frozen pod fails: it would
		// restart it after failureThreshold periods.
		if code, line := n.probe(ctx, "live", old.id); code != 1 ||
			!strings.HasPrefix(line, "not live: instance audit-old does not answer") {
			t.Errorf("liveness of the frozen pod: exit %d: %s", code, line)
		}
		code, out := n.run(ctx, "status", "--dir", n.root, "--timeout", probeAnswerTimeout)
		if code != 0 || !strings.Contains(out, "owner          audit-new") ||
			!regexpLine(out, `audit-old\s+not answering`) || !strings.Contains(out, "owner unresponsive") {
			t.Errorf("status with the old pod frozen: exit %d:\n%s", code, out)
		}

		// The runtime has dropped the frozen instance (one request timeout).
		if err := n.rt.WaitPlugins(ctx, 1); err != nil {
			t.Fatal(err)
		}

		// Thaw the old process: it reconnects, synchronizes and stays out
		// of the way.
		old.signal(t, syscall.SIGCONT)
		if err := n.rt.WaitPlugins(ctx, 2); err != nil {
			t.Fatalf("the thawed instance did not reconnect: %v", err)
		}
		if code, line := n.probe(ctx, "ready", old.id); code != 1 || !strings.HasPrefix(line, "not ready: ") {
			t.Errorf("thawed old pod readiness: exit %d: %s", code, line)
		}
		_, out = n.run(ctx, "status", "--dir", n.root)
		t.Logf("status after the thaw:\n%s", out)
		s.waitEvents(ctx, t, n.rt.Stats().Events+400) // delivered to both
		ownerIs(ctx, t, n, newp)
		took := stopPod(ctx, t, old)
		t.Logf("thawed old pod exited %v after SIGTERM", took.Round(time.Millisecond))
		s.waitEvents(ctx, t, n.rt.Stats().Events+100)
		ownerIs(ctx, t, n, newp)
		s.finish()
		stopPod(ctx, t, newp)

		checkRuntime(t, n, s, map[string]int{"10-audit": 1})
		a := n.attribute(t)
		syncAt := syncedAt(t, n, started)
		firstNew, missed, oldInWindow, caughtUp := -1, 0, 0, 0
		for i, k := range a.log {
			acts := a.actors[i]
			by := ""
			if len(acts) == 1 {
				by = acts[0].instance
			}
			switch {
			case len(acts) > 1:
				t.Errorf("event #%d %v acted on %d times: %v", i, k, len(acts), acts)
			case i < frozenAt:
				if len(acts) != 1 || acts[0] != (actor{old.id, old.version}) {
					t.Errorf("event #%d %v before the freeze acted on by %v, want %s once", i, k, acts, old.id)
				}
			case i >= syncAt:
				if len(acts) != 1 || acts[0] != (actor{newp.id, newp.version}) {
					t.Errorf("event #%d %v acted on by %v after the newcomer's Synchronize (#%d, ready at #%d), want %s once",
						i, k, acts, syncAt, readyAt, newp.id)
				} else if firstNew < 0 {
					firstNew = i
				}
			case by == newp.id:
				// In the window: only a catch-up's late hand.
				if !caughtUpKind(k.Event) || acts[0].version != newp.version || i < startedAt {
					t.Errorf("event #%d %v acted on by %v before its Synchronize (#%d): not a change a catch-up hands",
						i, k, acts, syncAt)
				}
				caughtUp++
			case by == old.id:
				oldInWindow++
			default:
				missed++
			}
		}
		if syncAt < startedAt || syncAt > readyAt || firstNew != syncAt {
			t.Errorf("newcomer's Synchronize at #%d, its first act at #%d, want both between its start (#%d) and its readiness (#%d)",
				syncAt, firstNew, startedAt, readyAt)
		}
		if oldInWindow > 2 {
			t.Errorf("the frozen owner acted on %d events after the freeze, want at most 2", oldInWindow)
		}
		t.Logf("%d events: #0-#%d acted on by %s; frozen at #%d; in #%d-#%d (new pod started at #%d) %d events missed, "+
			"%d acted on by the frozen owner, %d caught up by %s; #%d-#%d acted on by %s",
			len(a.log), frozenAt-1, old.id, frozenAt, frozenAt, syncAt-1, startedAt, missed, oldInWindow, caughtUp, newp.id,
			syncAt, len(a.log)-1, newp.id)
		t.Logf("scenario took %v", time.Since(begin).Round(time.Millisecond))
	})

	// The old pod ignores SIGTERM: the kubelet kills it after the grace
	// period. It was retired by the handover before it was deleted, so it
	// acts on nothing while it lingers; killed, it leaves its socket file,
	// which status shows as gone. Exactly once, no timeouts.
	t.Run("old pod ignores SIGTERM", func(t *testing.T) {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		defer cancel()
		n := newProcNode(t, bins, sim.Options{})
		old := n.startPlugin("audit-old", "1.0.0", "-ignore-sigterm")
		n.waitProbe(ctx, "ready", old)
		s := n.startStream(ctx, 2)
		s.waitEvents(ctx, t, 300)
		newp := n.startPlugin("audit-new", "2.0.0")
		n.waitProbe(ctx, "ready", newp)

		old.signal(t, syscall.SIGTERM)
		grace := time.NewTimer(gracePeriod) // the kubelet's grace period, not a stand-in for a condition
		select {
		case <-old.done:
			t.Fatalf("%s exited on SIGTERM (%v) though it ignores it", old.id, old.state)
		case <-grace.C:
		}
		if code, line := n.probe(ctx, "live", old.id); code != 0 {
			t.Errorf("old pod in its grace period: liveness exit %d: %s", code, line)
		}
		old.signal(t, syscall.SIGKILL)
		if st := old.wait(ctx, t); st.Success() || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("%s: %v, want killed", old.id, st)
		}
		s.waitEvents(ctx, t, n.rt.Stats().Events+300)
		ownerIs(ctx, t, n, newp)
		code, out := n.run(ctx, "status", "--dir", n.root)
		if code != 0 || !strings.Contains(out, "owner          audit-new") || !regexpLine(out, `audit-old\s+gone`) {
			t.Errorf("status after the kill: exit %d:\n%s", code, out)
		}
		if code, line := n.probe(ctx, "live", old.id); code != 1 || !strings.HasPrefix(line, "not live: instance audit-old is gone") {
			t.Errorf("liveness of the killed pod: exit %d: %s", code, line)
		}
		finishRollout(ctx, t, n, s, old, newp, begin)
	})
}
