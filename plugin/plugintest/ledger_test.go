package plugintest

import (
	"testing"
	"time"
)

// An act belongs to the delivery of its kind and object that began last
// before it: of two deliveries of one UpdateContainer, the one no act
// follows is unacted, also when the other was acted on twice; an act
// before any delivery belongs to none.
func TestLedgerUnacted(t *testing.T) {
	l := NewLedger()
	l.Record(EventStopContainer, "c1", "i00", "1") // before any delivery
	now := time.Now().Round(0)
	d := []Delivery{
		{EventKey: EventKey{Event: EventUpdateContainer, ID: "c1", N: 1}, Start: now, End: now},
		{EventKey: EventKey{Event: EventStopContainer, ID: "c1", N: 1}, Start: now, End: now},
		{EventKey: EventKey{Event: EventUpdateContainer, ID: "c1", N: 2}, Start: now.Add(time.Hour), End: now.Add(time.Hour)},
	}
	l.Record(EventUpdateContainer, "c1", "i00", "1")
	l.Record(EventUpdateContainer, "c1", "i01", "2")
	got := l.Unacted(d)
	if len(got) != 2 || got[0].EventKey != d[1].EventKey || got[1].EventKey != d[2].EventKey {
		t.Fatalf("unacted %v, want the StopContainer and the second UpdateContainer", got)
	}
}

// The runtime gives every delivered event its delivery times, in order.
func TestRuntimeDeliveries(t *testing.T) {
	rt, err := StartRuntime(RuntimeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	before := time.Now().Round(0)
	if _, err := rt.RunPod(t.Context(), "p"); err != nil {
		t.Fatal(err)
	}
	d := rt.Deliveries()
	log := rt.IssuedLog()
	if len(d) != len(log) || len(d) == 0 {
		t.Fatalf("%d deliveries, %d issued", len(d), len(log))
	}
	for i := range d {
		if d[i].EventKey != log[i] || d[i].Start.Before(before) || d[i].End.Before(d[i].Start) ||
			i > 0 && d[i].Start.Before(d[i-1].End) {
			t.Fatalf("delivery %d: %+v (issued %v, test began %v)", i, d[i], log[i], before)
		}
	}
}
