package rollout

import (
	"fmt"
	"sort"
	"time"

	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// Missed sorts the events no instance acted on by whether the instances
// declared them (the promise: nothing lost without saying so).
type Missed struct {
	// InGap counts the missed events, not declared in doubt, delivered
	// inside a declared gap window: the runtime began delivering them at
	// or after the window's start (the protocol's own record of the last
	// act before it) and at or before its end (read when the takeover was
	// logged, after the protocol read the takeover time). No tolerance is
	// needed: both bounds are on the safe side of what the protocol
	// declared.
	InGap int
	// InGapEvents lists (first 20) the events counted in InGap, with
	// their delivery times and window.
	InGapEvents []string
	// CaughtUp counts the missed container events (not declared in
	// doubt) delivered before their container was handed to an author as
	// unprocessed (a catch-up, plugintest.Node.CatchUps): the author
	// learned of the container afterwards, in its current state. It also
	// counts the missed lifecycle changes (StartContainer, StopContainer,
	// RemoveContainer, StopPodSandbox, RemovePodSandbox) a catch-up handed
	// to an author (plugintest.Node.CaughtUpChanges), each covering one
	// missed delivery of its event on its object (the delivery may come
	// after the hand: the runtime changed the state the catch-up saw
	// before it sent the event, and the harness did not hand it again); a change
	// handed more often than it was missed is a duplicate
	// (plugintest.Result.ChangesTwice), never counted here twice.
	CaughtUp int
	// InDoubt counts the other missed events declared in doubt: by name
	// (the instance that took over was handed the event), by the
	// protocol's key of the event, or, for a declaration that names
	// neither (a takeover from an owner the runtime gave up on), the
	// event it was declared for as classify works it out.
	InDoubt int
	// Undeclared lists the missed events that fall in no declared window
	// and were not declared in doubt, with their delivery times and the
	// nearest gap windows.
	Undeclared []string
	// NotActedAgain lists (first 20) the missed events an instance
	// declared in doubt by name saying it acts on them, or, with
	// plugin.WithAtLeastOnce, that it could act on again, and that no
	// instance acted on or handed late (see checkActedAgain).
	// NotActedAgainCount counts them all (they are in InDoubt too).
	NotActedAgain      []string
	NotActedAgainCount int
	// UndeclaredCount is len(Undeclared) before truncation.
	UndeclaredCount int
	// UndeclaredRuns groups the undeclared misses into runs of
	// consecutive deliveries (no delivery acted on or declared between
	// them), each with its first and last delivery and its size.
	UndeclaredRuns []string
	// Windows lists the declared gap windows.
	Windows []GapWindow
	// GapsCaptured tells whether a window was collected for every gap the
	// instances counted (Stats.Gaps); if not, the accounting is incomplete
	// and the run cannot show that every miss was declared.
	GapsCaptured bool

	// The in-doubt declarations, for the events acted on again
	// (Config.AtLeastOnce): by name, by key, and how many key-less ones
	// no missed event took.
	named       map[plugintest.EventKey]bool
	keys        map[uint32]bool
	keylessLeft int
	// namedMisses are the missed events declared in doubt by name (an
	// instance the runtime called for the event told its author).
	namedMisses []namedMiss
}

// namedMiss is a missed event declared in doubt by name, and whether the
// declaring instance said it acts on it.
type namedMiss struct {
	plugintest.Delivery
	acting bool
}

// checkActedAgain fills NotActedAgain: the missed events declared in
// doubt by name whose declaring instance said it acts on them, and, with
// atLeastOnce (every instance acts on an event in doubt again), every
// such event the harness can hand again: all but a creation (past
// adjusting: its container is handed to a catch-up as unprocessed) and a
// validation.
func (m *Missed) checkActedAgain(atLeastOnce bool) {
	for _, d := range m.namedMisses {
		again := d.Event != plugintest.EventCreateContainer && d.Event != plugintest.EventValidateContainerAdjustment
		if !d.acting && !(atLeastOnce && again) {
			continue
		}
		m.NotActedAgainCount++
		if len(m.NotActedAgain) < 20 {
			m.NotActedAgain = append(m.NotActedAgain, fmt.Sprintf("%s delivered %s-%s: declared in doubt by name, and acted on again by no instance",
				d.EventKey, stamp(d.Start), stamp(d.End)))
		}
	}
}

// GapWindow is one declared gap: no instance acted from Start to End.
type GapWindow struct {
	Instance   string
	Start, End time.Time
	// Missed counts the missed events classify put in this window (the
	// first window containing their delivery's start).
	Missed int
}

// classify sorts the unacted deliveries against the declarations and the
// catch-ups; gaps is the sum of the instances' Stats.Gaps; all is every
// delivery, in order; requestTimeout is the runtime's.
func classify(unacted, all []plugintest.Delivery, decl []plugintest.Declaration, catchUps []plugintest.CatchUp,
	changes []plugintest.CaughtUpChange, gaps int, requestTimeout time.Duration) Missed {
	var m Missed
	// The lifecycle changes handed late, by event and object, in the
	// order handed: each covers one missed delivery of its key.
	late := map[plugintest.EventKey][]time.Time{}
	for _, c := range changes {
		k := plugintest.EventKey{Event: c.Event, ID: c.ID}
		late[k] = append(late[k], c.At)
	}
	handed := map[string]time.Time{} // container -> first handed
	for _, c := range catchUps {
		if t, ok := handed[c.ID]; !ok || c.At.Before(t) {
			handed[c.ID] = c.At
		}
	}
	type name = plugintest.EventKey
	named := map[name]bool{}
	acting := map[name]bool{} // named, saying it acts on it
	keys := map[uint32]bool{}
	m.named, m.keys = named, keys
	var keyless []time.Time
	for _, d := range decl {
		switch {
		case d.Gap:
			m.Windows = append(m.Windows, GapWindow{Instance: d.Instance, Start: d.Start, End: d.End})
		case d.ID != "":
			named[name{Event: d.Event, ID: d.ID}] = true
			acting[name{Event: d.Event, ID: d.ID}] = acting[name{Event: d.Event, ID: d.ID}] || d.Acting
		case d.HasKey:
			keys[d.Key] = true
		default:
			keyless = append(keyless, d.End)
		}
	}
	m.GapsCaptured = len(m.Windows) == gaps
	sort.Slice(m.Windows, func(i, j int) bool { return m.Windows[i].Start.Before(m.Windows[j].Start) })
	missed := map[plugintest.EventKey]bool{}
	for _, d := range unacted {
		missed[d.EventKey] = true
	}
	// A key-less in-doubt declaration is a takeover from an owner the
	// runtime gave up on (rule 3 or 4 of the protocol's cut) by an
	// instance that was handed the event after the one in doubt, or a
	// promotion that found another instance's standby mark: it covers the
	// delivery in progress when it was declared if no instance acted on
	// that one (the promotion's case: the marked event), else the one
	// immediately before. If that one was acted on (the taker was not in
	// the runtime's chain when the runtime gave up: it was reconnecting), it
	// covers the event the runtime gave up on: the latest delivery before
	// the declaration that no instance acted on and that lasted at least
	// the request timeout. Each declaration covers one event.
	coveredByKeyless := map[plugintest.EventKey]bool{}
	sort.Slice(keyless, func(i, j int) bool { return keyless[i].Before(keyless[j]) })
	uncovered := func(d plugintest.Delivery) bool { return missed[d.EventKey] && !coveredByKeyless[d.EventKey] }
	for _, at := range keyless {
		cur := sort.Search(len(all), func(i int) bool { return all[i].Start.After(at) }) - 1 // in progress
		if cur >= 0 && uncovered(all[cur]) {
			// The declaration came outside the declaring connection's
			// own call (a promotion that found a standby's mark of the
			// event the runtime is delivering, or has just delivered,
			// to nobody acting): that event.
			coveredByKeyless[all[cur].EventKey] = true
			continue
		}
		if cur >= 1 && uncovered(all[cur-1]) {
			coveredByKeyless[all[cur-1].EventKey] = true
			continue
		}
		for i := cur - 1; i >= 0; i-- {
			if d := all[i]; uncovered(d) && d.End.Sub(d.Start) >= requestTimeout {
				coveredByKeyless[d.EventKey] = true
				break
			}
		}
	}
	m.keylessLeft = len(keyless) - len(coveredByKeyless)
	var run []plugintest.Delivery
	endRun := func() {
		if len(run) == 0 {
			return
		}
		a, b := run[0], run[len(run)-1]
		m.UndeclaredRuns = append(m.UndeclaredRuns, fmt.Sprintf("%d undeclared from %s (%s) to %s (%s): %s",
			len(run), a.EventKey, stamp(a.Start), b.EventKey, stamp(b.Start), m.nearest(a.Start)))
		run = nil
	}
	for _, d := range all {
		if !missed[d.EventKey] {
			endRun()
			continue
		}
		if t, ok := handed[d.ID]; ok && !d.Event.IsPodEvent() && d.Start.Before(t) {
			m.CaughtUp++
			endRun()
			continue
		}
		if k := (plugintest.EventKey{Event: d.Event, ID: d.ID}); len(late[k]) != 0 {
			// Before or after the delivery: the runtime may change an
			// object's state (as a Synchronize lists it) before it sends
			// the event, which then finds the change handed (the harness
			// does not hand it again).
			late[k] = late[k][1:]
			m.CaughtUp++
			endRun()
			continue
		}
		// Declared in doubt first (by name, by key, or by a key-less
		// takeover from an owner the runtime gave up on): a takeover may
		// also declare a gap window around the event a dead or frozen
		// owner was inside of (the window says the events in it reached
		// no instance; that one reached the owner).
		k, hasKey := plugintest.ProtocolKey(d.Event, d.ID)
		if named[name{Event: d.Event, ID: d.ID}] || hasKey && keys[k] || coveredByKeyless[d.EventKey] {
			m.InDoubt++
			if named[name{Event: d.Event, ID: d.ID}] {
				m.namedMisses = append(m.namedMisses, namedMiss{d, acting[name{Event: d.Event, ID: d.ID}]})
			}
			endRun()
			continue
		}
		if w := m.window(d.Start); w != nil {
			w.Missed++
			m.InGap++
			if len(m.InGapEvents) < 20 {
				m.InGapEvents = append(m.InGapEvents, fmt.Sprintf("%s delivered %s-%s, in the window %s-%s declared by %s",
					d.EventKey, stamp(d.Start), stamp(d.End), stamp(w.Start), stamp(w.End), w.Instance))
			}
			endRun()
			continue
		}
		m.UndeclaredCount++
		run = append(run, d)
		if len(m.Undeclared) < 20 {
			m.Undeclared = append(m.Undeclared, fmt.Sprintf("%s delivered %s-%s: in no declared gap window (%s), not declared in doubt",
				d.EventKey, stamp(d.Start), stamp(d.End), m.nearest(d.Start)))
		}
	}
	endRun()
	return m
}

// declaredAgain sorts the events acted on more often than issued (again:
// the excess of each) by whether they were declared in doubt, as an
// instance with plugin.WithAtLeastOnce acts on such an event again: by
// name, by the protocol's key, or, one each, by a key-less declaration
// no missed event took. It returns how many were declared, which, and a
// line for each (kind, id) that was not.
func (m *Missed) declaredAgain(again map[plugintest.EventKey]int) (declared int, which map[plugintest.EventKey]bool, undeclared []string) {
	which = map[plugintest.EventKey]bool{}
	keys := make([]plugintest.EventKey, 0, len(again))
	for k := range again {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	keyless := m.keylessLeft
	for _, k := range keys {
		n := again[k]
		pk, hasKey := plugintest.ProtocolKey(k.Event, k.ID)
		switch {
		case m.named[plugintest.EventKey{Event: k.Event, ID: k.ID}] || hasKey && m.keys[pk]:
			declared += n
			which[k] = true
		case keyless >= n:
			keyless -= n
			declared += n
			which[k] = true
		default:
			undeclared = append(undeclared, fmt.Sprintf("%s acted on %d more times than issued, not declared in doubt", k, n))
		}
	}
	return declared, which, undeclared
}

// window returns the first declared window that contains t (bounds
// included), nil if none does.
func (m *Missed) window(t time.Time) *GapWindow {
	for i := range m.Windows {
		if w := &m.Windows[i]; !t.Before(w.Start) && !t.After(w.End) {
			return w
		}
	}
	return nil
}

// nearest describes the declared windows just before and after t.
func (m *Missed) nearest(t time.Time) string {
	i := sort.Search(len(m.Windows), func(i int) bool { return m.Windows[i].Start.After(t) })
	var s string
	if i > 0 {
		w := m.Windows[i-1]
		s = fmt.Sprintf("previous %s-%s by %s, ended %v before", stamp(w.Start), stamp(w.End), w.Instance, t.Sub(w.End))
	} else {
		s = "no earlier window"
	}
	if i < len(m.Windows) {
		w := m.Windows[i]
		s += fmt.Sprintf("; next %s-%s by %s, starts %v after", stamp(w.Start), stamp(w.End), w.Instance, w.Start.Sub(t))
	}
	return s
}

// stamp formats t as UTC time of day to the microsecond.
func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
