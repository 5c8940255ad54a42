package plugintest

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// RuntimeOptions configure a Runtime.
type RuntimeOptions struct {
	// Mode is how the runtime fences plugin synchronization from events
	// (see Mode); empty means ModeContainerd.
	Mode Mode
	// Seed seeds the random moments of ModeExitStop (0 means 1).
	Seed int64
	// ExitRate is, in ModeExitStop, the probability after each delivered
	// event that a random running container exits by itself; 0 means
	// DefaultExitRate, a negative rate never.
	ExitRate float64
	// GapEvents is, in ModeGap, how many events the runtime delivers after
	// each plugin's Synchronize returned and before the plugin is appended
	// to the chain, as long as operations are waiting to deliver them;
	// 0 means DefaultGapEvents.
	GapEvents int
	// RequestTimeout, if non-zero, is set with adaptation.SetPluginRequestTimeout.
	// That timeout is process-wide: it applies to every Runtime in the process
	// and stays in force after Stop.
	RequestTimeout time.Duration
	// Logf, if set, receives debug lines. It may be called with runtime locks
	// held and from adaptation goroutines (also after Stop returned, from
	// late plugin callbacks), so it must not call back into the Runtime.
	Logf func(format string, args ...any)
}

// Event is the kind of an NRI event, as used in ledgers.
type Event string

// The NRI events the runtime delivers.
const (
	EventRunPodSandbox        Event = "RunPodSandbox"
	EventUpdatePodSandbox     Event = "UpdatePodSandbox"
	EventPostUpdatePodSandbox Event = "PostUpdatePodSandbox"
	EventStopPodSandbox       Event = "StopPodSandbox"
	EventRemovePodSandbox     Event = "RemovePodSandbox"
	EventCreateContainer      Event = "CreateContainer"
	EventPostCreateContainer  Event = "PostCreateContainer"
	EventStartContainer       Event = "StartContainer"
	EventPostStartContainer   Event = "PostStartContainer"
	EventUpdateContainer      Event = "UpdateContainer"
	EventPostUpdateContainer  Event = "PostUpdateContainer"
	EventStopContainer        Event = "StopContainer"
	EventRemoveContainer      Event = "RemoveContainer"
	// EventValidateContainerAdjustment is delivered inside CreateContainer
	// to the plugins that validate (subscribe to it), after the
	// adjustments are collected; its id is the container's. Issued counts
	// it once per CreateContainer in which any plugin was asked.
	EventValidateContainerAdjustment Event = "ValidateContainerAdjustment"
	// EventShutdown is the runtime shutting down (id ""). The ledger
	// records the harness's calls of it, but this runtime (containerd/nri's
	// adaptation) never sends it, so Issued never counts it.
	EventShutdown Event = "Shutdown"
)

// AllEvents returns every event kind, in lifecycle order.
func AllEvents() []Event {
	return []Event{
		EventRunPodSandbox, EventUpdatePodSandbox, EventPostUpdatePodSandbox,
		EventCreateContainer, EventValidateContainerAdjustment, EventPostCreateContainer,
		EventStartContainer, EventPostStartContainer,
		EventUpdateContainer, EventPostUpdateContainer,
		EventStopContainer, EventRemoveContainer,
		EventStopPodSandbox, EventRemovePodSandbox, EventShutdown,
	}
}

// IsPodEvent tells whether the event is about a pod (its id is a pod id).
func (e Event) IsPodEvent() bool {
	return strings.HasSuffix(string(e), "PodSandbox")
}

// EventKey identifies one delivered event: the kind, the object id (pod id for
// pod events, container id for container events) and the occurrence number of
// that kind on that object (1 for the first). Maps that count occurrences
// (Runtime.Issued, Ledger.Compare) use keys with N == 0.
type EventKey struct {
	Event Event
	ID    string
	N     int
}

// String returns "Kind id" or "Kind id #N".
func (k EventKey) String() string {
	if k.N == 0 {
		return string(k.Event) + " " + k.ID
	}
	return string(k.Event) + " " + k.ID + " #" + strconv.Itoa(k.N)
}

// Stats reports counters of a Runtime.
type Stats struct {
	// Events is the number of events delivered (see Runtime.Issued).
	Events int
	// FailedCreates counts CreateContainer calls that the runtime rejected.
	FailedCreates int
	// CreateErrors holds the error texts of the first 20 rejected creations.
	CreateErrors []string
	// PluginErrors counts, per plugin name ("idx-name"), invocations that
	// failed (Metrics.RecordPluginInvocation with a non-nil error). A timed
	// out or dropped plugin shows here.
	PluginErrors map[string]int
	// PluginErrorTexts holds the first 20 failed invocations as
	// "plugin operation: error".
	PluginErrorTexts []string
	// PluginCount is the last value reported by Metrics.UpdatePluginCount.
	PluginCount int
	// Updates counts container updates received through the update function
	// (unsolicited UpdateContainers requests from plugins).
	Updates int
	// SyncUpdates counts container updates returned by plugins from
	// Synchronize (applied like unsolicited ones, not counted in Updates).
	SyncUpdates int
	// MaxEventLatency is the longest single adaptation call.
	MaxEventLatency time.Duration
	// MaxSyncWait is the longest time an operation waited to start because
	// a plugin was synchronizing: the delay a handover (which happens inside
	// the newcomer's Synchronize) can add to a CRI call.
	MaxSyncWait time.Duration
	// Timeouts counts, per plugin, invocations that failed because the
	// plugin exceeded the request timeout: the runtime drops such a plugin.
	Timeouts map[string]int
	// GapEvents counts events delivered after a plugin's Synchronize had
	// returned and before the runtime's sync callback returned (the plugin
	// was not in the chain yet: only the plugins already connected saw
	// them). Only ModeGap makes such events on purpose.
	GapEvents int
	// ExitStops counts StopContainer events of containers that exited by
	// themselves (ModeExitStop), sent without the plugin-sync block.
	ExitStops int
}

