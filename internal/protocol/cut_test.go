package protocol

import (
	"math/rand"
	"testing"
)

// TestCutActsOncePerEvent plays the per-event cut against a runtime that
// calls the connections in its chain one after another in a random order,
// with a newcomer that claims (becomes heir) at one event boundary and is
// appended to the chain some events later (the CRI-O / exit-stop gap), over
// streams with few distinct keys (consecutive events with the same key are
// the hard case), a newcomer that is never appended (its Synchronize
// failed), and chains of handovers. Every event must be acted on exactly
// once.
func TestCutActsOncePerEvent(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	d, err := OpenDir(t.TempDir(), "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for run := 0; run < 20000; run++ {
		const all = ^uint64(0)
		owner := d.newConnTag()
		d.updateCut(func(w *cutWord) bool { *w = cutWord{owner: owner}; return true })
		chain := []uint16{owner}
		events := 4 + rng.Intn(12)
		keys := 1 + rng.Intn(3)
		var pendingHeir uint16
		appendAt, failed := -1, false
		for i := 0; i < events; i++ {
			// Between events: maybe a newcomer claims, maybe it is appended.
			if pendingHeir == 0 && rng.Intn(3) == 0 {
				pendingHeir = d.newConnTag()
				d.setHeirEvents(all)
				d.updateCut(func(w *cutWord) bool { w.heir, w.heirSeen = pendingHeir, false; return true })
				appendAt, failed = i+rng.Intn(4), rng.Intn(5) == 0
			}
			if pendingHeir != 0 && i >= appendAt {
				if failed {
					// Its Synchronize failed: it gives the register back.
					tag := pendingHeir
					d.updateCut(func(w *cutWord) bool {
						if w.heir != tag {
							return false
						}
						w.heir, w.heirSeen = 0, false
						return true
					})
				} else {
					chain = append(chain, pendingHeir)
				}
				pendingHeir = 0
			}
			key := uint32(1 + rng.Intn(keys))
			acts := 0
			for _, j := range rng.Perm(len(chain)) {
				if dec := d.decide(chain[j], key, 1<<3); dec.Act {
					acts++
					d.finish(chain[j], key)
				}
			}
			if acts != 1 {
				w, _, _ := d.readCut()
				t.Fatalf("run %d, event %d (key %d, chain %v): acted on %d times; register %+v", run, i, key, chain, acts, w)
			}
		}
	}
}

// TestCutFailedNewcomerChangesNothing: a newcomer that claims and is never
// appended leaves every event to the owner.
func TestCutFailedNewcomerChangesNothing(t *testing.T) {
	d, err := OpenDir(t.TempDir(), "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, b := d.newConnTag(), d.newConnTag()
	d.updateCut(func(w *cutWord) bool { *w = cutWord{owner: a, heir: b}; return true })
	for i := 0; i < 10; i++ {
		if !d.decide(a, uint32(1+i%2), 1).Act {
			t.Fatalf("event %d: the owner did not act while its heir was never in the chain", i)
		}
	}
}

// TestEventKeyIsNeverZero: 0 records no event.
func TestEventKeyIsNeverZero(t *testing.T) {
	for i := uint32(0); i < 1<<12; i++ {
		if EventKey(i, "x") == 0 || EventKey(i, "") == 0 {
			t.Fatalf("kind %d: key 0", i)
		}
	}
}

// TestSyncedUnstampedList: the list adds what an owner synchronized and
// drops the containers that are gone; a missing list is empty.
func TestSyncedUnstampedList(t *testing.T) {
	d, err := OpenDir(t.TempDir(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ids, err := d.SyncedUnstamped(); err != nil || len(ids) != 0 {
		t.Fatalf("a new directory's list: %v, %v", ids, err)
	}
	all := func(string) bool { return true }
	if err := d.RecordSyncedUnstamped([]string{"a", "b"}, all); err != nil {
		t.Fatal(err)
	}
	if err := d.RecordSyncedUnstamped([]string{"c"}, func(id string) bool { return id != "a" }); err != nil {
		t.Fatal(err)
	}
	ids, err := d.SyncedUnstamped()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || !ids["b"] || !ids["c"] {
		t.Fatalf("list %v, want b and c", ids)
	}
}
