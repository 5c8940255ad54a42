// Package observe connects package plugin to an observer of its events and
// handover outcomes (package plugin/metrics) without plugin importing the
// observer: a plugin binary that does not import plugin/metrics links no
// Prometheus client.
package observe

import (
	"context"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/protocol"
)

// Event is an NRI event the harness gates; an index into EventNames.
type Event int

// The events, in the order of EventNames.
const (
	RunPodSandbox Event = iota
	UpdatePodSandbox
	PostUpdatePodSandbox
	StopPodSandbox
	RemovePodSandbox
	CreateContainer
	PostCreateContainer
	StartContainer
	PostStartContainer
	UpdateContainer
	PostUpdateContainer
	StopContainer
	RemoveContainer
	ValidateContainerAdjustment
	NumEvents
)

// EventNames are the events' names, as metric labels and in logs.
var EventNames = [NumEvents]string{
	"RunPodSandbox", "UpdatePodSandbox", "PostUpdatePodSandbox", "StopPodSandbox", "RemovePodSandbox",
	"CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
	"UpdateContainer", "PostUpdateContainer", "StopContainer", "RemoveContainer",
	"ValidateContainerAdjustment",
}

func (e Event) String() string { return EventNames[e] }

// Result is how an event ended.
type Result int

// The results, in the order of ResultNames.
const (
	Acted          Result = iota
	Skipped               // this instance did not own the plugin
	SkippedStamped        // another instance had stamped the container
	NumResults
)

// ResultNames are the results' metric labels.
var ResultNames = [NumResults]string{"acted", "skipped", "skipped_stamped"}

// Observer sees what one plugin instance does. Its methods are called on
// the events' hot path and must not block.
type Observer interface {
	Event(Event, Result)
	Outcome(o protocol.Outcome, took time.Duration)
	BadStamp()
	// InDoubt counts an event a dead owner was inside of.
	InDoubt()
	// Gap counts a takeover that found no instance acting for gap.
	Gap(gap time.Duration)
	// Serve serves the observer's endpoint on addr until ctx ends or stop
	// is called.
	Serve(ctx context.Context, addr string) (stop func(), err error)
}

// Nop observes nothing.
type Nop struct{}

// Event does nothing.
func (Nop) Event(Event, Result) {}

// Outcome does nothing.
func (Nop) Outcome(protocol.Outcome, time.Duration) {}

// BadStamp does nothing.
func (Nop) BadStamp() {}

// InDoubt does nothing.
func (Nop) InDoubt() {}

// Gap does nothing.
func (Nop) Gap(time.Duration) {}

// Serve refuses: nothing to serve.
func (Nop) Serve(context.Context, string) (func(), error) { return nil, ErrNoMetrics }

// ErrNoMetrics is New's error for a metrics address in a binary that does
// not link plugin/metrics.
var ErrNoMetrics = errNoMetrics{}

type errNoMetrics struct{}

func (errNoMetrics) Error() string {
	return `metrics address set, but the binary does not link the metrics: import _ "github.com/nri-handover/nri-handover/plugin/metrics"`
}

// Info describes the instance an observer observes.
type Info struct {
	Plugin                          any // the *plugin.Plugin
	Name, Version, Instance, Policy string
	// Role and Epoch read the instance's current ones.
	Role  func() handover.Role
	Epoch func() uint64
}

// New, if set (by package plugin/metrics when it is linked in), makes the
// observer of a new plugin instance.
var New func(Info) Observer

// Of, set by package plugin, returns the observer of a *plugin.Plugin.
var Of func(plugin any) Observer