// CreateRejectedError is returned by CreateContainer when the adaptation
// rejected the creation. The runtime has then undone the creation (sent
// StopContainer and RemoveContainer for the original container).
type CreateRejectedError struct {
	// ID of the container that was not created.
	ID string
	// Err is the error returned by the adaptation.
	Err error
}

// Error implements error.
func (e *CreateRejectedError) Error() string {
	return fmt.Sprintf("plugintest: creation of container %s rejected: %v", e.ID, e.Err)
}

// Unwrap returns the adaptation error.
func (e *CreateRejectedError) Unwrap() error { return e.Err }

var (
	// ErrNotFound is wrapped by errors about unknown pods and containers.
	ErrNotFound = errors.New("not found")
	// ErrState is wrapped by errors about operations invalid in the current state.
	ErrState = errors.New("invalid state")
	// ErrStopped is returned by operations on a stopped Runtime.
	ErrStopped = errors.New("plugintest: runtime stopped")
)

// Process-wide counters, so ids are unique even across runtimes.
var (
	podSeq atomic.Uint64
	ctrSeq atomic.Uint64
)

const maxTexts = 20

type podState struct {
	pod     *api.PodSandbox
	stopped bool
}

type current struct {
	seq uint64
	ev  Event
	id  string
}

// Runtime is an in-process NRI runtime. Methods are safe for concurrent use;
// events are serialized as in containerd.
type Runtime struct {
	opts RuntimeOptions
	dir  string
	sock string
	nri  *adaptation.Adaptation

	// evMu serializes event delivery (containerd's NRI wrapper lock). It is
	// always taken after the plugin-sync block and never held with mu while
	// calling the adaptation.
	evMu sync.Mutex

	stopOnce sync.Once

	mu        sync.Mutex
	stopped   bool
	pods      map[string]*podState
	podOrder  []string
	ctrs      map[string]*api.Container // live (not removed) containers
	history   []*api.Container          // every successfully created container
	issued    map[EventKey]int
	issuedLog []EventKey
	// issuedAt[i] is when issuedLog[i]'s delivery began and ended.
	issuedAt []deliveryTimes
	updates  []*api.ContainerUpdate
	stats    Stats
	cur      current
	seq      uint64
	// validated is set (by the adaptation's metrics callback) when a
	// plugin was asked to validate during the current CreateContainer.
	validated bool
	countC    chan struct{} // closed and replaced when PluginCount changes
	// syncWaits holds every wait for the plugin-sync block longer than
	// SyncWaitThreshold: the operations a plugin's Synchronize delayed.
	syncWaits []time.Duration
	// inflight counts lifecycle operations under way (begun, not ended).
	inflight int
	// evC is closed and replaced after every event and operation end.
	evC chan struct{}
	// inGap is set while a plugin's Synchronize has returned and the sync
	// callback has not; gapLog lists the events delivered meanwhile.
	inGap bool
	// gapBegun and gapEnded count the events of the current gap that
	// began and that ended.
	gapBegun, gapEnded int
	gapLog             []EventKey
	// exited holds the containers that exited by themselves (ModeExitStop).
	exited map[string]bool
	rng    *rand.Rand
	// afterList, if set (by this package's tests), runs in the sync
	// callback once the containers are listed, before the plugin's
	// Synchronize (outside every lock: events may run, as in CRI-O).
	afterList func()
	// afterSync, if set (by this package's tests), runs in the sync
	// callback after the plugin's Synchronize returned.
	afterSync func()
	// bg tracks self-exit goroutines; Add only while !stopped, under mu.
	bg sync.WaitGroup
	// syncs records every plugin Synchronize the runtime made.
	syncs []SyncRecord
}

// SyncRecord is one plugin Synchronize the runtime made: when the plugin
// was called (under the event lock: no event ran meanwhile), the
// containers it listed (created and not stopped, as containerd lists
// them) and whether the plugin answered without an error.
type SyncRecord struct {
	At         time.Time
	Containers []string
	OK         bool
}

// Syncs returns the plugin Synchronizes the runtime made, in order.
func (r *Runtime) Syncs() []SyncRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SyncRecord(nil), r.syncs...)
}

// SyncWaitThreshold is the wait for the plugin-sync block above which an
// operation counts as delayed by a synchronizing plugin (SyncWaits); an
// uncontended read lock takes well under a microsecond.
const SyncWaitThreshold = 20 * time.Microsecond

// StartRuntime creates a temporary directory, creates an NRI adaptation
// listening on a socket in it (with empty plugin and plugin config
// directories), and starts it.
func StartRuntime(opts RuntimeOptions) (*Runtime, error) {
	if err := opts.Mode.check(); err != nil {
		return nil, err
	}
	if opts.Mode == "" {
		opts.Mode = ModeContainerd
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.ExitRate == 0 {
		opts.ExitRate = DefaultExitRate
	}
	if opts.GapEvents == 0 {
		opts.GapEvents = DefaultGapEvents
	}
	if opts.RequestTimeout > 0 {
		adaptation.SetPluginRequestTimeout(opts.RequestTimeout)
	}

	dir, err := os.MkdirTemp("", "nri-")
	if err != nil {
		return nil, fmt.Errorf("plugintest: %w", err)
	}
	pluginDir := filepath.Join(dir, "plugins")
	confDir := filepath.Join(dir, "conf.d")
	for _, d := range []string{pluginDir, confDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("plugintest: %w", err)
		}
	}

	r := &Runtime{
		opts:   opts,
		dir:    dir,
		sock:   filepath.Join(dir, "nri.sock"),
		pods:   map[string]*podState{},
		ctrs:   map[string]*api.Container{},
		issued: map[EventKey]int{},
		countC: make(chan struct{}),
		evC:    make(chan struct{}),
		exited: map[string]bool{},
		rng:    rand.New(rand.NewSource(opts.Seed)),
	}
	r.stats.PluginErrors = map[string]int{}
	r.stats.Timeouts = map[string]int{}

	r.nri, err = adaptation.New("sim", "v0", r.synchronize, r.updateContainers,
		adaptation.WithSocketPath(r.sock),
		adaptation.WithPluginPath(pluginDir),
		adaptation.WithPluginConfigPath(confDir),
		adaptation.WithMetrics(recorder{r}),
	)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("plugintest: %w", err)
	}
	if err := r.nri.Start(); err != nil {
		r.nri.Stop()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("plugintest: %w", err)
	}
	r.logf("plugintest: runtime listening on %s", r.sock)
	return r, nil
}

