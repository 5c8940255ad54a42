package plugin

import "github.com/nri-handover/nri-handover/internal/observe"

// eventKind is an NRI event the harness gates and counts.
type eventKind = observe.Event

const (
	evRunPodSandbox               = observe.RunPodSandbox
	evUpdatePodSandbox            = observe.UpdatePodSandbox
	evPostUpdatePodSandbox        = observe.PostUpdatePodSandbox
	evStopPodSandbox              = observe.StopPodSandbox
	evRemovePodSandbox            = observe.RemovePodSandbox
	evCreateContainer             = observe.CreateContainer
	evPostCreateContainer         = observe.PostCreateContainer
	evStartContainer              = observe.StartContainer
	evPostStartContainer          = observe.PostStartContainer
	evUpdateContainer             = observe.UpdateContainer
	evPostUpdateContainer         = observe.PostUpdateContainer
	evStopContainer               = observe.StopContainer
	evRemoveContainer             = observe.RemoveContainer
	evValidateContainerAdjustment = observe.ValidateContainerAdjustment

	resultActed          = observe.Acted
	resultSkipped        = observe.Skipped
	resultSkippedStamped = observe.SkippedStamped
)

func init() {
	observe.Of = func(p any) observe.Observer { return p.(*Plugin).obs }
}

// newObserver is the metrics of package plugin/metrics when the binary
// links it, else nothing.
func newObserver(p *Plugin) observe.Observer {
	if observe.New == nil {
		return observe.Nop{}
	}
	return observe.New(observe.Info{
		Plugin: p,
		Name:   p.cfg.name, Version: p.version.Original(), Instance: p.self.Id, Policy: p.cfg.policy.Name(),
		Role:  p.Role,
		Epoch: func() uint64 { return p.coord.Status().Epoch },
	})
}
