package rollout

import (
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// classify puts a missed event in a gap window when its delivery began
// inside the window (bounds included), in doubt when a declaration names
// it (by name, by key, or, without either, as the event before the one in
// progress or else the one the runtime gave up on), and otherwise lists
// it as undeclared.
func TestClassify(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	del := func(ev plugintest.Event, id string, start, end int) plugintest.Delivery {
		return plugintest.Delivery{EventKey: plugintest.EventKey{Event: ev, ID: id, N: 1}, Start: at(start), End: at(end)}
	}
	all := []plugintest.Delivery{
		del(plugintest.EventRunPodSandbox, "p1", 0, 1),         // acted
		del(plugintest.EventCreateContainer, "c1", 10, 11),     // missed, at the window's start
		del(plugintest.EventStartContainer, "c1", 15, 16),      // missed, inside
		del(plugintest.EventStopContainer, "c1", 20, 21),       // missed, at its end
		del(plugintest.EventRemoveContainer, "c1", 21, 22),     // missed, just after: undeclared
		del(plugintest.EventCreateContainer, "c2", 30, 31),     // missed, declared by name
		del(plugintest.EventStartContainer, "c2", 40, 41),      // missed, declared by key
		del(plugintest.EventStopContainer, "c2", 50, 2050),     // missed, the runtime gave up on it
		del(plugintest.EventRemoveContainer, "c2", 2050, 2051), // acted
		del(plugintest.EventCreateContainer, "c3", 2060, 2061), // missed, before the one in progress
		del(plugintest.EventStartContainer, "c3", 2062, 2063),  // acted, in progress at a declaration
	}
	acted := map[int]bool{0: true, 8: true, 10: true}
	var unacted []plugintest.Delivery
	for i, d := range all {
		if !acted[i] {
			unacted = append(unacted, d)
		}
	}
	key, _ := plugintest.ProtocolKey(plugintest.EventStartContainer, "c2")
	decl := []plugintest.Declaration{
		{Instance: "i01", Gap: true, Start: at(10), End: at(20)},
		{Instance: "i02", Event: plugintest.EventCreateContainer, ID: "c2", Start: at(30), End: at(30)},
		{Instance: "i02", Key: key, HasKey: true, Start: at(41), End: at(41)},
		{Instance: "i03", Start: at(2062), End: at(2062)}, // the one before: c3's CreateContainer
		{Instance: "i03", Start: at(2062), End: at(2062)}, // that one taken: the one given up on
	}
	m := classify(unacted, all, decl, nil, nil, 1, 2*time.Second)
	if m.InGap != 3 || m.InDoubt != 4 || m.UndeclaredCount != 1 || !m.GapsCaptured {
		t.Fatalf("in gap %d, in doubt %d, undeclared %d (%v), gaps captured %v; want 3, 4, 1, true",
			m.InGap, m.InDoubt, m.UndeclaredCount, m.Undeclared, m.GapsCaptured)
	}
	if len(m.UndeclaredRuns) != 1 || len(m.Undeclared) != 1 {
		t.Fatalf("runs %v, undeclared %v", m.UndeclaredRuns, m.Undeclared)
	}
	// A gap the instances counted but whose window was not collected.
	if m := classify(unacted, all, decl, nil, nil, 2, 2*time.Second); m.GapsCaptured {
		t.Fatal("2 gaps counted, 1 window collected: GapsCaptured")
	}
	// Without the second key-less declaration the event given up on is
	// undeclared.
	if m := classify(unacted, all, decl[:4], nil, nil, 1, 2*time.Second); m.UndeclaredCount != 2 {
		t.Fatalf("undeclared %d, want 2: %v", m.UndeclaredCount, m.Undeclared)
	}
}

// A missed lifecycle change a catch-up handed is caught up, once (also a
// delivery after the hand: the runtime changed the state before it sent
// the event); a missed change not handed stays where the declarations put
// it.
func TestClassifyCaughtUpChanges(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	del := func(ev plugintest.Event, id string, start int) plugintest.Delivery {
		return plugintest.Delivery{EventKey: plugintest.EventKey{Event: ev, ID: id, N: 1}, Start: at(start), End: at(start + 1)}
	}
	all := []plugintest.Delivery{
		del(plugintest.EventStopContainer, "c1", 10),    // missed in the gap, handed at 50
		del(plugintest.EventRemoveContainer, "c1", 11),  // missed in the gap, handed at 50
		del(plugintest.EventStartContainer, "c2", 12),   // missed in the gap, not handed (c2 lived and died in it)
		del(plugintest.EventStopPodSandbox, "p1", 60),   // delivered after the hand at 50, not handed again
		del(plugintest.EventRemovePodSandbox, "p1", 20), // missed in the gap, handed at 50
	}
	decl := []plugintest.Declaration{{Instance: "i02", Gap: true, Start: at(5), End: at(40)}}
	changes := []plugintest.CaughtUpChange{
		{Instance: "i02", Event: plugintest.EventStopContainer, ID: "c1", At: at(50)},
		{Instance: "i02", Event: plugintest.EventRemoveContainer, ID: "c1", At: at(50)},
		{Instance: "i02", Event: plugintest.EventRemovePodSandbox, ID: "p1", At: at(50)},
		{Instance: "i02", Event: plugintest.EventStopPodSandbox, ID: "p1", At: at(50)},
	}
	m := classify(all, all, decl, nil, changes, 1, 2*time.Second)
	if m.CaughtUp != 4 || m.InGap != 1 || m.UndeclaredCount != 0 {
		t.Fatalf("caught up %d, in gap %d, undeclared %d; want 4, 1, 0", m.CaughtUp, m.InGap, m.UndeclaredCount)
	}
	// Two deliveries of one change, one hand: the second is not covered.
	twice := append(all, del(plugintest.EventStopContainer, "c1", 70))
	if m := classify(twice, twice, decl, nil, changes, 1, 2*time.Second); m.CaughtUp != 4 || m.UndeclaredCount != 1 {
		t.Fatalf("caught up %d, undeclared %d; want 4, 1", m.CaughtUp, m.UndeclaredCount)
	}
	if m := classify(all, all, decl, nil, nil, 1, 2*time.Second); m.CaughtUp != 0 || m.InGap != 4 {
		t.Fatalf("without changes: caught up %d, in gap %d; want 0, 4", m.CaughtUp, m.InGap)
	}
}

// An event declared in doubt counts as in doubt also inside a gap window
// (it reached the owner; the window's other events reached nobody), and
// a key-less declaration made while a missed delivery is in progress
// covers that delivery (a promotion that found another instance's standby
// mark of the event being delivered).
func TestClassifyInDoubtBeforeGapWindows(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	del := func(ev plugintest.Event, id string, start, end int) plugintest.Delivery {
		return plugintest.Delivery{EventKey: plugintest.EventKey{Event: ev, ID: id, N: 1}, Start: at(start), End: at(end)}
	}
	all := []plugintest.Delivery{
		del(plugintest.EventRunPodSandbox, "p1", 0, 1),     // acted
		del(plugintest.EventCreateContainer, "c1", 10, 12), // missed, in progress at the key-less declaration
		del(plugintest.EventStartContainer, "c1", 13, 14),  // missed, declared by nothing but the window
		del(plugintest.EventStopContainer, "c1", 15, 16),   // missed, declared by key too
	}
	key, _ := plugintest.ProtocolKey(plugintest.EventStopContainer, "c1")
	decl := []plugintest.Declaration{
		{Instance: "i01", Gap: true, Start: at(5), End: at(20)},
		{Instance: "i02", Start: at(11), End: at(11)},
		{Instance: "i01", Key: key, HasKey: true, Start: at(20), End: at(20)},
	}
	m := classify(all[1:], all, decl, nil, nil, 1, 2*time.Second)
	if m.InDoubt != 2 || m.InGap != 1 || m.UndeclaredCount != 0 {
		t.Fatalf("in doubt %d, in gap %d, undeclared %d; want 2, 1, 0", m.InDoubt, m.InGap, m.UndeclaredCount)
	}
	if m.Windows[0].Missed != 1 {
		t.Fatalf("the window holds %d missed events, want 1", m.Windows[0].Missed)
	}
}