// SocketPath returns the path of the NRI socket plugins connect to.
func (r *Runtime) SocketPath() string { return r.sock }

// Stop stops the adaptation and removes the temporary directory. It is
// idempotent. Note that the adaptation does not close connections of
// external plugins when it stops: they stay connected (and receive no more
// events) until they exit.
func (r *Runtime) Stop() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
		r.bg.Wait()
		r.nri.Stop()
		os.RemoveAll(r.dir)
		r.logf("plugintest: runtime stopped")
	})
}

// WaitPlugins blocks until the plugin count last reported by the adaptation
// (Stats.PluginCount) equals n, or ctx ends. The adaptation reports the count
// when a plugin has been synchronized and appended to the plugin chain, and at
// the end of every event (a plugin dropped during an event is counted out at
// the end of that event; a plugin whose connection merely closed is counted
// out only at the end of the next event).
func (r *Runtime) WaitPlugins(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		count, ch := r.stats.PluginCount, r.countC
		r.mu.Unlock()
		if count == n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("plugintest: waiting for %d plugins (have %d): %w", n, count, ctx.Err())
		}
	}
}

// Current returns the event being delivered right now: its global sequence
// number (1 for the first event the runtime sent), kind and object id. It
// returns zero values between events. Plugins in tests read it to log which
// delivered event they acted on.
func (r *Runtime) Current() (seq uint64, ev Event, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur.seq, r.cur.ev, r.cur.id
}

// Issued returns how many times each (event kind, object id) was delivered to
// the plugins. Keys have N == 0. An event counts as delivered when the
// adaptation call returned no error; a CreateContainer that the runtime
// rejected counts as delivered too (plugins saw it, and the undo events refer
// to it).
func (r *Runtime) Issued() map[EventKey]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[EventKey]int, len(r.issued))
	for k, v := range r.issued {
		out[k] = v
	}
	return out
}

// IssuedLog returns the delivered events in delivery order, each with its
// occurrence number N.
func (r *Runtime) IssuedLog() []EventKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]EventKey(nil), r.issuedLog...)
}

// Delivery is one delivered event (as in IssuedLog) and when the runtime
// delivered it: Start is read, under the event lock, just before the
// adaptation calls the plugins, End just after the call returned. Both are
// wall-clock times (no monotonic reading), so they compare with times
// read in other processes or parsed from logs.
type Delivery struct {
	EventKey
	Start, End time.Time
}

// deliveryTimes is a Delivery's times.
type deliveryTimes struct{ start, end time.Time }

// Deliveries returns the delivered events in delivery order with their
// occurrence numbers and delivery times. Events are serialized, so each
// delivery ends before the next one starts (a ValidateContainerAdjustment
// shares its CreateContainer's times).
func (r *Runtime) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Delivery, len(r.issuedLog))
	for i, k := range r.issuedLog {
		out[i] = Delivery{EventKey: k, Start: r.issuedAt[i].start, End: r.issuedAt[i].end}
	}
	return out
}

// Stats returns a snapshot of the runtime's counters.
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.CreateErrors = append([]string(nil), r.stats.CreateErrors...)
	s.PluginErrorTexts = append([]string(nil), r.stats.PluginErrorTexts...)
	s.PluginErrors = make(map[string]int, len(r.stats.PluginErrors))
	for k, v := range r.stats.PluginErrors {
		s.PluginErrors[k] = v
	}
	s.Timeouts = make(map[string]int, len(r.stats.Timeouts))
	for k, v := range r.stats.Timeouts {
		s.Timeouts[k] = v
	}
	return s
}

// Updates returns the unsolicited container updates received through the
// update function, in order.
func (r *Runtime) Updates() []*api.ContainerUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*api.ContainerUpdate, 0, len(r.updates))
	for _, u := range r.updates {
		out = append(out, cloneMsg(u))
	}
	return out
}

// Pod returns a copy of a pod that has not been removed (nil if unknown).
func (r *Runtime) Pod(id string) *api.PodSandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ps := r.pods[id]; ps != nil {
		return cloneMsg(ps.pod)
	}
	return nil
}

// Pods returns copies of all pods that have not been removed, in creation order.
func (r *Runtime) Pods() []*api.PodSandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*api.PodSandbox
	for _, id := range r.podOrder {
		if ps := r.pods[id]; ps != nil {
			out = append(out, cloneMsg(ps.pod))
		}
	}
	return out
}

// Container returns a copy of a stored container that has not been removed
// (nil if unknown or removed; see AllCreated for removed ones).
func (r *Runtime) Container(id string) *api.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.ctrs[id]; c != nil {
		return cloneMsg(c)
	}
	return nil
}

// Containers returns copies of all stored containers that have not been
// removed, in creation order.
func (r *Runtime) Containers() []*api.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*api.Container
	for _, c := range r.history {
		if r.ctrs[c.Id] == c {
			out = append(out, cloneMsg(c))
		}
	}
	return out
}

// AllCreated returns copies of every successfully created container ever,
// removed ones included, in creation order, each in its final state (with
// its final annotations).
func (r *Runtime) AllCreated() []*api.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*api.Container, 0, len(r.history))
	for _, c := range r.history {
		out = append(out, cloneMsg(c))
	}
	return out
}

