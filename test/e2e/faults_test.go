//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
)

// Bounds of the failure scenarios.
const (
	// forcedTakeoverWithin bounds how long a newcomer takes to own the
	// plugin when the owner is stopped with SIGSTOP: it waits for the
	// owner's answer half the claim timeout (250 ms), then takes over.
	forcedTakeoverWithin = 3 * time.Second
	// killRecoveryBound bounds how long the node has no owner after one of
	// two instances is killed with SIGKILL in the middle of a switch.
	killRecoveryBound = time.Second
)

// TestStuckOwner: the owner is frozen (SIGSTOP, as a node under memory
// pressure or a debugger would) when the new version starts. The newcomer
// gets no answer to Yield, takes over by force within its claim timeout and
// serves; containerd drops the frozen instance at its first event (request
// timeout). When the old one thaws it finds the owner name changed and
// retires without acting.
func TestStuckOwner(t *testing.T) {
	n := newNode(t)
	v1, load := n.ownerUnderLoad(instanceOpts{version: "1.0.0"}, 2)
	time.Sleep(3 * time.Second)

	// Freeze v1 between two events so that the events are accounted for
	// exactly: while the owner is frozen nobody could act on them.
	if err := load.pauseWait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	v1.signal(syscall.SIGSTOP)
	t.Cleanup(func() { v1.signal(syscall.SIGCONT) })
	stopped := time.Now()
	v2 := n.start(instanceOpts{version: "2.0.0"})
	took, err := v2.waitOwner(forcedTakeoverWithin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("v1 frozen; %s owns %v after its start (%v after the freeze)", v2.id, took.Round(time.Millisecond),
		time.Since(stopped).Round(time.Millisecond))
	if st, err := v2.status(ctxFor(t, time.Second)); err != nil || !strings.Contains(st.GetReason(), "owner unresponsive") {
		t.Errorf("%s does not say it took over from an unresponsive owner: %v %v", v2.id, st.GetReason(), err)
	}

	resumed := time.Now()
	load.resume()
	time.Sleep(5 * time.Second)
	timeouts, _ := n.closedPlugins()
	if len(timeouts) != 1 {
		t.Errorf("containerd dropped %d instances for slowness, want exactly the frozen one:\n%s", len(timeouts), strings.Join(timeouts, "\n"))
	}

	// Thaw v1: it must not act again, and it learns that it was superseded.
	v1.signal(syscall.SIGCONT)
	thawed := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	for v1.role() != hapi.Role_ROLE_RETIRED {
		if time.Now().After(deadline) {
			t.Fatalf("%s still %v 10 s after SIGCONT", v1.id, v1.role())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s thawed and retired after %v", v1.id, time.Since(thawed).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	if err := v1.stop(exitWithin); err != nil {
		t.Error(err)
	}
	time.Sleep(2 * time.Second)
	load.stop()

	load.checkNoFailures(t)
	ledger := n.checkExactlyOnce(t, load, nil)
	if runs := instanceRuns(ledger); len(runs) != 2 || runs[0] != v1.id || runs[1] != v2.id {
		t.Errorf("ledger writers %v, want %s then %s", runs, v1.id, v2.id)
	}
	lat := load.latency([]window{{label: "first events after the freeze", from: resumed, to: resumed.Add(3 * time.Second)}})
	t.Logf("latency: %s", lat)
	if lat.maxInWindow > nriRequestTimeout+time.Second {
		t.Errorf("a call took %v after the freeze; containerd's request timeout is %v", lat.maxInWindow, nriRequestTimeout)
	}
}

// TestContainerdRestartDuringOverlap: containerd restarts while two
// instances are connected (v2 owner, v1 retired, before v1's SIGTERM). Both
// reconnect by themselves, resynchronize, keep their roles, and nothing is
// acted on twice: v2's Synchronize is handed no container (all stamped),
// and Reconcile is not called again.
func TestContainerdRestartDuringOverlap(t *testing.T) {
	n := newNode(t)
	e := n.e
	recordPath := n.dir + "/record"
	opts := func(v string) instanceOpts {
		// v2's Reconcile updates only the survivors: containerd v2.2.9 can
		// wedge every NRI-hooked CRI call when an unsolicited update hits a
		// container while the load stops it (its update holds the NRI lock
		// and the container's status while the exiting shim does not
		// answer: seen once in CI, 2026-12-04, 32 s with no CRI call
		// served); that race is not what this test is about.
		return instanceOpts{binary: "nri-reconcile", version: v, extra: []string{"-record", recordPath, "-update-prefix", "s-"}}
	}
	v1, load := n.ownerUnderLoad(opts("1.0.0"), 2)

	// Containers that live across the restart.
	var survivors []string
	var survPod *pod
	_, err := load.do("RunPodSandbox", "", func(ctx context.Context) (string, error) {
		p, err := e.cri.runPod(ctx, e.runID, "survivors")
		if err != nil {
			return "", err
		}
		survPod = p
		return p.id, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		id, err := load.do("CreateContainer", "", func(ctx context.Context) (string, error) { return e.cri.createContainer(ctx, survPod, "s") })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := load.do("StartContainer", id, func(ctx context.Context) (string, error) { return "", e.cri.startContainer(ctx, id) }); err != nil {
			t.Fatal(err)
		}
		survivors = append(survivors, id)
	}
	time.Sleep(2 * time.Second)

	v2 := n.start(opts("2.0.0"))
	v2.mustOwn(t, ownerWithin)
	time.Sleep(2 * time.Second)

	// Restart containerd between two events of the load.
	if err := load.pauseWait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	n.markLog()
	restart := time.Now()
	// containerd v2.2 does not restore its NRI state of pods after a
	// restart (internal/nri/nri.go: syncPlugin sets the state of containers
	// only; needsStopping/needsRemoval of a pod then say no), so pods that
	// live across the restart get no StopPodSandbox/RemovePodSandbox event.
	acrossRestart := load.podsAcross(restart)
	e.stopContainerd()
	if err := e.startContainerd(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n.connectedPlugins() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 instances reconnected 20 s after containerd restarted", n.connectedPlugins())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("containerd restarted; both instances reconnected and resynchronized %v after the restart began",
		time.Since(restart).Round(time.Millisecond))
	if r := v2.role(); r != hapi.Role_ROLE_OWNER {
		t.Errorf("%s is %v after the restart, want owner", v2.id, r)
	}
	if r := v1.role(); r != hapi.Role_ROLE_RETIRED {
		t.Errorf("%s is %v after the restart, want retired", v1.id, r)
	}
	load.resume()
	time.Sleep(3 * time.Second)
	for _, id := range survivors {
		load.do("StopContainer", id, func(ctx context.Context) (string, error) { return "", e.cri.stopContainer(ctx, id) })
		load.do("RemoveContainer", id, func(ctx context.Context) (string, error) { return "", e.cri.removeContainer(ctx, id) })
	}
	load.do("StopPodSandbox", survPod.id, func(ctx context.Context) (string, error) { return "", e.cri.stopPod(ctx, survPod.id) })
	load.do("RemovePodSandbox", survPod.id, func(ctx context.Context) (string, error) { return "", e.cri.removePod(ctx, survPod.id) })
	if err := v1.stop(exitWithin); err != nil {
		t.Error(err)
	}
	time.Sleep(2 * time.Second)
	load.stop()

	load.checkNoFailures(t)
	optional := map[string]bool{}
	for _, p := range acrossRestart {
		optional["StopPodSandbox "+p], optional["RemovePodSandbox "+p] = true, true
	}
	t.Logf("%d pods lived across the restart (containerd sends no stop/remove pod events for them)", len(acrossRestart))
	ledger := n.checkExactlyOnce(t, load, optional)
	if runs := instanceRuns(ledger); len(runs) != 2 {
		t.Errorf("ledger writers %v, want v1 then v2", runs)
	}
	n.checkNoTimeouts(t)

	// What the owners were handed: v1 at its start (no containers yet), v2
	// at the upgrade (no unstamped container; Reconcile with v1's), v2 after
	// the restart (none, and no second Reconcile).
	recs := readRecords(t, recordPath)
	var v2syncs, v2reconciles []record
	for _, r := range recs {
		if r.instance == v2.id {
			switch r.kind {
			case "sync":
				v2syncs = append(v2syncs, r)
			case "reconcile":
				v2reconciles = append(v2reconciles, r)
			}
		}
		if r.instance == v1.id && r.kind == "sync" && len(r.ids) > 0 {
			t.Errorf("%s's Synchronize was handed containers %v", v1.id, r.ids)
		}
	}
	if len(v2syncs) != 2 {
		t.Errorf("%s synchronized as owner %d times, want 2 (upgrade, restart): %v", v2.id, len(v2syncs), v2syncs)
	}
	for _, r := range v2syncs {
		if len(r.ids) > 0 {
			t.Errorf("%s's Synchronize was handed already stamped containers: %v", v2.id, r.ids)
		}
	}
	if len(v2reconciles) != 1 {
		t.Errorf("%s's Reconcile ran %d times, want once: %v", v2.id, len(v2reconciles), v2reconciles)
	}
	for _, id := range survivors {
		if len(v2reconciles) > 0 && !contains(v2reconciles[0].ids, id+":1.0.0") {
			t.Errorf("survivor %s (stamped by 1.0.0) not handed to %s's Reconcile: %v", id, v2.id, v2reconciles[0].ids)
		}
	}
}

// TestKillMidSwitch: one of the two instances is killed with SIGKILL in the
// middle of a switch: the old owner while the newcomer starts, registers or
// claims; the newcomer at the same moments (the old owner still owns, or
// yielded and must take ownership back); and the newcomer right after it
// took over. A survivor that ran before the switch (cases 1 and 2) owns the
// plugin within killRecoveryBound of the kill; a newcomer whose predecessor
// was killed while it started (case 0) owns within ownerWithin of its own
// start, as any new instance: its time without an owner includes its
// process start, which on a loaded machine alone exceeds a second (1.0-2.0 s
// at load average 8-50). Nothing is ever acted on twice. Events the killed owner was handling, or
// that came before the survivor noticed, may be missed: the design bounds
// them rather than excludes them.
func TestKillMidSwitch(t *testing.T) {
	n := newNode(t)
	cur, load := n.ownerUnderLoad(instanceOpts{version: "1.0.0"}, 2)
	time.Sleep(2 * time.Second)

	const rounds = 15
	var worst, worstNew time.Duration // survivor running before the switch; newcomer (case 0)
	var windows []window
	for i := 0; i < rounds; i++ {
		v := []string{"2.0.0", "1.0.0"}[i%2]
		next := n.start(instanceOpts{version: v})
		victim, survivor := cur, next
		var how string
		switch d := time.Duration(i/3*30) * time.Millisecond; i % 3 {
		case 0: // the old owner, while the newcomer starts and claims
			time.Sleep(d)
			how = fmt.Sprintf("the owner %s, %v after starting %s", cur.id, d, next.id)
		case 1: // the newcomer, before, while or after it claims
			time.Sleep(d + 20*time.Millisecond)
			victim, survivor = next, cur
			how = fmt.Sprintf("the newcomer %s, %v after its start", next.id, d+20*time.Millisecond)
		case 2: // the newcomer, right after it took over
			next.mustOwn(t, ownerWithin)
			victim, survivor = next, cur
			how = fmt.Sprintf("the newcomer %s, right after it took over", next.id)
		}
		killed := time.Now()
		victim.kill()
		bound, wait := killRecoveryBound, 3*killRecoveryBound
		if survivor == next { // case 0: bounded from its start, like any newcomer
			bound = ownerWithin - time.Since(next.started)
			wait = bound
		}
		if _, err := survivor.waitOwner(wait); err != nil {
			st, _ := survivor.status(ctxFor(t, time.Second))
			t.Fatalf("round %d: killed %s; %s did not become owner (status %v): %v", i, how, survivor.id, st, err)
		}
		rec := time.Since(killed)
		if survivor == next {
			worstNew = max(worstNew, rec)
		} else {
			worst = max(worst, rec)
		}
		windows = append(windows, window{label: "kill " + victim.id, from: killed, to: time.Now()})
		t.Logf("round %d: killed %s; %s owns %v later", i, how, survivor.id, rec.Round(time.Millisecond))
		if rec > bound {
			t.Errorf("round %d: no owner for %v after the kill, bound %v", i, rec, bound.Round(time.Millisecond))
		}
		cur = survivor
		time.Sleep(700 * time.Millisecond)
		if r := cur.role(); r != hapi.Role_ROLE_OWNER {
			t.Errorf("round %d: %s is %v, want owner", i, cur.id, r)
		}
	}
	time.Sleep(time.Second)
	load.stop()

	load.checkNoFailures(t)
	// A container created in the gap may lack a stamp; none may have two
	// (the runtime would have rejected it: a failed creation above).
	unstamped := 0
	signer := n.signer()
	for _, c := range load.ctrs {
		if c.specErr != nil {
			t.Errorf("container %s: %v", c.id, c.specErr)
			continue
		}
		sc := checkSpec(signer, c.id, c.spec)
		if sc.err != nil {
			unstamped++
		} else if pr := sc.problem(); pr != "" {
			t.Errorf("container %s: %s", c.id, pr)
		}
	}
	ledger := n.readLedger()
	rep := compareLedger(load.expected(), nil, ledger)
	t.Logf("ledger: %s; %d of %d containers unstamped", rep, unstamped, len(load.ctrs))
	if len(rep.duplicates)+len(rep.unexpected) > 0 {
		t.Errorf("events acted on twice or unknown:\n duplicated %v\n unexpected %v",
			first(rep.duplicates, 10), first(rep.unexpected, 10))
	}
	// Misses are allowed only for calls made while no live instance owned
	// the plugin: from the kill until the survivor owned it.
	var inGap []string
	for _, m := range rep.missed {
		calls := load.callsFor(m)
		ok := len(calls) > 0
		for _, c := range calls {
			ok = ok && c.overlaps(windows, 20*time.Millisecond)
		}
		if ok {
			inGap = append(inGap, m)
		} else {
			t.Errorf("missed outside the gap after a kill: %s (calls %+v)", m, calls)
		}
	}
	if len(inGap) > 0 {
		t.Logf("%d events missed while no instance owned the plugin (allowed), e.g. %v", len(inGap), first(inGap, 4))
	}
	t.Logf("worst time without an owner after a kill: %v with the survivor running (bound %v); %v with a newcomer starting (bound: owner within %v of its start)",
		worst.Round(time.Millisecond), killRecoveryBound, worstNew.Round(time.Millisecond), ownerWithin)
	n.checkNoTimeouts(t)
	t.Logf("latency: %s", load.latency(windows))
}

// record is one line of nri-reconcile's record file.
type record struct {
	kind, instance, version string
	ids                     []string
}

func readRecords(t *testing.T, path string) []record {
	t.Helper()
	var out []record
	for _, l := range strings.Split(readFile(path), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		out = append(out, record{kind: f[0], instance: f[1], version: f[2], ids: f[3:]})
	}
	return out
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
