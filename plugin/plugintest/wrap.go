package plugintest

import (
	"context"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-handover/nri-handover/plugin"
)

// handlers is what the harness sees of the author's plugin in a Node: it
// has every handler of the NRI stub, records each call in the node's ledger
// and passes it on to the author's handler, if the author has one. Its
// Configure subscribes to exactly the events the author's plugin would
// (its handlers, narrowed by its own Configure), so the runtime sends
// what it would send the author's plugin alone.
type handlers struct {
	author  interface{}
	handles api.EventMask // the author's handlers
	record  func(ev Event, id string)
	// inDoubt, if set, is told of each event in doubt the harness hands
	// this instance (see InDoubt), and whether it acts on it.
	inDoubt func(ev Event, id string, acting bool)
	// namedInDoubt, if set, is told of each event in doubt a catch-up
	// names (plugin.CatchingUp): the takeover declared it already.
	namedInDoubt func(ev Event, id string, acting bool)
	// handed, if set, is told of the containers the harness hands the
	// author's Synchronize as unprocessed.
	handed func(ids []string)
	// caughtUp, if set, is told of each late call of a handler
	// (plugin.CatchingUp: a lifecycle change a catch-up hands, an event in
	// doubt handed again); such a call is not recorded in the ledger.
	caughtUp func(ev Event, id string)

	mu         sync.Mutex
	configured api.EventMask // the last subscription (0 before Configure)
}

var (
	_ stub.ConfigureInterface           = (*handlers)(nil)
	_ stub.SynchronizeInterface         = (*handlers)(nil)
	_ stub.RunPodInterface              = (*handlers)(nil)
	_ stub.UpdatePodInterface           = (*handlers)(nil)
	_ stub.PostUpdatePodInterface       = (*handlers)(nil)
	_ stub.StopPodInterface             = (*handlers)(nil)
	_ stub.RemovePodInterface           = (*handlers)(nil)
	_ stub.CreateContainerInterface     = (*handlers)(nil)
	_ stub.PostCreateContainerInterface = (*handlers)(nil)
	_ stub.StartContainerInterface      = (*handlers)(nil)
	_ stub.PostStartContainerInterface  = (*handlers)(nil)
	_ stub.UpdateContainerInterface     = (*handlers)(nil)
	_ stub.PostUpdateContainerInterface = (*handlers)(nil)
	_ stub.StopContainerInterface       = (*handlers)(nil)
	_ stub.RemoveContainerInterface     = (*handlers)(nil)
	_ stub.ShutdownInterface            = (*handlers)(nil)
	_ plugin.ReconcileInterface         = (*handlers)(nil)
	_ plugin.InDoubtInterface           = (*handlers)(nil)

	_ stub.ValidateContainerAdjustmentInterface = (*handlers)(nil)
)

// eventKinds maps the NRI events to the ledger's kinds.
var eventKinds = map[api.Event]Event{
	api.Event_RUN_POD_SANDBOX:         EventRunPodSandbox,
	api.Event_UPDATE_POD_SANDBOX:      EventUpdatePodSandbox,
	api.Event_POST_UPDATE_POD_SANDBOX: EventPostUpdatePodSandbox,
	api.Event_STOP_POD_SANDBOX:        EventStopPodSandbox,
	api.Event_REMOVE_POD_SANDBOX:      EventRemovePodSandbox,
	api.Event_CREATE_CONTAINER:        EventCreateContainer,
	api.Event_POST_CREATE_CONTAINER:   EventPostCreateContainer,
	api.Event_START_CONTAINER:         EventStartContainer,
	api.Event_POST_START_CONTAINER:    EventPostStartContainer,
	api.Event_UPDATE_CONTAINER:        EventUpdateContainer,
	api.Event_POST_UPDATE_CONTAINER:   EventPostUpdateContainer,
	api.Event_STOP_CONTAINER:          EventStopContainer,
	api.Event_REMOVE_CONTAINER:        EventRemoveContainer,

	api.Event_VALIDATE_CONTAINER_ADJUSTMENT: EventValidateContainerAdjustment,
}