//
// Lifecycle operations.
//

// RunPod creates a pod (id "pod-<n>", namespace "default") and sends
// RunPodSandbox. The pod is stored only if the event succeeded.
func (r *Runtime) RunPod(ctx context.Context, name string) (*api.PodSandbox, error) {
	return r.RunPodAnnotated(ctx, name, nil)
}

// RunPodAnnotated is RunPod for a pod with the given annotations.
func (r *Runtime) RunPodAnnotated(ctx context.Context, name string, annotations map[string]string) (*api.PodSandbox, error) {
	defer r.begin()()

	if err := r.checkStopped(); err != nil {
		return nil, err
	}
	n := podSeq.Add(1)
	pod := &api.PodSandbox{
		Id:          fmt.Sprintf("pod-%d", n),
		Name:        name,
		Uid:         fmt.Sprintf("pod-uid-%d", n),
		Namespace:   "default",
		Labels:      map[string]string{"io.kubernetes.pod.name": name},
		Annotations: map[string]string{},
	}
	for k, v := range annotations {
		pod.Annotations[k] = v
	}
	err := r.deliver(EventRunPodSandbox, pod.Id, false, func() error {
		return r.nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: cloneMsg(pod)})
	})
	if err != nil {
		return nil, fmt.Errorf("plugintest: RunPodSandbox %s: %w", pod.Id, err)
	}

	r.mu.Lock()
	r.pods[pod.Id] = &podState{pod: pod}
	r.podOrder = append(r.podOrder, pod.Id)
	out := cloneMsg(pod)
	r.mu.Unlock()
	return out, nil
}

// UpdatePod sends UpdatePodSandbox then, if it succeeded, PostUpdatePodSandbox
// for a pod.
func (r *Runtime) UpdatePod(ctx context.Context, podID string) error {
	defer r.begin()()

	r.mu.Lock()
	ps, err := r.podLocked(podID)
	if err == nil && ps.stopped {
		err = fmt.Errorf("plugintest: pod %s is stopped: %w", podID, ErrState)
	}
	var pod *api.PodSandbox
	if err == nil {
		pod = cloneMsg(ps.pod)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}

	err = r.deliver(EventUpdatePodSandbox, podID, false, func() error {
		_, err := r.nri.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{
			Pod:                    cloneMsg(pod),
			OverheadLinuxResources: &api.LinuxResources{},
			LinuxResources:         &api.LinuxResources{},
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("plugintest: UpdatePodSandbox %s: %w", podID, err)
	}
	err = r.deliver(EventPostUpdatePodSandbox, podID, false, func() error {
		return r.nri.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: cloneMsg(pod)})
	})
	if err != nil {
		return fmt.Errorf("plugintest: PostUpdatePodSandbox %s: %w", podID, err)
	}
	return nil
}

// StopPod stops a pod: like containerd it first stops the pod's containers
// that are not stopped yet (each with a StopContainer event), then sends
// StopPodSandbox. Stopping a stopped pod does nothing. The pod counts as
// stopped even if an event fails (containerd only logs those failures); the
// first error is returned.
func (r *Runtime) StopPod(ctx context.Context, podID string) error {
	defer r.begin()()
	return r.stopPod(ctx, podID)
}

// RemovePod removes a pod: it stops the pod first if needed (see StopPod),
// removes its remaining containers (each with a RemoveContainer event), then
// sends RemovePodSandbox. The pod is removed from the model even if an event
// fails; the first error is returned.
func (r *Runtime) RemovePod(ctx context.Context, podID string) error {
	defer r.begin()()

	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}

	r.mu.Lock()
	ps, err := r.podLocked(podID)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	note(r.stopPod(ctx, podID))
	for _, id := range r.podContainers(podID) {
		note(r.removeContainer(ctx, id))
	}

	r.mu.Lock()
	delete(r.pods, podID)
	pod := cloneMsg(ps.pod)
	r.mu.Unlock()

	err = r.deliver(EventRemovePodSandbox, podID, false, func() error {
		return r.nri.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
	})
	if err != nil {
		note(fmt.Errorf("plugintest: RemovePodSandbox %s: %w", podID, err))
	}
	return first
}

// CreateContainer creates a container (id "ctr-<n>") in a running pod with
// the given annotations and sends CreateContainer. If the adaptation accepts
// it, the adjustments (annotations, env, mounts, args, resources) and updates
// it returned are applied, the container is stored and PostCreateContainer is
// sent; the stored container is returned. If PostCreateContainer fails the
// container is returned together with that error (the container exists).
//
// If the adaptation rejects the creation, it is recorded as a failed creation
// (Stats.FailedCreates), undone as containerd does (StopContainer then
// RemoveContainer for the original container without adjustments), and a
// *CreateRejectedError wrapping the adaptation error is returned.
func (r *Runtime) CreateContainer(ctx context.Context, podID, name string, annotations map[string]string) (*api.Container, error) {
	defer r.begin()()

	r.mu.Lock()
	ps, err := r.podLocked(podID)
	if err == nil && ps.stopped {
		err = fmt.Errorf("plugintest: pod %s is stopped: %w", podID, ErrState)
	}
	var pod *api.PodSandbox
	if err == nil {
		pod = cloneMsg(ps.pod)
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}

	ctr := newContainer(fmt.Sprintf("ctr-%d", ctrSeq.Add(1)), podID, name, annotations)
	id := ctr.Id

	var rpl *api.CreateContainerResponse
	err = r.deliver(EventCreateContainer, id, true, func() error {
		var err error
		rpl, err = r.nri.CreateContainer(ctx, &api.CreateContainerRequest{
			Pod:       cloneMsg(pod),
			Container: cloneMsg(ctr),
		})
		return err
	})
	if errors.Is(err, ErrStopped) {
		return nil, err
	}
	if err != nil {
		r.mu.Lock()
		r.stats.FailedCreates++
		if len(r.stats.CreateErrors) < maxTexts {
			r.stats.CreateErrors = append(r.stats.CreateErrors, err.Error())
		}
		r.mu.Unlock()
		r.logf("plugintest: CreateContainer %s rejected: %v", id, err)
		r.undoCreate(ctx, pod, ctr)
		return nil, &CreateRejectedError{ID: id, Err: err}
	}

	applyAdjustment(ctr, rpl.GetAdjust())
	if n := len(rpl.GetEvict()); n > 0 {
		r.logf("plugintest: CreateContainer %s: ignoring %d requested evictions", id, n)
	}

	r.mu.Lock()
	r.ctrs[id] = ctr
	r.history = append(r.history, ctr)
	r.applyUpdatesLocked(rpl.GetUpdate())
	out := cloneMsg(ctr)
	r.mu.Unlock()

	err = r.deliver(EventPostCreateContainer, id, false, func() error {
		return r.nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{
			Pod:       cloneMsg(pod),
			Container: cloneMsg(out),
		})
	})
	if err != nil {
		return out, fmt.Errorf("plugintest: PostCreateContainer %s: %w", id, err)
	}
	return out, nil
}

