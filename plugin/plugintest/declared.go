package plugintest

import (
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/observe"
	"github.com/nri-handover/nri-handover/internal/protocol"
)

// Declaration is a loss the instances declared: a gap window (events in
// it reached no instance) or an event in doubt (an owner died inside its
// handler, or the runtime gave up on it).
type Declaration struct {
	// Instance is the id of the declaring instance.
	Instance string
	// Gap tells a gap window [Start, End]; otherwise an event in doubt,
	// declared at End (Start is End).
	Gap bool
	// Start of a gap window: the protocol's own record of the last act
	// before the window (exact, to the nanosecond, as it was logged), so
	// every event delivered later started after it.
	// End: read when the declaration was logged, after the protocol read
	// the takeover time, so the window is never narrower than declared.
	// Both are wall-clock times (no monotonic reading).
	Start, End time.Time
	// Event and ID name the event in doubt when the declaring instance
	// was handed it (plugin.InDoubtInterface).
	Event Event
	ID    string
	// Key is the protocol's key of the event in doubt (protocol.EventKey)
	// when the declaration gave one (HasKey).
	Key    uint32
	HasKey bool
	// Acting tells, of an event named in doubt, that the declaring
	// instance said it acts on it (plugin.WithAtLeastOnce): it is handed
	// to its author's handler, at once or late.
	Acting bool
}

// declarations collects a node's declarations from its instances: gap
// windows and keyed in-doubt events from the protocol's warnings (a hook
// on the node's logger: the protocol passes the window's start only
// there), events in doubt with their names from the harness's InDoubt
// calls (see handlers.InDoubt).
type declarations struct {
	mu   sync.Mutex
	list []Declaration
}

func (d *declarations) add(x Declaration) {
	d.mu.Lock()
	d.list = append(d.list, x)
	d.mu.Unlock()
}

func (d *declarations) all() []Declaration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Declaration(nil), d.list...)
}

// name gives the event's name to instance's declaration of it by key (a
// takeover at a later event), which a catch-up named to the author's
// InDoubt: one declaration, not two. One with no key stays as it is.
func (d *declarations) name(instance string, ev Event, id string, acting bool) {
	key, ok := ProtocolKey(ev, id)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.list) - 1; i >= 0; i-- {
		x := &d.list[i]
		if x.Instance == instance && !x.Gap && x.HasKey && x.Key == key && x.Event == "" {
			x.Event, x.ID, x.Acting = ev, id, acting
			return
		}
	}
}

// Levels is logrus.Hook's: the declarations are warnings.
func (d *declarations) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }

// Fire is logrus.Hook's: it keeps the protocol's gap and in-doubt
// warnings ("gap: ..." with its "since" field; "in doubt: ..." with
// "event_key" when the protocol names the event by key). A warning it
// cannot read is kept as an in-doubt or gap declaration without its
// details, so that counts still agree with the instances' Stats.
func (d *declarations) Fire(e *logrus.Entry) error {
	inst, _ := e.Data["instance"].(string)
	at := e.Time.Round(0)
	switch {
	case strings.HasPrefix(e.Message, "gap: "):
		x := Declaration{Instance: inst, Gap: true, Start: at, End: at}
		if s, ok := e.Data["since"].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				x.Start = t
			}
		}
		d.add(x)
	case strings.HasPrefix(e.Message, "in doubt: "):
		x := Declaration{Instance: inst, Start: at, End: at}
		if k, ok := e.Data["event_key"].(uint32); ok {
			x.Key, x.HasKey = k, true
		}
		if this, _ := e.Data["this_event"].(bool); this {
			// The declaring instance is handed this event: InDoubt names it.
			return nil
		}
		if strings.HasPrefix(e.Message, "in doubt: the owner left after the event with this key") {
			return nil // this event, too
		}
		d.add(x)
	}
	return nil
}

// Declarations returns the losses the node's instances declared so far, in
// the order they were declared.
func (n *Node) Declarations() []Declaration { return n.declared.all() }

// ProtocolKey returns the protocol's key for event ev on object id, as a
// Declaration's Key gives it (false for a kind the harness does not gate).
func ProtocolKey(ev Event, id string) (uint32, bool) {
	for i, name := range observe.EventNames {
		if name == string(ev) {
			return protocol.EventKey(uint32(i), id), true
		}
	}
	return 0, false
}