// handlesOf returns the events p has stub handlers for.
func handlesOf(p interface{}) api.EventMask {
	var m api.EventMask
	has := map[api.Event]bool{}
	_, has[api.Event_RUN_POD_SANDBOX] = p.(stub.RunPodInterface)
	_, has[api.Event_UPDATE_POD_SANDBOX] = p.(stub.UpdatePodInterface)
	_, has[api.Event_POST_UPDATE_POD_SANDBOX] = p.(stub.PostUpdatePodInterface)
	_, has[api.Event_STOP_POD_SANDBOX] = p.(stub.StopPodInterface)
	_, has[api.Event_REMOVE_POD_SANDBOX] = p.(stub.RemovePodInterface)
	_, has[api.Event_CREATE_CONTAINER] = p.(stub.CreateContainerInterface)
	_, has[api.Event_POST_CREATE_CONTAINER] = p.(stub.PostCreateContainerInterface)
	_, has[api.Event_START_CONTAINER] = p.(stub.StartContainerInterface)
	_, has[api.Event_POST_START_CONTAINER] = p.(stub.PostStartContainerInterface)
	_, has[api.Event_UPDATE_CONTAINER] = p.(stub.UpdateContainerInterface)
	_, has[api.Event_POST_UPDATE_CONTAINER] = p.(stub.PostUpdateContainerInterface)
	_, has[api.Event_STOP_CONTAINER] = p.(stub.StopContainerInterface)
	_, has[api.Event_REMOVE_CONTAINER] = p.(stub.RemoveContainerInterface)
	_, has[api.Event_VALIDATE_CONTAINER_ADJUSTMENT] = p.(stub.ValidateContainerAdjustmentInterface)
	for e, ok := range has {
		if ok {
			m.Set(e)
		}
	}
	return m
}

// kindsOf returns the ledger kinds of the events in m.
func kindsOf(m api.EventMask) map[Event]bool {
	out := map[Event]bool{}
	for e, k := range eventKinds {
		if m.IsSet(e) {
			out[k] = true
		}
	}
	return out
}

func newHandlers(author interface{}, record func(Event, string)) *handlers {
	return &handlers{author: author, handles: handlesOf(author), record: record}
}

// subscribed returns the events the instance subscribed to in its last
// Configure, CreateContainer included (the harness always stamps); before
// any Configure, the author's handlers and CreateContainer.
func (h *handlers) subscribed() api.EventMask {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.configured
	if m == 0 {
		m = h.handles
	}
	m.Set(api.Event_CREATE_CONTAINER)
	return m
}

func (h *handlers) Configure(ctx context.Context, config, runtime, version string) (api.EventMask, error) {
	m := h.handles
	if c, ok := h.author.(stub.ConfigureInterface); ok {
		am, err := c.Configure(ctx, config, runtime, version)
		if err != nil {
			return 0, err
		}
		if am != 0 {
			m = am & h.handles
		}
	}
	// The harness subscribes to CreateContainer anyway; a non-zero mask
	// keeps it from reading 0 as "every handler this value has".
	m.Set(api.Event_CREATE_CONTAINER)
	h.mu.Lock()
	h.configured = m
	h.mu.Unlock()
	return m, nil
}

// Synchronize passes the call on and notes the containers the harness
// handed the author (those no instance processed: see Node.CatchUps) once
// the author's Synchronize has taken them (returned no error).
func (h *handlers) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	var (
		updates []*api.ContainerUpdate
		err     error
	)
	if s, ok := h.author.(stub.SynchronizeInterface); ok {
		updates, err = s.Synchronize(ctx, pods, ctrs)
	}
	if err == nil && h.handed != nil && len(ctrs) != 0 {
		ids := make([]string, 0, len(ctrs))
		for _, c := range ctrs {
			ids = append(ids, c.GetId())
		}
		h.handed(ids)
	}
	return updates, err
}

func (h *handlers) Reconcile(ctx context.Context, p *plugin.Plugin, older []*plugin.StampedContainer) error {
	if r, ok := h.author.(plugin.ReconcileInterface); ok {
		return r.Reconcile(ctx, p, older)
	}
	return nil
}

// InDoubt notes the declaration (the node collects them: see
// Node.Declarations), or, from a catch-up, names the takeover's
// declaration of that event, and passes it on to the author, if it
// listens.
func (h *handlers) InDoubt(ctx context.Context, event, id string, acting bool) {
	switch {
	case plugin.CatchingUp(ctx):
		if h.namedInDoubt != nil {
			h.namedInDoubt(Event(event), id, acting)
		}
	case h.inDoubt != nil:
		h.inDoubt(Event(event), id, acting)
	}
	if a, ok := h.author.(plugin.InDoubtInterface); ok {
		a.InDoubt(ctx, event, id, acting)
	}
}