// undoCreate sends the events containerd sends when a container creation
// fails after NRI CreateContainer: StopContainer and RemoveContainer for the
// original container. The caller holds the plugin-sync block.
func (r *Runtime) undoCreate(ctx context.Context, pod *api.PodSandbox, orig *api.Container) {
	ctx = context.WithoutCancel(ctx)
	var rpl *api.StopContainerResponse
	err := r.deliver(EventStopContainer, orig.Id, false, func() error {
		var err error
		rpl, err = r.nri.StopContainer(ctx, &api.StopContainerRequest{
			Pod:       cloneMsg(pod),
			Container: cloneMsg(orig),
		})
		return err
	})
	if err != nil {
		r.logf("plugintest: undo StopContainer %s: %v", orig.Id, err)
	} else {
		r.mu.Lock()
		r.applyUpdatesLocked(rpl.GetUpdate())
		r.mu.Unlock()
	}
	err = r.deliver(EventRemoveContainer, orig.Id, false, func() error {
		return r.nri.RemoveContainer(ctx, &api.RemoveContainerRequest{
			Pod:       cloneMsg(pod),
			Container: cloneMsg(orig),
		})
	})
	if err != nil {
		r.logf("plugintest: undo RemoveContainer %s: %v", orig.Id, err)
	}
}

// StartContainer sends StartContainer for a created container; if that
// succeeded the container becomes running and PostStartContainer is sent.
func (r *Runtime) StartContainer(ctx context.Context, id string) error {
	defer r.begin()()

	r.mu.Lock()
	c, pod, err := r.containerLocked(id)
	if err == nil && c.State != api.ContainerState_CONTAINER_CREATED {
		err = fmt.Errorf("plugintest: container %s is %v: %w", id, c.State, ErrState)
	}
	var req *api.StartContainerRequest
	if err == nil {
		req = &api.StartContainerRequest{Pod: pod, Container: cloneMsg(c)}
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}

	err = r.deliver(EventStartContainer, id, false, func() error {
		return r.nri.StartContainer(ctx, req)
	})
	if err != nil {
		return fmt.Errorf("plugintest: StartContainer %s: %w", id, err)
	}

	r.mu.Lock()
	c.State = api.ContainerState_CONTAINER_RUNNING
	c.StartedAt = time.Now().UnixNano()
	post := &api.PostStartContainerRequest{Pod: pod, Container: cloneMsg(c)}
	r.mu.Unlock()

	err = r.deliver(EventPostStartContainer, id, false, func() error {
		return r.nri.PostStartContainer(ctx, post)
	})
	if err != nil {
		return fmt.Errorf("plugintest: PostStartContainer %s: %w", id, err)
	}
	return nil
}

