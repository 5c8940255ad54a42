//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Bounds the tests state and check.
const (
	// ownerWithin bounds how long a newly started instance may take to own
	// the plugin: process start, NRI registration and Synchronize, with the
	// claim inside it (500 ms at most by default).
	ownerWithin = 10 * time.Second
	// exitWithin bounds how long a retired instance may take to exit on
	// SIGTERM.
	exitWithin = 5 * time.Second
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestOnePlugin: one harnessed instance acts on every event exactly once;
// every container it created carries one valid stamp and the env var. It
// also checks the table of NRI events per CRI call that the other tests
// rely on.
func TestOnePlugin(t *testing.T) {
	n := newNode(t)
	e := n.e
	v1 := n.start(instanceOpts{version: "1.0.0"})
	took := v1.mustOwn(t, ownerWithin)
	t.Logf("%s owns the plugin %v after its start", v1.id, took.Round(time.Millisecond))

	ctx := ctxFor(t, 2*time.Minute)
	p, err := e.cri.runPod(ctx, e.runID, "one")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		id, err := e.cri.createContainer(ctx, p, "c")
		if err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		if err := e.cri.startContainer(ctx, id); err != nil {
			t.Fatalf("StartContainer: %v", err)
		}
		ids = append(ids, id)
	}
	if err := e.cri.updateContainer(ctx, ids[0], 300); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	signer := n.signer()
	for _, id := range ids {
		sp, err := e.cri.spec(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		c := checkSpec(signer, id, sp)
		if pr := c.problem(); pr != "" {
			t.Errorf("container %s: %s", id, pr)
			continue
		}
		if c.stamp.Instance != v1.id || c.stamp.Version.Original() != "1.0.0" {
			t.Errorf("container %s stamped by %s %s, want %s 1.0.0", id, c.stamp.Instance, c.stamp.Version.Original(), v1.id)
		}
		// A forged copy of this stamp on another container must not verify.
		if _, err := signer.Verify(ids[(slices.Index(ids, id)+1)%len(ids)], sp.Annotations); err == nil {
			t.Errorf("the stamp of %s verifies for another container", id)
		}
	}
	for _, id := range ids {
		if err := e.cri.stopContainer(ctx, id); err != nil {
			t.Fatalf("StopContainer: %v", err)
		}
		if err := e.cri.removeContainer(ctx, id); err != nil {
			t.Fatalf("RemoveContainer: %v", err)
		}
	}
	if err := e.cri.stopPod(ctx, p.id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := e.cri.removePod(ctx, p.id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}

	// The ledger, object by object, in order.
	want := map[string][]string{p.id: {"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"}}
	for i, id := range ids {
		evs := []string{"CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer"}
		if i == 0 {
			evs = append(evs, "UpdateContainer", "PostUpdateContainer")
		}
		want[id] = append(evs, "StopContainer", "RemoveContainer")
	}
	got := map[string][]string{}
	for _, l := range n.readLedger() {
		got[l.object] = append(got[l.object], l.event)
		if l.instance != v1.id || l.version != "1.0.0" {
			t.Errorf("ledger line by %s %s, want %s 1.0.0", l.instance, l.version, v1.id)
		}
	}
	for obj, evs := range want {
		if !slices.Equal(got[obj], evs) {
			t.Errorf("ledger for %s:\n got  %v\n want %v", obj, got[obj], evs)
		}
	}
	for obj, evs := range got {
		if _, ok := want[obj]; !ok {
			t.Errorf("ledger has events for an unknown object %s: %v", obj, evs)
		}
	}
	// The same table the load relies on.
	calls := map[string]int{}
	for _, evs := range nriEvents {
		for _, ev := range evs {
			calls[ev]++
		}
	}
	for obj, evs := range got {
		for _, ev := range evs {
			if calls[ev] == 0 {
				t.Errorf("event %s (%s) is missing from the table nriEvents", ev, obj)
			}
		}
	}
	if to, other := n.closedPlugins(); len(to)+len(other) > 0 {
		t.Errorf("containerd closed a plugin connection:\n%s", strings.Join(append(to, other...), "\n"))
	}
	if err := v1.stop(exitWithin); err != nil {
		t.Error(err)
	}
	st := fmt.Sprintf("%d containers, %d ledger lines", len(ids), len(n.readLedger()))
	t.Logf("one plugin: %s, all stamped once by %s", st, v1.id)
}

// switchDelayBound bounds how much longer than any call outside a switch a
// CRI call may take while an owner switch is in progress. The switch holds
// containerd's plugin-sync lock (every NRI-hooked CRI call waits for it)
// only for the newcomer's Synchronize, and the claim inside it is bounded
// by the claim timeout, 500 ms by default.
const switchDelayBound = 500 * time.Millisecond

// TestUpgradeUnderLoad plays a DaemonSet rollout (maxSurge 1) twice up and
// twice down, v1 -> v2 -> v1 -> v2 -> v1, while a client drives containers
// through CRI without pause: the new instance starts beside the old one,
// and once it owns the plugin (its readiness) the old one gets SIGTERM.
func TestUpgradeUnderLoad(t *testing.T) {
	n := newNode(t)
	const phase = 7 * time.Second
	cur, load := n.ownerUnderLoad(instanceOpts{version: "1.0.0"}, 3)
	time.Sleep(phase)

	var windows []window
	var ownerTimes, exitTimes, claims []time.Duration
	owners := []string{cur.id}
	for _, v := range []string{"2.0.0", "1.0.0", "2.0.0", "1.0.0"} {
		from := time.Now()
		next := n.start(instanceOpts{version: v})
		took, err := next.waitOwner(ownerWithin)
		if err != nil {
			t.Fatal(err)
		}
		sigterm := time.Now()
		if err := cur.stop(exitWithin); err != nil {
			t.Error(err)
		}
		exit := time.Since(sigterm)
		windows = append(windows, window{label: cur.id + "->" + next.id, from: from, to: time.Now()})
		ownerTimes, exitTimes = append(ownerTimes, took), append(exitTimes, exit)
		t.Logf("%s -> %s: new instance owns %v after its start; old one exited %v after SIGTERM",
			cur.id, next.id, took.Round(time.Millisecond), exit.Round(time.Millisecond))
		// The new owner's record of the handover: from whom, and how long
		// the claim inside its Synchronize took.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := next.status(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if h := st.GetLastHandover(); h.GetFromId() != cur.id || h.GetToId() != next.id {
			t.Errorf("%s's last handover %v, want from %s", next.id, h, cur.id)
		} else {
			claims = append(claims, time.Duration(h.GetDurationNano()))
		}
		cur = next
		owners = append(owners, cur.id)
		time.Sleep(phase)
	}
	load.stop()
	loadTime := load.ended.Sub(load.began)

	// No CRI call failed; in particular no container creation.
	load.checkNoFailures(t)
	created := load.count("CreateContainer")
	t.Logf("load: %d pods, %d containers in %v (%.1f containers/s)", load.pods, created,
		loadTime.Round(time.Second), float64(created)/loadTime.Seconds())
	if loadTime < 30*time.Second {
		t.Errorf("load ran %v, want at least 30 s", loadTime)
	}

	// Every container carried exactly one valid stamp and one env var;
	// every event acted on exactly once, by one instance at a time.
	ledger := n.checkExactlyOnce(t, load, nil)
	if runs := instanceRuns(ledger); !slices.Equal(runs, owners) {
		t.Errorf("the ledger was written by %v in turn, want each owner once, in order: %v", runs, owners)
	}

	// Nobody dropped by containerd for slowness. An instance that exited
	// after SIGTERM may be noticed as closed at the next event.
	closed := n.checkNoTimeouts(t)
	if len(closed) > len(windows) {
		t.Errorf("containerd closed %d plugin connections, more than the %d instances stopped:\n%s",
			len(closed), len(windows), strings.Join(closed, "\n"))
	}
	t.Logf("containerd: no instance dropped for slowness; %d connections of stopped instances noticed closed at the next event", len(closed))

	// No call delayed past the bound by a switch: no call during a switch
	// took longer than the slowest call outside switches plus the bound.
	lat := load.latency(windows)
	outside := load.maxOutside(windows)
	t.Logf("latency: %s; longest outside switches %v", lat, ms(outside))
	if lat.maxInWindow > outside+switchDelayBound {
		t.Errorf("a CRI call took %v during a switch (%s), more than the longest outside switches (%v) + %v",
			lat.maxInWindow, lat.maxInWindowOp, outside, switchDelayBound)
	}
	t.Logf("handovers: new instance owner after its start %v (max), claim inside Synchronize %v (max), old instance exit after SIGTERM %v (max)",
		maxDur(ownerTimes).Round(time.Millisecond), maxDur(claims).Round(time.Microsecond), maxDur(exitTimes).Round(time.Millisecond))
}
