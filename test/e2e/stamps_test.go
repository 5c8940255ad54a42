//go:build e2e

package e2e

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"
)

// reconcileShares is what test/e2e/cmd/nri-reconcile's Reconcile sets.
const reconcileShares = 777

// TestStampsSurviveUpgrade: stamps written by v1 are what v2 sees after
// the upgrade. The containers no instance stamped (created before the
// plugin) go to v1's Synchronize only; v1 records them, so to v2 they are
// v1's like the ones v1 stamped: v2's Synchronize gets none, and v2's
// Reconcile gets exactly v1's containers, once; Reconcile's updates reach
// the containers. A rollback to v1 reconciles nothing (v2's stamps are
// newer) and synchronizes nothing.
func TestStampsSurviveUpgrade(t *testing.T) {
	n := newNode(t)
	e := n.e
	ctx := ctxFor(t, 3*time.Minute)
	recordPath := n.dir + "/record"
	opts := func(v string) instanceOpts {
		return instanceOpts{binary: "nri-reconcile", version: v, extra: []string{"-record", recordPath}}
	}
	p, err := e.cri.runPod(ctx, e.runID, "stamps")
	if err != nil {
		t.Fatal(err)
	}
	run := func(count int) []string {
		t.Helper()
		var ids []string
		for i := 0; i < count; i++ {
			id, err := e.cri.createContainer(ctx, p, "c")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.cri.startContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return ids
	}

	unstamped := run(2) // before any plugin: nobody stamps them
	v1 := n.start(opts("1.0.0"))
	v1.mustOwn(t, ownerWithin)
	byV1 := run(3)
	v2 := n.start(opts("2.0.0"))
	v2.mustOwn(t, ownerWithin)
	if err := v1.stop(exitWithin); err != nil {
		t.Error(err)
	}
	waitRecord(t, recordPath, "reconcile-update", v2.id)
	byV2 := run(2)
	v1b := n.start(opts("1.0.0"))
	v1b.mustOwn(t, ownerWithin)
	if err := v2.stop(exitWithin); err != nil {
		t.Error(err)
	}
	waitRecord(t, recordPath, "reconcile", v1b.id)

	// v1's containers: stamped by it, or synchronized by it (created before
	// any plugin: recorded in the handover directory, they count as v1's).
	ofV1 := slices.Sorted(slices.Values(append(slices.Clone(byV1), unstamped...)))

	// The stamps as the containers carry them.
	signer := n.signer()
	for _, c := range []struct {
		ids     []string
		version string
	}{{unstamped, ""}, {byV1, "1.0.0"}, {byV2, "2.0.0"}} {
		for _, id := range c.ids {
			sp, err := e.cri.spec(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			st, err := signer.Verify(id, sp.Annotations)
			switch {
			case c.version == "" && err == nil:
				t.Errorf("container %s created before any plugin carries a stamp by %s", id, st.Version.Original())
			case c.version != "" && err != nil:
				t.Errorf("container %s: %v, want a stamp by %s", id, err, c.version)
			case c.version != "" && st.Version.Original() != c.version:
				t.Errorf("container %s stamped by %s, want %s", id, st.Version.Original(), c.version)
			}
			// Reconcile of v2 updated exactly v1's containers: those v1
			// stamped and those v1's Synchronize processed.
			shares := uint64(0)
			if sp.Linux.Resources.CPU.Shares != nil {
				shares = *sp.Linux.Resources.CPU.Shares
			}
			if got, want := shares == reconcileShares, slices.Contains(ofV1, id); got != want {
				t.Errorf("container %s (stamped by %q) has CPU shares %d; reconciled %v, want %v", id, c.version, shares, got, want)
			}
		}
	}

	// What each owner was handed.
	// The unstamped containers go to one Synchronize only, the first
	// owner's; later owners see them as v1's.
	want := map[string]struct{ sync, reconcile []string }{
		v1.id:  {unstamped, nil},
		v2.id:  {nil, suffixed(ofV1, ":1.0.0")},
		v1b.id: {nil, nil},
	}
	seen := map[string]int{}
	for _, r := range readRecords(t, recordPath) {
		w, ok := want[r.instance]
		if !ok {
			t.Errorf("record of an unknown instance: %+v", r)
			continue
		}
		switch r.kind {
		case "sync":
			if !slices.Equal(r.ids, w.sync) {
				t.Errorf("%s's Synchronize was handed %v, want %v", r.instance, r.ids, w.sync)
			}
		case "reconcile":
			if !slices.Equal(slices.Sorted(slices.Values(r.ids)), w.reconcile) {
				t.Errorf("%s's Reconcile was handed %v, want %v", r.instance, r.ids, w.reconcile)
			}
		case "reconcile-update":
			if len(r.ids) != 2 || r.ids[0] != "0" || r.ids[1] != `"<nil>"` {
				t.Errorf("%s's Reconcile updates: %v, want none failed", r.instance, r.ids)
			}
		}
		seen[r.instance+" "+r.kind]++
	}
	for id := range want {
		if seen[id+" sync"] != 1 || seen[id+" reconcile"] != 1 {
			t.Errorf("%s synchronized %d and reconciled %d times as owner, want once each",
				id, seen[id+" sync"], seen[id+" reconcile"])
		}
	}
	t.Logf("v1 stamped %d, v2 stamped %d, %d never stamped; v1's Synchronize got the %d unstamped, no later one did; "+
		"v2's Reconcile got exactly v1's and updated them", len(byV1), len(byV2), len(unstamped), len(unstamped))
	if err := e.cri.stopRemovePod(context.Background(), p.id); err != nil {
		t.Error(err)
	}
}

func suffixed(ids []string, s string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id+s)
	}
	return out
}

// waitRecord waits until instance wrote a record of kind (Reconcile runs
// in its own goroutine after the instance became owner).
func waitRecord(t *testing.T, path, kind, instance string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range readRecords(t, path) {
			if r.kind == kind && r.instance == instance {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s record of %s after 10 s", kind, instance)
}