// UpdateContainer requests new CPU shares for a container that is not
// stopped: it sends UpdateContainer, applies the resulting resources (those
// the plugins settled on, or the requested ones) and other containers'
// updates, then sends PostUpdateContainer.
func (r *Runtime) UpdateContainer(ctx context.Context, id string, cpuShares uint64) error {
	defer r.begin()()

	r.mu.Lock()
	c, pod, err := r.containerLocked(id)
	if err == nil && c.State == api.ContainerState_CONTAINER_STOPPED {
		err = fmt.Errorf("plugintest: container %s is stopped: %w", id, ErrState)
	}
	var req *api.UpdateContainerRequest
	if err == nil {
		req = &api.UpdateContainerRequest{
			Pod:       pod,
			Container: cloneMsg(c),
			LinuxResources: &api.LinuxResources{
				Cpu: &api.LinuxCPU{Shares: api.UInt64(cpuShares)},
			},
		}
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	requested := cloneMsg(req.LinuxResources)

	var rpl *api.UpdateContainerResponse
	err = r.deliver(EventUpdateContainer, id, false, func() error {
		var err error
		rpl, err = r.nri.UpdateContainer(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("plugintest: UpdateContainer %s: %w", id, err)
	}

	// As containerd: the last update is the one for the container being
	// updated (nil if no plugin changed it), the others go to other containers.
	final := requested
	ups := rpl.GetUpdate()
	r.mu.Lock()
	if n := len(ups); n > 0 {
		r.applyUpdatesLocked(ups[:n-1])
		if res := ups[n-1].GetLinux().GetResources(); res != nil {
			final = res
		}
	}
	mergeResources(c, final)
	post := &api.PostUpdateContainerRequest{Pod: pod, Container: cloneMsg(c)}
	r.mu.Unlock()

	err = r.deliver(EventPostUpdateContainer, id, false, func() error {
		return r.nri.PostUpdateContainer(ctx, post)
	})
	if err != nil {
		return fmt.Errorf("plugintest: PostUpdateContainer %s: %w", id, err)
	}
	return nil
}

// StopContainer stops a container and sends StopContainer (with the container
// already in the stopped state, as containerd). Stopping a stopped container
// does nothing. The container counts as stopped even if the event fails.
func (r *Runtime) StopContainer(ctx context.Context, id string) error {
	defer r.begin()()
	return r.stopContainer(ctx, id)
}

// RemoveContainer removes a container, stopping it first if needed (see
// StopContainer), and sends RemoveContainer. The container is removed from
// the model even if the event fails.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	defer r.begin()()
	return r.removeContainer(ctx, id)
}

// Lifecycle runs one pod through a whole life: RunPod; then `containers`
// containers are created (all of them), started, updated, stopped and removed,
// phase by phase, so the containers' events interleave; then StopPod and
// RemovePod. A CreateContainer that the runtime rejects is counted (see
// Stats) and the lifecycle goes on without that container. Other errors do
// not stop the lifecycle either (so the pod is always cleaned up); the first
// one is returned, or ctx.Err() if ctx ended meanwhile.
func (r *Runtime) Lifecycle(ctx context.Context, podName string, containers int) error {
	pod, err := r.RunPod(ctx, podName)
	if err != nil {
		return err
	}

	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}

	var ids []string
	for i := 0; i < containers; i++ {
		c, err := r.CreateContainer(ctx, pod.Id, fmt.Sprintf("%s-c%d", podName, i), nil)
		var rejected *CreateRejectedError
		if errors.As(err, &rejected) {
			continue
		}
		note(err)
		if c != nil {
			ids = append(ids, c.Id)
		}
	}
	// A container that exited by itself (ModeExitStop) cannot be started
	// or updated any more; that is not an error of the lifecycle.
	exitedErr := func(id string, err error) error {
		if errors.Is(err, ErrState) && r.exitedByItself(id) {
			return nil
		}
		return err
	}
	for _, id := range ids {
		note(exitedErr(id, r.StartContainer(ctx, id)))
	}
	for i, id := range ids {
		note(exitedErr(id, r.UpdateContainer(ctx, id, uint64(1024+i))))
	}
	for _, id := range ids {
		note(r.StopContainer(ctx, id))
	}
	for _, id := range ids {
		note(r.RemoveContainer(ctx, id))
	}
	note(r.StopPod(ctx, pod.Id))
	note(r.RemovePod(ctx, pod.Id))
	if first == nil {
		first = ctx.Err()
	}
	return first
}

//
// Internal operations; callers hold the plugin-sync block.
//

func (r *Runtime) stopPod(ctx context.Context, podID string) error {
	r.mu.Lock()
	ps, err := r.podLocked(podID)
	r.mu.Unlock()
	if err != nil {
		return err
	}

	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}

	r.mu.Lock()
	if ps.stopped {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()

	for _, id := range r.podContainers(podID) {
		note(r.stopContainer(ctx, id))
	}

	r.mu.Lock()
	ps.stopped = true
	pod := cloneMsg(ps.pod)
	r.mu.Unlock()

	err = r.deliver(EventStopPodSandbox, podID, false, func() error {
		return r.nri.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
	})
	if err != nil {
		note(fmt.Errorf("plugintest: StopPodSandbox %s: %w", podID, err))
	}
	return first
}

func (r *Runtime) stopContainer(ctx context.Context, id string) error {
	r.mu.Lock()
	c, pod, err := r.containerLocked(id)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	if c.State == api.ContainerState_CONTAINER_STOPPED {
		r.mu.Unlock()
		return nil
	}
	c.State = api.ContainerState_CONTAINER_STOPPED
	c.FinishedAt = time.Now().UnixNano()
	req := &api.StopContainerRequest{Pod: pod, Container: cloneMsg(c)}
	r.mu.Unlock()

	var rpl *api.StopContainerResponse
	err = r.deliver(EventStopContainer, id, false, func() error {
		var err error
		rpl, err = r.nri.StopContainer(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("plugintest: StopContainer %s: %w", id, err)
	}
	r.mu.Lock()
	r.applyUpdatesLocked(rpl.GetUpdate())
	r.mu.Unlock()
	return nil
}

func (r *Runtime) removeContainer(ctx context.Context, id string) error {
	r.mu.Lock()
	c, _, err := r.containerLocked(id)
	r.mu.Unlock()
	if err != nil {
		return err
	}

	var first error
	if c.State != api.ContainerState_CONTAINER_STOPPED {
		first = r.stopContainer(ctx, id)
	}

	r.mu.Lock()
	c, pod, err := r.containerLocked(id)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	delete(r.ctrs, id)
	req := &api.RemoveContainerRequest{Pod: pod, Container: cloneMsg(c)}
	r.mu.Unlock()

	err = r.deliver(EventRemoveContainer, id, false, func() error {
		return r.nri.RemoveContainer(ctx, req)
	})
	if err != nil && first == nil {
		first = fmt.Errorf("plugintest: RemoveContainer %s: %w", id, err)
	}
	return first
}

// deliver sends one event with call. It holds the event lock, keeps the
// current-event record around the call, measures it and records the event
// as delivered if call succeeded (or always, if recordOnError).
func (r *Runtime) deliver(ev Event, id string, recordOnError bool, call func() error) error {
	return r.deliverEvent(ev, id, recordOnError, false, call)
}

// deliverEvent is deliver; exit marks a self-exit StopContainer, which
// does not make another container exit.
func (r *Runtime) deliverEvent(ev Event, id string, recordOnError, exit bool, call func() error) error {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	return r.deliverLocked(ev, id, recordOnError, exit, call)
}

// deliverLocked is deliverEvent for a caller that holds evMu.
func (r *Runtime) deliverLocked(ev Event, id string, recordOnError, exit bool, call func() error) error {
	r.mu.Lock()
	// ModeGap: once a gap has its events, the next one waits for its end.
	for r.opts.Mode == ModeGap && r.inGap && r.gapBegun >= r.opts.GapEvents && !r.stopped {
		ch := r.evC
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
	if r.stopped {
		r.mu.Unlock()
		return ErrStopped
	}
	inGap := r.inGap
	if inGap {
		r.gapBegun++
	}
	r.seq++
	r.cur = current{seq: r.seq, ev: ev, id: id}
	r.mu.Unlock()

	start := time.Now()
	err := call()
	lat := time.Since(start)
	at := deliveryTimes{start: start.Round(0), end: start.Add(lat).Round(0)}

	r.mu.Lock()
	r.cur = current{}
	if lat > r.stats.MaxEventLatency {
		r.stats.MaxEventLatency = lat
	}
	if inGap {
		r.gapEnded++
	}
	if err == nil || recordOnError {
		k := EventKey{Event: ev, ID: id}
		r.issued[k]++
		r.issuedLog = append(r.issuedLog, EventKey{Event: ev, ID: id, N: r.issued[k]})
		r.issuedAt = append(r.issuedAt, at)
		r.stats.Events++
		if inGap {
			r.stats.GapEvents++
			r.gapLog = append(r.gapLog, EventKey{Event: ev, ID: id, N: r.issued[k]})
		}
	}
	if r.validated {
		// Validators were asked, whether or not they then rejected the
		// container: each asked validator's handler ran.
		r.validated = false
		k := EventKey{Event: EventValidateContainerAdjustment, ID: id}
		r.issued[k]++
		r.issuedLog = append(r.issuedLog, EventKey{Event: k.Event, ID: id, N: r.issued[k]})
		r.issuedAt = append(r.issuedAt, at)
	}
	if exit {
		r.stats.ExitStops++
	} else if r.opts.Mode == ModeExitStop && !r.stopped && r.rng.Float64() < r.opts.ExitRate {
		r.bg.Add(1)
		go r.exitOne()
	}
	r.wakeLocked()
	r.mu.Unlock()

	if err != nil {
		r.logf("plugintest: %s %s failed after %v: %v", ev, id, lat, err)
	} else {
		r.logf("plugintest: %s %s delivered in %v", ev, id, lat)
	}
	return err
}

//
// Adaptation callbacks.
//

// synchronize is the adaptation's SyncFn. The adaptation calls it with plugin
// synchronization requested, so no event (all hold the plugin-sync block) is
// in flight and the model is stable. Like containerd it sends the pods and
// the containers that are not stopped (containerd omits exited containers).
func (r *Runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	r.mu.Lock()
	var (
		pods []*api.PodSandbox
		ctrs []*api.Container
	)
	for _, id := range r.podOrder {
		if ps := r.pods[id]; ps != nil {
			pods = append(pods, cloneMsg(ps.pod))
		}
	}
	for _, c := range r.history {
		if r.ctrs[c.Id] == c && c.State != api.ContainerState_CONTAINER_STOPPED {
			ctrs = append(ctrs, cloneMsg(c))
		}
	}
	listed := r.afterList
	r.mu.Unlock()

	if listed != nil {
		listed()
	}
	r.logf("plugintest: synchronizing plugin with %d pods, %d containers", len(pods), len(ctrs))
	// As containerd's and CRI-O's NRI wrappers: no event runs during the
	// Synchronize call itself (in ModeContainerd the plugin-sync block
	// already keeps them out of the whole span up to the append).
	r.evMu.Lock()
	rec := SyncRecord{At: time.Now().Round(0), Containers: make([]string, 0, len(ctrs))}
	for _, c := range ctrs {
		rec.Containers = append(rec.Containers, c.Id)
	}
	updates, err := cb(ctx, pods, ctrs)
	r.mu.Lock()
	rec.OK = err == nil
	r.syncs = append(r.syncs, rec)
	r.inGap, r.gapBegun, r.gapEnded = err == nil, 0, 0
	r.mu.Unlock()
	r.evMu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inGap = false
		r.wakeLocked()
		r.mu.Unlock()
	}()
	if err != nil {
		r.logf("plugintest: plugin synchronization failed: %v", err)
		return err
	}
	r.mu.Lock()
	hook := r.afterSync
	r.mu.Unlock()
	if hook != nil {
		hook()
	}
	if r.opts.Mode == ModeGap {
		r.deliverGap()
	}

	r.mu.Lock()
	r.stats.SyncUpdates += len(updates)
	r.applyUpdatesLocked(updates)
	r.mu.Unlock()
	return nil
}

// updateContainers is the adaptation's UpdateFn: unsolicited container
// updates from plugins. They are recorded and applied; none is reported as
// failed.
func (r *Runtime) updateContainers(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range updates {
		if u == nil {
			continue
		}
		r.updates = append(r.updates, cloneMsg(u))
		r.stats.Updates++
	}
	r.applyUpdatesLocked(updates)
	return nil, nil
}

// begin starts a lifecycle operation: in ModeContainerd and ModeExitStop it
// takes the plugin-sync block, as containerd does around each CRI operation
// that sends NRI events; in ModeCRIO and ModeGap it takes none, as CRI-O.
// The returned function ends the operation.
func (r *Runtime) begin() func() {
	r.mu.Lock()
	r.inflight++
	r.wakeLocked()
	r.mu.Unlock()
	var b *adaptation.PluginSyncBlock
	if r.opts.Mode.blocksSync() {
		b = r.blockSync()
	}
	return func() {
		if b != nil {
			b.Unblock()
		}
		r.mu.Lock()
		r.inflight--
		r.wakeLocked()
		r.mu.Unlock()
	}
}

// wakeLocked wakes the waiters on evC.
func (r *Runtime) wakeLocked() {
	close(r.evC)
	r.evC = make(chan struct{})
}

// blockSync takes the plugin-sync block and records how long that took.
func (r *Runtime) blockSync() *adaptation.PluginSyncBlock {
	start := time.Now()
	b := r.nri.BlockPluginSync()
	wait := time.Since(start)
	r.mu.Lock()
	if wait > r.stats.MaxSyncWait {
		r.stats.MaxSyncWait = wait
	}
	if wait > SyncWaitThreshold {
		r.syncWaits = append(r.syncWaits, wait)
	}
	r.mu.Unlock()
	return b
}

// HoldPluginSync takes the runtime's plugin-sync block until release is
// called, as containerd's CRI StopContainer does for the whole of a
// container's grace period (containerd issue 14083): a plugin that connects
// meanwhile is registered but not synchronized, so it is not in the chain
// until release. In ModeCRIO and ModeGap events go on meanwhile (they take
// no block); in ModeContainerd and ModeExitStop the lifecycle operations
// wait for release, as containerd's CRI calls wait behind a queued
// synchronization.
func (r *Runtime) HoldPluginSync() (release func()) {
	b := r.nri.BlockPluginSync()
	var once sync.Once
	return func() { once.Do(b.Unblock) }
}

// SyncWaits returns the waits longer than SyncWaitThreshold that operations
// spent because a plugin was synchronizing, in order.
func (r *Runtime) SyncWaits() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.syncWaits...)
}

// recorder is the adaptation.Metrics implementation of a Runtime.
type recorder struct{ r *Runtime }

var _ adaptation.Metrics = recorder{}

// RecordPluginInvocation notes a validation asked for in the current
// CreateContainer and counts failed invocations per plugin.
func (m recorder) RecordPluginInvocation(plugin, op string, err error) {
	r := m.r
	if op == string(EventValidateContainerAdjustment) {
		r.mu.Lock()
		if r.cur.ev == EventCreateContainer {
			r.validated = true
		}
		r.mu.Unlock()
	}
	if err == nil {
		return
	}
	r.mu.Lock()
	r.stats.PluginErrors[plugin]++
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline exceeded") {
		r.stats.Timeouts[plugin]++
	}
	if len(r.stats.PluginErrorTexts) < maxTexts {
		r.stats.PluginErrorTexts = append(r.stats.PluginErrorTexts,
			fmt.Sprintf("%s %s: %v", plugin, op, err))
	}
	r.mu.Unlock()
	r.logf("plugintest: plugin %s failed %s: %v", plugin, op, err)
}