// note records a handler's call: in the ledger, or, for a late call
// (plugin.CatchingUp: a change a catch-up hands, or an event in doubt
// handed again with plugin.WithAtLeastOnce), as caught up.
func (h *handlers) note(ctx context.Context, ev Event, id string) {
	if plugin.CatchingUp(ctx) {
		if h.caughtUp != nil {
			h.caughtUp(ev, id)
		}
		return
	}
	h.record(ev, id)
}

func (h *handlers) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	h.note(ctx, EventRunPodSandbox, pod.GetId())
	if a, ok := h.author.(stub.RunPodInterface); ok {
		return a.RunPodSandbox(ctx, pod)
	}
	return nil
}

func (h *handlers) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	h.note(ctx, EventUpdatePodSandbox, pod.GetId())
	if a, ok := h.author.(stub.UpdatePodInterface); ok {
		return a.UpdatePodSandbox(ctx, pod, overhead, res)
	}
	return nil
}

func (h *handlers) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	h.note(ctx, EventPostUpdatePodSandbox, pod.GetId())
	if a, ok := h.author.(stub.PostUpdatePodInterface); ok {
		return a.PostUpdatePodSandbox(ctx, pod)
	}
	return nil
}

func (h *handlers) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	h.note(ctx, EventStopPodSandbox, pod.GetId())
	if a, ok := h.author.(stub.StopPodInterface); ok {
		return a.StopPodSandbox(ctx, pod)
	}
	return nil
}

func (h *handlers) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	h.note(ctx, EventRemovePodSandbox, pod.GetId())
	if a, ok := h.author.(stub.RemovePodInterface); ok {
		return a.RemovePodSandbox(ctx, pod)
	}
	return nil
}

// CreateContainer is recorded whether or not the author has a handler:
// the harness calls it for every container this instance acts on, and
// stamps the container after it.
func (h *handlers) CreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	h.record(EventCreateContainer, c.GetId())
	if a, ok := h.author.(stub.CreateContainerInterface); ok {
		return a.CreateContainer(ctx, pod, c)
	}
	return nil, nil, nil
}

func (h *handlers) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	h.note(ctx, EventPostCreateContainer, c.GetId())
	if a, ok := h.author.(stub.PostCreateContainerInterface); ok {
		return a.PostCreateContainer(ctx, pod, c)
	}
	return nil
}

func (h *handlers) StartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	h.note(ctx, EventStartContainer, c.GetId())
	if a, ok := h.author.(stub.StartContainerInterface); ok {
		return a.StartContainer(ctx, pod, c)
	}
	return nil
}

func (h *handlers) PostStartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	h.note(ctx, EventPostStartContainer, c.GetId())
	if a, ok := h.author.(stub.PostStartContainerInterface); ok {
		return a.PostStartContainer(ctx, pod, c)
	}
	return nil
}

func (h *handlers) UpdateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	h.note(ctx, EventUpdateContainer, c.GetId())
	if a, ok := h.author.(stub.UpdateContainerInterface); ok {
		return a.UpdateContainer(ctx, pod, c, res)
	}
	return nil, nil
}

func (h *handlers) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	h.note(ctx, EventPostUpdateContainer, c.GetId())
	if a, ok := h.author.(stub.PostUpdateContainerInterface); ok {
		return a.PostUpdateContainer(ctx, pod, c)
	}
	return nil
}

func (h *handlers) StopContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	h.note(ctx, EventStopContainer, c.GetId())
	if a, ok := h.author.(stub.StopContainerInterface); ok {
		return a.StopContainer(ctx, pod, c)
	}
	return nil, nil
}

func (h *handlers) RemoveContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	h.note(ctx, EventRemoveContainer, c.GetId())
	if a, ok := h.author.(stub.RemoveContainerInterface); ok {
		return a.RemoveContainer(ctx, pod, c)
	}
	return nil
}

// ValidateContainerAdjustment is recorded as the other handlers are: the
// harness calls it on the owner only, for the containers this plugin's
// instances were asked to validate (only if the author validates: the
// subscription is the author's).
func (h *handlers) ValidateContainerAdjustment(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	h.record(EventValidateContainerAdjustment, req.GetContainer().GetId())
	if a, ok := h.author.(stub.ValidateContainerAdjustmentInterface); ok {
		return a.ValidateContainerAdjustment(ctx, req)
	}
	return nil
}

// Shutdown is recorded (with id "") whenever the harness calls it, which
// it does on the owner only, and passed on if the author has a handler.
func (h *handlers) Shutdown(ctx context.Context) {
	h.record(EventShutdown, "")
	if a, ok := h.author.(stub.ShutdownInterface); ok {
		a.Shutdown(ctx)
	}
}
