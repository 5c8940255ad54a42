package plugintest

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Ledger records which plugin instance acted on which event. Safe for
// concurrent use.
type Ledger struct {
	mu   sync.Mutex
	acts map[EventKey][]act // keys with N == 0
	n    int
}

type act struct {
	instance string
	version  string
	at       time.Time // when it was recorded (wall clock)
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{acts: map[EventKey][]act{}}
}

// Record notes that plugin instance (of the given version) acted on one
// occurrence of event ev on object id.
func (l *Ledger) Record(ev Event, id, instance, version string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := EventKey{Event: ev, ID: id}
	l.acts[k] = append(l.acts[k], act{instance: instance, version: version, at: time.Now().Round(0)})
	l.n++
}

// Len returns the number of recorded acts.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Acted returns the instances that acted on event ev on object id, in
// recording order.
func (l *Ledger) Acted(ev Event, id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.acts[EventKey{Event: ev, ID: id}] {
		out = append(out, a.instance)
	}
	return out
}

// Counts returns how many acts were recorded, by event and object.
func (l *Ledger) Counts() map[EventKey]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[EventKey]int, len(l.acts))
	for k, acts := range l.acts {
		out[k] = len(acts)
	}
	return out
}

// actedOn reports whether any act was recorded on an event of object id.
func (l *Ledger) actedOn(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.acts {
		if k.ID == id {
			return true
		}
	}
	return false
}

// Report is the result of Ledger.Compare.
type Report struct {
	// Events is the number of issued event occurrences compared.
	Events int
	// Acted is the number of recorded acts compared.
	Acted int
	// Duplicates sums, over (kind, id), the acts beyond the issued count.
	Duplicates int
	// Missed sums, over (kind, id), the issued occurrences never acted on.
	Missed int
	// ByVersion counts the compared acts per plugin version.
	ByVersion map[string]int
	// ByInstance counts the compared acts per plugin instance.
	ByInstance map[string]int
	// Problems holds the first 20 mismatches, human-readable, ordered by
	// object id then event kind, e.g.
	// "StartContainer ctr-17: issued 1, acted 2 (by a, b)".
	Problems []string
}

// OK tells whether nothing was duplicated or missed.
func (rep Report) OK() bool { return rep.Duplicates == 0 && rep.Missed == 0 }

// String summarizes the report on one line, followed by its problems.
func (rep Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events %d, acted %d, duplicates %d, missed %d",
		rep.Events, rep.Acted, rep.Duplicates, rep.Missed)
	for _, p := range rep.Problems {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

// Compare checks the recorded acts against issued events (as returned by
// Runtime.Issued; keys with N == 0): for each (kind, id) it compares the acted
// count with the issued count. Acts on events that were never issued count as
// duplicates. only selects the event kinds to compare; nil means all kinds.
func (l *Ledger) Compare(issued map[EventKey]int, only func(Event) bool) Report {
	l.mu.Lock()
	defer l.mu.Unlock()

	rep := Report{ByVersion: map[string]int{}, ByInstance: map[string]int{}}
	keys := map[EventKey]struct{}{}
	counts := make(map[EventKey]int, len(issued))
	for k, n := range issued {
		k.N = 0
		keys[k] = struct{}{}
		counts[k] += n
	}
	for k := range l.acts {
		keys[k] = struct{}{}
	}

	for _, k := range sortedKeys(keys) {
		if only != nil && !only(k.Event) {
			continue
		}
		want := counts[k]
		acts := l.acts[k]
		got := len(acts)
		rep.Events += want
		rep.Acted += got
		var by []string
		for _, a := range acts {
			rep.ByVersion[a.version]++
			rep.ByInstance[a.instance]++
			by = append(by, a.instance)
		}
		if got == want {
			continue
		}
		if got > want {
			rep.Duplicates += got - want
		} else {
			rep.Missed += want - got
		}
		if len(rep.Problems) < maxTexts {
			who := "none"
			if len(by) > 0 {
				who = strings.Join(by, ", ")
			}
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s: issued %d, acted %d (by %s)",
				k.Event, k.ID, want, got, who))
		}
	}
	return rep
}

// Unacted returns the deliveries (as from Runtime.Deliveries) that no act
// was recorded for, in delivery order. An act belongs to the delivery of
// its (kind, id) that started last before the act was recorded: a handler
// is called after the runtime began the delivery, and events are
// serialized, so the next delivery of that (kind, id) starts after it.
// An act recorded before any delivery of its (kind, id) belongs to none.
func (l *Ledger) Unacted(deliveries []Delivery) []Delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[EventKey][]int{} // indices into deliveries, by start
	for i, d := range deliveries {
		k := EventKey{Event: d.Event, ID: d.ID}
		byKey[k] = append(byKey[k], i)
	}
	acted := make([]bool, len(deliveries))
	for k, idx := range byKey {
		sort.SliceStable(idx, func(a, b int) bool { return deliveries[idx[a]].Start.Before(deliveries[idx[b]].Start) })
		for _, a := range l.acts[k] {
			// The last delivery that started at or before the act.
			j := sort.Search(len(idx), func(j int) bool { return deliveries[idx[j]].Start.After(a.at) }) - 1
			if j >= 0 {
				acted[idx[j]] = true
			}
		}
	}
	var out []Delivery
	for i, d := range deliveries {
		if !acted[i] {
			out = append(out, d)
		}
	}
	return out
}
