// Package sim is the in-process NRI runtime of the project's own tests,
// benchmarks and demo. It is plugin/plugintest's runtime under the names
// the tests have always used: one runtime, not two.
package sim

import "github.com/nri-handover/nri-handover/plugin/plugintest"

// The runtime and its types: see package plugintest.
type (
	// Runtime is plugintest.Runtime.
	Runtime = plugintest.Runtime
	// Options is plugintest.RuntimeOptions.
	Options = plugintest.RuntimeOptions
	// Mode is plugintest.Mode.
	Mode = plugintest.Mode
	// Event is plugintest.Event.
	Event = plugintest.Event
	// EventKey is plugintest.EventKey.
	EventKey = plugintest.EventKey
	// Stats is plugintest.Stats.
	Stats = plugintest.Stats
	// CreateRejectedError is plugintest.CreateRejectedError.
	CreateRejectedError = plugintest.CreateRejectedError
	// Ledger is plugintest.Ledger.
	Ledger = plugintest.Ledger
	// Report is plugintest.Report.
	Report = plugintest.Report
)

// The runtime modes: see plugintest.Mode.
const (
	ModeContainerd = plugintest.ModeContainerd
	ModeCRIO       = plugintest.ModeCRIO
	ModeGap        = plugintest.ModeGap
	ModeExitStop   = plugintest.ModeExitStop
)

// The event kinds: see plugintest.
const (
	EventRunPodSandbox        = plugintest.EventRunPodSandbox
	EventUpdatePodSandbox     = plugintest.EventUpdatePodSandbox
	EventPostUpdatePodSandbox = plugintest.EventPostUpdatePodSandbox
	EventStopPodSandbox       = plugintest.EventStopPodSandbox
	EventRemovePodSandbox     = plugintest.EventRemovePodSandbox
	EventCreateContainer      = plugintest.EventCreateContainer
	EventPostCreateContainer  = plugintest.EventPostCreateContainer
	EventStartContainer       = plugintest.EventStartContainer
	EventPostStartContainer   = plugintest.EventPostStartContainer
	EventUpdateContainer      = plugintest.EventUpdateContainer
	EventPostUpdateContainer  = plugintest.EventPostUpdateContainer
	EventStopContainer        = plugintest.EventStopContainer
	EventRemoveContainer      = plugintest.EventRemoveContainer
)

// SyncWaitThreshold is plugintest.SyncWaitThreshold.
const SyncWaitThreshold = plugintest.SyncWaitThreshold

// Errors: see plugintest.
var (
	ErrNotFound = plugintest.ErrNotFound
	ErrState    = plugintest.ErrState
	ErrStopped  = plugintest.ErrStopped
)

// Start is plugintest.StartRuntime.
func Start(opts Options) (*Runtime, error) { return plugintest.StartRuntime(opts) }

// NewLedger is plugintest.NewLedger.
func NewLedger() *Ledger { return plugintest.NewLedger() }

// AllEvents is plugintest.AllEvents.
func AllEvents() []Event { return plugintest.AllEvents() }