// RecordPluginLatency is not used (Stats.MaxEventLatency is measured per event).
func (m recorder) RecordPluginLatency(string, string, time.Duration) {}

// RecordPluginAdjustments is not used.
func (m recorder) RecordPluginAdjustments(string, string, *adaptation.ContainerAdjustment, int, int) {
}

// UpdatePluginCount keeps Stats.PluginCount and wakes WaitPlugins on changes.
func (m recorder) UpdatePluginCount(count int) {
	r := m.r
	r.mu.Lock()
	changed := r.stats.PluginCount != count
	if changed {
		r.stats.PluginCount = count
		close(r.countC)
		r.countC = make(chan struct{})
	}
	r.mu.Unlock()
	if changed {
		r.logf("plugintest: plugin count %d", count)
	}
}

//
// Model helpers; callers hold mu where the name says Locked.
//

func (r *Runtime) checkStopped() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return ErrStopped
	}
	return nil
}

func (r *Runtime) podLocked(id string) (*podState, error) {
	if r.stopped {
		return nil, ErrStopped
	}
	ps := r.pods[id]
	if ps == nil {
		return nil, fmt.Errorf("plugintest: pod %q: %w", id, ErrNotFound)
	}
	return ps, nil
}

// containerLocked returns a live container and a copy of its pod.
func (r *Runtime) containerLocked(id string) (*api.Container, *api.PodSandbox, error) {
	if r.stopped {
		return nil, nil, ErrStopped
	}
	c := r.ctrs[id]
	if c == nil {
		return nil, nil, fmt.Errorf("plugintest: container %q: %w", id, ErrNotFound)
	}
	ps := r.pods[c.PodSandboxId]
	if ps == nil {
		return nil, nil, fmt.Errorf("plugintest: pod %q of container %s: %w", c.PodSandboxId, id, ErrNotFound)
	}
	return c, cloneMsg(ps.pod), nil
}

