package plugintest

import (
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
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

// The node's hook keeps the protocol's gap warning as a window from its
// "since" to the warning's time, a keyed in-doubt warning with its key,
// and leaves out the in-doubt warnings for the event the instance is
// handed (InDoubt names those).
func TestDeclarationsFromWarnings(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := &declarations{}
	log.AddHook(d)
	e := log.WithField("instance", "i01")
	since := time.Date(2026, 12, 2, 4, 0, 0, 123456789, time.UTC)
	e.WithFields(logrus.Fields{"since": since.Format(time.RFC3339Nano), "gap_ms": 1}).Warn("gap: no instance acted since the last event acted on")
	e.WithFields(logrus.Fields{"event_key": uint32(7), "from_conn": uint16(3)}).Warn("in doubt: the previous owner died inside a handler")
	e.WithField("this_event", true).Warn("in doubt: the owner did not finish its handler before the runtime went on")
	e.WithField("this_event", false).Warn("in doubt: the owner did not finish its handler before the runtime went on")
	e.Info("gap: not a warning")
	got := d.all()
	if len(got) != 3 {
		t.Fatalf("%d declarations, want 3: %+v", len(got), got)
	}
	if g := got[0]; !g.Gap || g.Instance != "i01" || !g.Start.Equal(since) || g.End.Before(since) {
		t.Errorf("gap %+v, want from %v", g, since)
	}
	if k := got[1]; k.Gap || !k.HasKey || k.Key != 7 {
		t.Errorf("keyed in doubt %+v", k)
	}
	if k := got[2]; k.Gap || k.HasKey || k.ID != "" {
		t.Errorf("key-less in doubt %+v", k)
	}
}