// podContainers returns the ids of a pod's live containers in creation order.
func (r *Runtime) podContainers(podID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, c := range r.history {
		if r.ctrs[c.Id] == c && c.PodSandboxId == podID {
			ids = append(ids, c.Id)
		}
	}
	return ids
}

// applyUpdatesLocked applies container updates to live containers.
func (r *Runtime) applyUpdatesLocked(updates []*api.ContainerUpdate) {
	for _, u := range updates {
		if u == nil {
			continue
		}
		c := r.ctrs[u.ContainerId]
		if c == nil {
			r.logf("plugintest: update for unknown container %q ignored", u.ContainerId)
			continue
		}
		mergeResources(c, u.GetLinux().GetResources())
	}
}

// logf writes a debug line. It may be called with mu held, so Logf must not
// call back into the runtime.
func (r *Runtime) logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf(format, args...)
	}
}

// sortedKeys returns the keys sorted by object id (numerically within the
// same prefix) then by event kind in lifecycle order.
func sortedKeys(m map[EventKey]struct{}) []EventKey {
	order := map[Event]int{}
	for i, e := range AllEvents() {
		order[e] = i
	}
	keys := make([]EventKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.ID != b.ID {
			return idLess(a.ID, b.ID)
		}
		if order[a.Event] != order[b.Event] {
			return order[a.Event] < order[b.Event]
		}
		return a.Event < b.Event
	})
	return keys
}

// idLess orders "ctr-2" before "ctr-10".
func idLess(a, b string) bool {
	pa, na, oka := splitID(a)
	pb, nb, okb := splitID(b)
	if oka && okb && pa == pb {
		return na < nb
	}
	return a < b
}

func splitID(id string) (string, uint64, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return id, 0, false
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return id, 0, false
	}
	return id[:i], n, true
}
