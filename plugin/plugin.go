// Package plugin is the harness NRI plugin authors import to get
// zero-downtime upgrades. It wraps the NRI stub: an author's plugin keeps the
// stub's handler shapes (one-method interfaces found by type assertion), and
// the harness
//
//   - registers with the runtime and takes part in the handover protocol
//     (internal; package handover is its public view) from inside its
//     Synchronize call;
//   - calls the author's handlers only while this instance owns the plugin,
//     so that of two instances running side by side exactly one acts on each
//     event;
//   - stamps every container it creates with a versioned, authenticated
//     annotation (package stamp) and never hands a container stamped by
//     another instance to the author's CreateContainer or Synchronize;
//   - calls an optional Reconcile hook once after it becomes owner, with the
//     containers that older versions stamped.
//
// What the harness changes for the author's handlers, beyond calling them
// on the owner only:
//
//   - Every instance subscribes to CreateContainer and stamps each container
//     it creates, also for a plugin that only observes (a logger) or only
//     validates: the runtime sees an annotation adjustment from it.
//   - The author's Synchronize runs on the instance that becomes owner, with
//     only the containers no instance of the plugin has stamped or
//     synchronized before; Reconcile gets those older versions stamped or
//     synchronized.
//   - The author's Configure runs again on every connection: at each
//     reconnect after the runtime went away, and when a standby reconnects
//     to claim ownership in a new Synchronize. Make it idempotent.
//   - ValidateContainerAdjustment and Shutdown reach the owner's author
//     only; the other instances accept every adjustment.
//   - After a window in which no instance acted (the only instance
//     killed, a runtime restart, a frozen owner the runtime dropped), the
//     new owner catches up inside its Synchronize: the containers created
//     meanwhile that still exist go to the author's Synchronize as
//     unprocessed, and the lifecycle changes of pods and containers an
//     instance had acted on (a start, stop or removal of a container, a
//     pod's stop or removal), which the instances record in the handover
//     directory, go to the author's own StartContainer, StopContainer,
//     RemoveContainer, StopPodSandbox or RemovePodSandbox, once, late:
//     CatchingUp(ctx) tells such a call. For an object the runtime no
//     longer lists only its ids are set. The updates a late
//     StopContainer returns go through UpdateContainers. Changes of an
//     object created and gone inside the window cannot be known.
//
// Converting a stub plugin means replacing stub.New with plugin.New and
// adding plugin.WithVersion (see the package example), or, with no other
// change, importing the drop-in package plugin/stub instead of
// containerd/nri's pkg/stub.
package plugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	nriversion "github.com/containerd/nri/pkg/version"
	"github.com/hashicorp/go-version"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/backoff"
	"github.com/nri-handover/nri-handover/internal/failpoint"
	"github.com/nri-handover/nri-handover/internal/kithook"
	"github.com/nri-handover/nri-handover/internal/lifecycle"
	"github.com/nri-handover/nri-handover/internal/names"
	"github.com/nri-handover/nri-handover/internal/observe"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/internal/stubopt"
	"github.com/nri-handover/nri-handover/stamp"
)

// StampedContainer is a container that an instance of this plugin stamped.
type StampedContainer struct {
	Container *api.Container
	Stamp     stamp.Stamp
}

// ReconcileInterface is implemented by plugins that bring containers
// processed by an older version up to date. Reconcile is called once, in
// its own goroutine, each time this instance becomes owner, with the
// containers whose stamp names an older version (possibly none); a
// container an older version's Synchronize processed without a stamp (it
// existed before the plugin, or was created while no instance acted) comes
// with a stamp that names that version. It runs
// outside any NRI request, so it may call Plugin.UpdateContainers.
type ReconcileInterface interface {
	Reconcile(ctx context.Context, p *Plugin, olderStamped []*StampedContainer) error
}

// InDoubtInterface is implemented by plugins that want to hear of an event
// whose handling is in doubt: the owner died inside its handler, so it may
// or may not have taken effect. The instance that took over calls InDoubt
// once for that event: when the runtime hands it that event, with acting
// true if it then acts on it (WithAtLeastOnce) and false if not (the
// default); or, when it took over at a later event, for a start, stop or
// removal at its catch-up (acting as above: WithAtLeastOnce hands the
// change again), and for any other event it had been called for itself
// (a creation, a pod's run, an update, a Post* event) at once, acting as
// above: WithAtLeastOnce hands a pod's run, an update or a Post* event to
// its handler again, late (CatchingUp), before the next event this
// instance acts on; a creation is past adjusting, and its container, if
// unstamped, is handed to the author's Synchronize as unprocessed. An
// event it was never called for is declared by its protocol key only
// (the log's event_key). An event the owner never ran a handler for (it
// was dropped or frozen before its call) is not in doubt: a pod's run, an
// update or a Post* event is handed to the handler late, once
// (CatchingUp), and InDoubt is not called for it. event is the NRI
// event's name (e.g. "StopContainer"), id the pod's or container's id. It
// may run inside a runtime request: keep it short.
type InDoubtInterface interface {
	InDoubt(ctx context.Context, event, id string, acting bool)
}

// Stats counts what an instance did. All fields only grow.
type Stats struct {
	Acted          uint64 // events handed to the author's handlers
	Skipped        uint64 // events the runtime called this instance for and it did not hand over: another instance owned them
	SkippedStamped uint64 // containers not handed over because another instance stamped them
	BadStamps      uint64 // forged or malformed stamps seen (treated as absent)
	Stamped        uint64 // containers this instance stamped
	Disconnects    uint64 // runtime connections lost without being asked to stop
	// InDoubt counts events a dead owner was inside of when this instance
	// took over (see WithAtLeastOnce).
	InDoubt uint64
	// CaughtUp counts containers no instance had processed (created while
	// nobody acted) that this instance handed to the author's Synchronize
	// after taking over from an owner that died or hung.
	CaughtUp uint64
	// Gaps counts takeovers by this instance that found no instance
	// acting since the last event acted on (the owner died, or was
	// stopped, with no instance running to take over): the events of that
	// window reached no instance. Each is logged with its length and
	// counted in nri_handover_gaps_total.
	Gaps uint64
	// CaughtUpChanges counts lifecycle changes (StartContainer,
	// StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox)
	// of pods and containers an instance had acted on that happened while
	// no instance acted, and that this instance handed to the author's
	// handler at a catch-up (see CatchingUp); and events that reached no
	// instance's handler (the owner was dropped or frozen before its call
	// for them: a pod's run, an update, a Post* event) that this instance
	// handed to the author's handler late, once, with CatchingUp.
	CaughtUpChanges uint64
	// Unrecorded is the number of pods and containers the lifecycle
	// record had no room for, as this instance last saw it at a
	// catch-up: their changes in such a window cannot be known.
	Unrecorded uint64
}

// Plugin is one instance of an NRI plugin run by the harness.
type Plugin struct {
	cfg     config
	author  interface{}
	handles api.EventMask // events the author implements
	version *version.Version
	self    *hapi.Instance
	dir     *protocol.Dir
	coord   *protocol.Coordinator
	hook    *kithook.Instance // the test kit's faults; nil outside the kit
	signer  *stamp.Signer
	// stamper signs this instance's stamps (nil if its version or id
	// cannot be stamped: then every CreateContainer fails, as Sign says);
	// stampKey is the annotation they go under.
	stamper  *stamp.Stamper
	stampKey string
	log      *logrus.Entry

	resync  chan string      // a standby should claim again in a new Synchronize
	catchUp chan struct{}    // an owner should replace its connection to catch up
	obs     observe.Observer // metrics, if the binary links plugin/metrics

	stubMu sync.Mutex
	stub   stub.Stub // the current runtime connection; nil between connections
	// What the runtime said in the last Configure, and the stub's
	// timeouts then; configured: whether the current connection got its
	// Configure (both guarded by stubMu).
	runtime    runtimeInfo
	configured bool

	acted, skipped, skippedStamped, badStamps, stamped, disconnects, caughtUp atomic.Uint64

	// rec is the lifecycle record in the handover directory (nil if the
	// author handles no change a catch-up hands, or it cannot be used;
	// mapped for the life of the process, see release);
	// caughtUpChanges and unrecorded are Stats'.
	rec                         *lifecycle.Table
	recPods                     bool // the author handles RunPodSandbox, StopPodSandbox or RemovePodSandbox
	caughtUpChanges, unrecorded atomic.Uint64
	// lifeGaps is the count of gaps (gaps, and one pending) the last
	// lifecycle catch-up covered (see lifecycleGap).
	lifeGaps atomic.Uint64
	// doubtsSettled is the coordinator's count of events declared in
	// doubt (Coordinator.InDoubt) that the last lifecycle catch-up, or
	// catchUpInDoubt, settled.
	doubtsSettled atomic.Uint64
	// gaps counts the gaps this instance declared (as Coordinator.Gaps,
	// through noteGap); gapSeq is the lifecycle record's Seq when it
	// declared the last one.
	gaps, gapSeq atomic.Uint64
	// unsettled: the objects lifecycle catch-ups left out until the
	// runtime lists them, and their follow-up catch-up.
	unsettled unsettled
	// recent: the events the runtime called this instance's connections
	// for last, to name one declared in doubt later (see declaredInDoubt).
	recent recentCalls
	// owed: the events in doubt declared at a later moment that this
	// instance hands its author again (WithAtLeastOnce; see handOwed).
	owed owedCalls

	// missed holds, by id, the unstamped containers this instance acted
	// on a later event of while no instance had processed them (see
	// adapter.noteMissedCreation): a container still to be handed to the
	// author (pending), or nil for one known processed (handed, or in the
	// synced-unstamped record). Guarded by missedMu.
	missedMu sync.Mutex
	missed   map[string]*api.Container

	closeOnce sync.Once

	// The run: begin sets runCtx and cancel (once), finish sets runErr
	// and closes done.
	lifeMu  sync.Mutex
	runCtx  context.Context
	cancel  context.CancelFunc
	stopped bool // Stop or Close was called
	runErr  error
	done    chan struct{}
}

// runtimeInfo is what a Configure request told the plugin.
type runtimeInfo struct {
	name, version, nriVersion           string
	registrationTimeout, requestTimeout time.Duration
}

// New creates an instance of the plugin p, which implements any of the NRI
// stub's handler interfaces (stub.CreateContainerInterface,
// stub.ValidateContainerAdjustmentInterface and so on) and optionally
// ReconcileInterface. WithVersion is required. New opens the handover
// directory, loads (or creates) the stamp key and starts serving the
// handover protocol; Run connects to the runtime.
//
// New checks the stub options given with WithStubOptions, as the stub would
// apply them, and refuses with an error naming the option any that cannot
// work under the harness (see WithStubOptions).
//
// Whatever p implements, the instance subscribes to CreateContainer to
// stamp each container it creates, the author's Configure runs on every
// connection and the author's Synchronize sees only containers no
// instance stamped or synchronized before:
// see the package documentation.
func New(p interface{}, opts ...Option) (*Plugin, error) {
	c := config{started: time.Now()}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("plugin option: %w", err)
		}
	}
	if err := c.applyDefaults(); err != nil {
		return nil, err
	}
	if c.version == "" {
		return nil, errors.New("plugin version not set: use plugin.WithVersion, -handover-version or $" + EnvVersion)
	}
	v, err := stamp.ParseVersion(c.version)
	if err != nil {
		return nil, err
	}
	if err := resolveIdentity(&c); err != nil {
		return nil, err
	}
	if err := c.sortStubOptions(); err != nil {
		return nil, err
	}
	if c.instance == "" {
		c.instance = randomID()
	}
	if err := stamp.ValidateInstance(c.instance); err != nil {
		return nil, fmt.Errorf("instance id (option, -handover-instance or $%s): %w", EnvInstance, err)
	}
	handles := eventsOf(p)
	if handles == 0 {
		_, reconciles := p.(ReconcileInterface)
		_, syncs := p.(stub.SynchronizeInterface)
		_, shuts := p.(stub.ShutdownInterface)
		if !reconciles && !syncs && !shuts {
			return nil, fmt.Errorf("plugin %T implements no NRI handler interface", p)
		}
	}

	pl := &Plugin{
		cfg:     c,
		author:  p,
		handles: handles,
		version: v,
		resync:  make(chan string, 1),
		catchUp: make(chan struct{}, 1),
		missed:  map[string]*api.Container{},
		done:    make(chan struct{}),
		runtime: runtimeInfo{
			registrationTimeout: stub.DefaultRegistrationTimeout, requestTimeout: stub.DefaultRequestTimeout,
			nriVersion: "unknown",
		},
		self: &hapi.Instance{
			Plugin: c.key, Id: c.instance, Version: v.Original(),
			StartedUnixNano: c.started.UnixNano(), Pid: int32(os.Getpid()),
		},
	}
	pl.log = c.log.WithFields(logrus.Fields{"plugin": c.name, "version": v.Original(), "instance": c.instance})
	if c.metricsAddr != "" && observe.New == nil {
		return nil, observe.ErrNoMetrics
	}
	pl.obs = newObserver(pl) // its gauges read pl.coord only when scraped

	dir, err := protocol.OpenDir(c.root, c.key)
	if err != nil {
		return nil, err
	}
	pl.dir = dir
	key, err := stamp.LoadOrCreateKey(dir.KeyPath())
	if err != nil {
		return nil, fmt.Errorf("stamp key: %w", err)
	}
	if pl.signer, err = stamp.NewSigner(c.key, key); err != nil {
		return nil, err
	}
	pl.rec = pl.openRecord()
	pl.recPods = handles.IsSet(api.Event_RUN_POD_SANDBOX) || handles.IsSet(api.Event_STOP_POD_SANDBOX) ||
		handles.IsSet(api.Event_REMOVE_POD_SANDBOX)
	pl.stamper, _ = pl.signer.Stamper(v, c.instance) // on error, sign reports it per container, as before
	pl.stampKey = pl.signer.Key()
	failpoint, err := failpoint.FromEnv() // only in a build with tag failpoints
	if err != nil {
		return nil, err
	}
	// The test kit may freeze this instance at the protocol's steps, or
	// crash it (nil outside the kit).
	pl.hook = kithook.Lookup(dir.InstanceSocket(c.instance))
	// Killed by the kit, the instance writes no more to the lifecycle
	// record, as a killed process would not: a handler that runs on would
	// record after the acts of the instances that took over (see
	// turn.record).
	pl.hook.OnCrash(func() { _ = pl.rec.Close() })
	failpoint = kithook.Step(pl.hook, failpoint)
	pl.coord, err = protocol.New(protocol.Config{
		Failpoint:    failpoint,
		Dir:          dir,
		Self:         pl.self,
		Policy:       c.policy,
		ClaimTimeout: c.claimTimeout,
		Log:          c.log,
		OnResync:     pl.requestResync,
		OnPromoted: func(epoch uint64) {
			pl.log.WithField("epoch", epoch).Warn("promoted to owner after the previous owner vanished; catching up")
			pl.requestCatchUp()
		},
		OnOutcome:   pl.obs.Outcome,
		OnInDoubt:   pl.declaredInDoubt,
		OnUnacted:   pl.reachedNobody,
		OnGap:       pl.noteGap,
		AtLeastOnce: c.atLeastOnce,
	})
	if err != nil {
		return nil, err
	}
	return pl, nil
}

// resolveIdentity takes the name and index from options, else from the NRI
// environment, else from the binary's name ("10-myplugin"), as the stub does.
func resolveIdentity(c *config) error {
	if c.name == "" {
		c.name = os.Getenv(api.PluginNameEnvVar)
	}
	if c.idx == "" {
		c.idx = os.Getenv(api.PluginIdxEnvVar)
	}
	if c.name == "" || c.idx == "" {
		idx, name, err := api.ParsePluginName(filepath.Base(os.Args[0]))
		if c.idx == "" {
			if err != nil {
				return fmt.Errorf("plugin index not set (option, -idx, $%s or an NN- binary name): %w",
					api.PluginIdxEnvVar, err)
			}
			c.idx = idx
		}
		if c.name == "" {
			if err == nil {
				c.name = name
			} else {
				c.name = filepath.Base(os.Args[0])
			}
		}
	}
	if len(c.idx) != 2 || c.idx[0] < '0' || c.idx[0] > '9' || c.idx[1] < '0' || c.idx[1] > '9' {
		return fmt.Errorf("invalid plugin index %q: want two digits", c.idx)
	}
	// The NRI stub takes the index from the environment and, like the
	// stub, a different one from an option or flag is a conflict.
	if env := os.Getenv(api.PluginIdxEnvVar); env != "" && env != c.idx {
		return fmt.Errorf("plugin index %q (option or -idx) conflicts with $%s=%q: set one of them",
			c.idx, api.PluginIdxEnvVar, env)
	}
	if err := api.CheckPluginName(c.name); err != nil {
		return fmt.Errorf("plugin name (option, -name, $%s or the binary name): %w", api.PluginNameEnvVar, err)
	}
	// The stamp's annotation key and the handover directory take a
	// narrower set of names than NRI: names.Key maps the others.
	c.key = names.Key(c.name)
	return nil
}

// sortStubOptions checks each option given with WithStubOptions: those the
// harness can apply on every connection are kept, WithOnClose callbacks are
// kept apart (the harness needs its own), and those that would break the
// harness are refused by name.
func (c *config) sortStubOptions() error {
	for _, o := range c.stubOptions {
		e, err := stubopt.Inspect(o)
		if err != nil {
			return fmt.Errorf("plugin.WithStubOptions: %w", err)
		}
		for _, f := range e.Fields {
			switch f {
			case "onClose":
				c.onClose = append(c.onClose, e.OnClose)
			case "name":
				if e.PluginName != c.name {
					return fmt.Errorf("plugin.WithStubOptions(%s(%q)) conflicts with the plugin's name %q: "+
						"set the name once, with plugin.WithPluginName", e.Name, e.PluginName, c.name)
				}
			case "idx":
				if e.PluginIdx != c.idx {
					return fmt.Errorf("plugin.WithStubOptions(%s(%q)) conflicts with the plugin's index %q: "+
						"set the index once, with plugin.WithPluginIdx", e.Name, e.PluginIdx, c.idx)
				}
			case "socketPath":
				if c.socketPath != "" && c.socketPath != e.SocketPath {
					return fmt.Errorf("plugin.WithStubOptions(%s(%q)) conflicts with socket path %q: set one of them",
						e.Name, e.SocketPath, c.socketPath)
				}
				c.socketPath = e.SocketPath
			case "dialer", "clientOpts", "serverOpts", "logger", "failurePolicy":
				c.passStubOptions = append(c.passStubOptions, o)
			case "conn":
				return fmt.Errorf("plugin.WithStubOptions(%s) refused: a connection serves once and the harness "+
					"reconnects; use plugin.WithSocketPath, or stub.WithDialer to make each connection", e.Name)
			default:
				return fmt.Errorf("plugin.WithStubOptions(%s) refused: it sets the stub's %q, which the harness "+
					"does not know how to share", e.Name, f)
			}
		}
	}
	return nil
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "instance"
	}
	return fmt.Sprintf("%s-%s", sanitizeID(host), hex.EncodeToString(b))
}

func sanitizeID(s string) string {
	out := []byte(s)
	for i, ch := range out {
		ok := ch == '-' || ch == '_' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z'
		if !ok {
			out[i] = '-'
		}
	}
	return string(out)
}

// Instance is this instance's identity as its peers see it. Its Version
// is the plugin's version as given; its Plugin is the plugin's key, the
// name of its stamp annotation (after the stamp prefix) and of its
// handover directory: Name itself if that is a valid annotation key
// segment, else a valid name derived from it, the same for every instance
// (`nri-handover status --plugin` takes either).
func (p *Plugin) Instance() handover.Instance { return protocol.PublicInstance(p.self) }

// Name is the plugin name the plugin registers with. Stamps and the
// handover directory use the key (Instance().Plugin), which is the same
// unless the name has characters an annotation key cannot carry.
func (p *Plugin) Name() string { return p.cfg.name }

// RegistrationTimeout is the runtime's plugin registration timeout, as
// stub.Stub.RegistrationTimeout: the default until a Configure said
// otherwise, then what the last Configure said.
func (p *Plugin) RegistrationTimeout() time.Duration { return p.runtimeInfo().registrationTimeout }

// RequestTimeout is the runtime's plugin request timeout, as
// stub.Stub.RequestTimeout: the default until a Configure said otherwise,
// then what the last Configure said.
func (p *Plugin) RequestTimeout() time.Duration { return p.runtimeInfo().requestTimeout }

// RuntimeName is the runtime's name from the last Configure ("" before
// the first), e.g. "containerd".
func (p *Plugin) RuntimeName() string { return p.runtimeInfo().name }

// RuntimeVersion is the runtime's version from the last Configure.
func (p *Plugin) RuntimeVersion() string { return p.runtimeInfo().version }

// RuntimeNRIVersion is the runtime's NRI version, as
// stub.Stub.RuntimeNRIVersion ("unknown" before the first Configure).
func (p *Plugin) RuntimeNRIVersion() string { return p.runtimeInfo().nriVersion }

// PluginNRIVersion is the NRI version the plugin is built with, as
// stub.Stub.PluginNRIVersion.
func (p *Plugin) PluginNRIVersion() string { return nriversion.GetFromBuildInfo() }

func (p *Plugin) runtimeInfo() runtimeInfo {
	p.stubMu.Lock()
	defer p.stubMu.Unlock()
	return p.runtime
}

// Idx is the plugin's registration index.
func (p *Plugin) Idx() string { return p.cfg.idx }

// Role is this instance's current role.
func (p *Plugin) Role() handover.Role { return protocol.PublicRole(p.coord.Status().Role) }

// Ready reports whether this instance owns the plugin and is connected to
// the runtime, with a reason; use it for a readiness probe so that a
// rollout waits for the handover.
func (p *Plugin) Ready() (bool, string) {
	ready, why := p.coord.Ready()
	p.stubMu.Lock()
	connected := p.stub != nil && p.configured
	p.stubMu.Unlock()
	if !connected && (ready || p.Role() == handover.RoleOwner) {
		return false, "owner, but not connected to the runtime (reconnecting)"
	}
	return ready, why
}

// Status is a snapshot of this instance's handover state.
func (p *Plugin) Status() handover.Status { return protocol.PublicStatus(p.coord.Status()) }

// RoleChanged returns a channel that is closed at the next role change.
func (p *Plugin) RoleChanged() <-chan struct{} { return p.coord.Changed() }

// Stats returns the instance's counters.
func (p *Plugin) Stats() Stats {
	return Stats{
		Acted: p.acted.Load(), Skipped: p.skipped.Load(), SkippedStamped: p.skippedStamped.Load(),
		BadStamps: p.badStamps.Load(), Stamped: p.stamped.Load(), Disconnects: p.disconnects.Load(),
		InDoubt: p.coord.InDoubt(), CaughtUp: p.caughtUp.Load(), Gaps: p.coord.Gaps(),
		CaughtUpChanges: p.caughtUpChanges.Load(), Unrecorded: p.unrecorded.Load(),
	}
}

// ErrNotOwner is returned by UpdateContainers on an instance that does not
// own the plugin: a retiring or standby instance must not disturb the owner.
var ErrNotOwner = errors.New("this instance does not own the plugin")

// UpdateContainers requests unsolicited container updates from the runtime,
// as stub.UpdateContainers does, but only while this instance is owner.
// Never call it from inside an event handler: the runtime holds its lock
// for the event then, and the call would deadlock.
func (p *Plugin) UpdateContainers(updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	if p.Role() != handover.RoleOwner {
		return nil, ErrNotOwner
	}
	p.stubMu.Lock()
	s := p.stub
	p.stubMu.Unlock()
	if s == nil {
		return nil, stub.ErrNoService
	}
	failed, err := s.UpdateContainers(updates)
	if err != nil {
		return failed, fmt.Errorf("update containers: %w", err)
	}
	return failed, nil
}

func (p *Plugin) requestResync(reason string) {
	select {
	case p.resync <- reason:
	default: // one is pending already
	}
}

// Run connects to the runtime and serves until ctx ends or Stop is
// called, reconnecting with backoff when the runtime goes away. When it
// stops, an owner first hands over to a standby (bounded by the leave
// timeout), then disconnects. Run returns nil after a clean stop, and an
// error at once for a configuration the NRI stub refuses (retrying could
// not change it).
//
// A ctx that can never end (context.Background(), as upstream samples pass
// to the stub's Run) would let SIGTERM kill the process without handing
// over: with such a ctx the harness stops on SIGTERM or SIGINT itself,
// unless WithStopSignals says otherwise.
//
// A Plugin runs once: Run (or Start) a second time returns an error.
func (p *Plugin) Run(ctx context.Context) error {
	if err := p.begin(ctx); err != nil {
		return err
	}
	p.finish(p.loop(nil))
	return p.runErr
}

// Start connects to the runtime and returns once the first connection is
// registered and configured, as stub.Stub.Start does; the plugin then
// serves in the background, as Run does, until ctx ends or Stop is called.
// Failed connections are retried with backoff meanwhile: Start returns an
// error only for a configuration the stub refuses, or when ctx ends or
// Stop is called first. Wait waits for the end.
func (p *Plugin) Start(ctx context.Context) error {
	if err := p.begin(ctx); err != nil {
		return err
	}
	configured := make(chan struct{})
	go func() { p.finish(p.loop(configured)) }()
	select {
	case <-configured:
		return nil
	case <-p.done:
		if p.runErr != nil {
			return p.runErr
		}
		return errors.New("plugin stopped before it was configured")
	}
}

// Stop stops a plugin started by Start or Run, as its context ending
// would (an owner hands over first), and waits until it stopped. On a
// plugin never started it is Close.
func (p *Plugin) Stop() {
	p.lifeMu.Lock()
	cancel := p.cancel
	p.stopped = true
	p.lifeMu.Unlock()
	if cancel == nil {
		p.release()
		return
	}
	cancel()
	<-p.done
}

// Wait waits until a plugin started by Start or Run stopped; on a plugin
// never started it returns at once.
func (p *Plugin) Wait() {
	p.lifeMu.Lock()
	started := p.cancel != nil
	p.lifeMu.Unlock()
	if started {
		<-p.done
	}
}

// begin makes the context the plugin runs in: ctx, ended by Stop and, as
// Run says, by the stop signals.
func (p *Plugin) begin(ctx context.Context) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.cancel != nil {
		return errors.New("plugin already started: a Plugin runs once; create another with New")
	}
	if p.stopped {
		return errors.New("plugin stopped or closed before it started")
	}
	sigs := p.cfg.stopSignals
	if !p.cfg.stopSignalsSet && ctx.Done() == nil { // Background, TODO: never ends
		sigs = defaultStopSignals
	}
	ctx, cancel := context.WithCancel(ctx)
	if len(sigs) > 0 {
		var stopNotify context.CancelFunc
		ctx, stopNotify = signal.NotifyContext(ctx, sigs...)
		prev := cancel
		cancel = func() { stopNotify(); prev() }
		p.log.WithField("signals", fmt.Sprint(sigs)).Debug("stopping on these signals")
	}
	p.runCtx, p.cancel = ctx, cancel
	return nil
}

// finish records how the plugin ended and releases it.
func (p *Plugin) finish(err error) {
	p.runErr = err
	p.cancel() // the signal handler, if any
	p.release()
	close(p.done)
}

// defaultStopSignals are the signals the harness stops on when the caller
// gave it a context that can never end.
var defaultStopSignals = []os.Signal{syscall.SIGTERM, os.Interrupt}

// loop serves until p.runCtx ends; it closes configured (if not nil) when
// the first connection is configured.
func (p *Plugin) loop(configured chan struct{}) error {
	ctx := p.runCtx
	if p.cfg.metricsAddr != "" {
		stop, err := p.obs.Serve(ctx, p.cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics endpoint: %w", err)
		}
		p.log.WithField("addr", p.cfg.metricsAddr).Info("serving /metrics, /healthz, /readyz")
		defer stop()
	}
	delay := backoff.New(reconnectMin, 5*time.Second)
	var lastQuick time.Time // the last reconnect made at once after a working connection
	for {
		c, err := p.connect(ctx)
		if err != nil {
			var permanent *configError
			if errors.As(err, &permanent) {
				p.leave(nil)
				return err
			}
			if ctx.Err() != nil {
				p.leave(nil)
				return nil
			}
			p.log.WithError(err).Warn("cannot connect to the runtime; retrying")
			if !delay.Wait(ctx) {
				p.leave(nil)
				return nil
			}
			continue
		}
		if configured != nil {
			close(configured) // stub.Start returns once configured
			configured = nil
		}
	serving:
		switch p.serve(ctx, c) {
		case stopped:
			if !p.crashed() && p.Role() == handover.RoleOwner && p.unsettled.awaitDue(p.cfg.leaveTimeout) {
				p.requestCatchUp() // the follow-up of a catch-up that left objects out: this instance alone knows them
			}
			if p.catchUpPending() {
				// Asked for before the stop: the containers it hands
				// (some reached by a later event only, see
				// noteMissedCreation) are known to this instance alone.
				if next, err := p.catchUpNow(ctx, c); err != nil {
					p.log.WithError(err).Warn("catch-up at stop: could not replace the runtime connection; the containers it would hand are not handed")
				} else {
					c = next
				}
			}
			if p.Role() != handover.RoleOwner {
				p.handMissedNow()
			}
			p.leave(c.closed)
			if p.crashed() {
				p.disconnect(c)
			} else {
				p.stopQuietly(context.Background(), c)
			}
			return nil
		case catchUp:
			if next, err := p.catchUpNow(ctx, c); err != nil {
				p.log.WithError(err).Warn("could not replace the runtime connection")
			} else {
				c = next
			}
			if p.Role() != handover.RoleOwner {
				p.handMissedNow() // yielded meanwhile
			}
			goto serving
		case lost:
			if old := c.adapter.retiring.Swap(nil); old != nil {
				select {
				case <-old.closed:
				default:
					// Lost before its first event closed the connection
					// it replaced: that one is still in the runtime's
					// chain, and serves on.
					p.log.Warn("runtime connection lost; the connection it replaced serves on")
					p.disconnect(c)
					p.keepServing(old)
					c = old
					goto serving
				}
			}
			p.disconnects.Add(1)
			p.log.Warn("runtime connection lost; reconnecting")
			p.disconnect(c)
			for _, f := range p.cfg.onClose {
				f() // the author's, in addition to the harness's own
			}
			select {
			case <-c.synced: // that connection worked: start the backoff over
				delay.Reset()
				if now := time.Now(); now.Sub(lastQuick) >= quickReconnectEvery {
					// At once: while no instance is in the runtime's chain,
					// every event reaches nobody (a thawed owner's 50 ms
					// wait was most of such a window in the demo).
					lastQuick = now
					continue
				}
			default:
			}
			if !delay.Wait(ctx) {
				p.leave(nil)
				return nil
			}
		case resync:
			// Claim in the Synchronize of a new connection, which closes
			// this one from inside it (no request to it can be in flight).
			next, err := p.replace(ctx, c, false)
			if err == nil {
				c = next
				goto serving
			}
			select {
			case <-c.closed:
				if ctx.Err() == nil {
					p.log.WithError(err).Warn("resync: could not replace the runtime connection; reconnecting")
				}
				p.disconnect(c)
				delay.Reset()
			default:
				// The old connection is still in the runtime's chain and
				// serves on (the cut lets it take over if its owner goes):
				// closing it would leave this instance with none. Ask again
				// later.
				if ctx.Err() == nil {
					wait := delay.Next()
					p.log.WithError(err).WithField("retry_in", wait.String()).Warn("resync: could not replace the runtime connection; keeping the old one")
					time.AfterFunc(wait, func() { p.requestResync("retry after a failed resync") })
				}
				goto serving
			}
		}
	}
}

// catchUpNow replaces c to catch up (see replace). A stop does not cancel
// it: a catch-up that was asked for goes on for up to the leave timeout
// after ctx ends (the owner keeps acting meanwhile, as when it leaves).
func (p *Plugin) catchUpNow(ctx context.Context, c *conn) (*conn, error) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		p.log.WithField("bound", p.cfg.leaveTimeout.String()).Info("stopping: the catch-up asked for goes on first")
		time.AfterFunc(p.cfg.leaveTimeout, cancel)
	})
	defer stop()
	next, err := p.replace(cctx, c, false)
	if err != nil {
		return nil, fmt.Errorf("catch-up: %w", err)
	}
	return next, nil
}

// catchUpPending reports whether this owner has a catch-up to make: one
// was asked for and not made yet, or a missed creation is still to be
// handed (see noteMissedCreation).
func (p *Plugin) catchUpPending() bool {
	if p.Role() != handover.RoleOwner {
		return false
	}
	select {
	case <-p.catchUp:
		return true
	default:
	}
	p.missedMu.Lock()
	defer p.missedMu.Unlock()
	for _, c := range p.missed {
		if c != nil {
			return true
		}
	}
	return false
}

// handMissedNow hands the author the missed creations still pending
// (see noteMissedCreation) of an instance that is no longer owner: it
// yielded before its catch-up's Synchronize, and no other instance knows
// of them (a stopped container is listed by no Synchronize). Its author
// gets no events any more, so this Synchronize runs alone; the updates
// it returns go through UpdateContainers, and the synced-unstamped record
// keeps the containers from being handed again.
func (p *Plugin) handMissedNow() {
	took := p.takeMissed()
	if len(took) == 0 {
		return
	}
	syncer, ok := p.author.(stub.SynchronizeInterface)
	if !ok {
		return
	}
	ids := make([]string, 0, len(took))
	for _, c := range took {
		ids = append(ids, c.GetId())
	}
	synced, err := p.dir.SyncedUnstamped()
	if err != nil {
		p.log.WithError(err).Warn("cannot tell which unstamped containers were synchronized before")
	}
	fresh := took[:0]
	for _, c := range took {
		if _, was := synced[c.GetId()]; !was {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) == 0 {
		return
	}
	viaNote := make(map[string]bool, len(fresh))
	for _, c := range fresh {
		viaNote[c.GetId()] = true
	}
	fresh, notesTaken := p.takeNotes(fresh, viaNote)
	if len(fresh) == 0 {
		return
	}
	p.log.WithField("containers", ids).Warn("no longer owner before the catch-up: handing the missed creations only this instance saw to the author now")
	rt := p.RequestTimeout()
	if rt <= 0 {
		rt = api.DefaultPluginRequestTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), rt)
	defer cancel()
	updates, err := syncer.Synchronize(ctx, nil, fresh)
	if err != nil {
		p.log.WithError(err).Warn("author Synchronize of the missed creations failed; handing them again at this instance's next catch-up")
		p.returnNotes(notesTaken)
		p.restoreMissed(fresh)
		return
	}
	if p.coord.ActedBefore() {
		p.caughtUp.Add(uint64(len(fresh)))
	}
	handed := make([]string, 0, len(fresh))
	for _, c := range fresh {
		handed = append(handed, c.GetId())
	}
	by := protocol.SyncedBy{Version: p.version.Original(), Instance: p.self.Id}
	if err := p.dir.RecordSyncedUnstamped(handed, by, func(string) bool { return true }); err != nil {
		p.log.WithError(err).Warn("cannot record the missed creations handed; a later owner may hand them again")
	} else if err := p.dir.DropMissed(handed); err != nil {
		p.log.WithError(err).Warn("cannot drop the notes of the missed creations handed")
	}
	if len(updates) != 0 {
		if _, err := p.UpdateContainers(updates); err != nil {
			p.log.WithError(err).Warn("cannot apply the author's updates of the missed creations")
		}
	}
}

// reconnectMin is the first step of the backoff between connection
// attempts (a variable for the package's tests).
var reconnectMin = 50 * time.Millisecond

// quickReconnectEvery spaces out the reconnects made at once after a
// connection that had been synchronized: at most one per interval, the
// others wait the backoff, so that a runtime that drops every connection
// right after its Synchronize is not hammered.
const quickReconnectEvery = time.Second

// Close releases a Plugin whose Run or Start was never called: New
// already serves the handover protocol and holds the handover directory.
// On a running plugin it is Stop; after the plugin stopped, or a second
// time, it does nothing. It returns nil: there is nothing an error could
// make the caller do.
func (p *Plugin) Close() error {
	p.Stop()
	return nil
}

// release stops serving the handover protocol and closes the directory.
func (p *Plugin) release() {
	p.closeOnce.Do(func() {
		p.coord.Close()
		p.dir.Close()
		// Unmapped with the register's page: a handler still running
		// after Run returned (the runtime gave up on it) records nothing
		// more, and its change stays pending in the record, as its event
		// stays unfinished in the register (the next owner declares it in
		// doubt). Kept mapped, every instance a process ran held 1.2 MB
		// of mappings to its end: go test -race ./test/ failed with
		// ENOMEM.
		if err := p.rec.Close(); err != nil {
			p.log.WithError(err).Warn("cannot unmap the lifecycle record")
		}
	})
}

type serveEnd int

const (
	stopped serveEnd = iota // ctx ended
	lost                    // the runtime connection broke
	resync                  // reconnect to claim in a new Synchronize
	catchUp                 // replace the connection to hand the author what nobody processed
)

// serve waits on one runtime connection until it must end. A request to
// claim again is honoured only for a standby (or a retired fallback) whose connection has finished
// its Synchronize: one still synchronizing is about to claim anyway, and an
// instance that became owner in the meantime must keep its connection.
func (p *Plugin) serve(ctx context.Context, c *conn) serveEnd {
	for {
		select {
		case <-ctx.Done():
			return stopped
		case <-c.closed:
			return lost
		case <-p.catchUp:
			if p.Role() != handover.RoleOwner {
				p.handMissedNow()
				continue
			}
			return catchUp
		case reason := <-p.resync:
			select {
			case <-c.synced:
			default:
				p.log.WithField("reason", reason).Debug("resync not needed: a Synchronize is in progress")
				continue
			}
			// A retired fallback claims back when its successor leaves.
			if role := p.Role(); role != handover.RoleStandby && role != handover.RoleRetired {
				p.log.WithFields(logrus.Fields{"reason": reason, "role": role.String()}).Debug("resync not needed")
				continue
			}
			p.log.WithField("reason", reason).Info("reconnecting to claim ownership in a new Synchronize")
			return resync
		}
	}
}

// configError is a configuration the runtime connection cannot be made
// with; Run ends with it instead of retrying.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// conn is one connection to the runtime.
type conn struct {
	stub    stub.Stub
	adapter *adapter
	closed  chan struct{} // closed when the connection is lost
	synced  chan struct{} // closed when its Synchronize has returned
	// socket is the connection's unix socket (nil if an author's dialer
	// made it), for closing it so that the runtime notices (closeQuietly).
	socket atomic.Pointer[watchedSocket]
}

// connect creates a stub for this instance and starts it.
func (p *Plugin) connect(ctx context.Context) (*conn, error) { return p.connectWith(ctx, nil) }

// connectWith is connect with setup applied to the connection's adapter
// before the stub starts.
func (p *Plugin) connectWith(ctx context.Context, setup func(*adapter)) (*conn, error) {
	c := &conn{closed: make(chan struct{}), synced: make(chan struct{})}
	var once sync.Once
	opts := []stub.Option{
		stub.WithOnClose(func() {
			once.Do(func() {
				if !p.crashed() {
					// (A killed process tells nobody: the test kit's
					// crash neither.)
					p.coord.DropConn(c.adapter.tag)
				}
				close(c.closed)
			})
		}),
		stub.WithDialer(func(path string) (net.Conn, error) {
			conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				return nil, err
			}
			w := newWatchedSocket(conn)
			c.socket.Store(w)
			return p.hook.WrapConn(w)
		}),
	}
	// The stub reads $NRI_PLUGIN_NAME and $NRI_PLUGIN_IDX itself and refuses
	// an index given twice: pass only what the environment does not say.
	if os.Getenv(api.PluginNameEnvVar) != p.cfg.name {
		opts = append(opts, stub.WithPluginName(p.cfg.name))
	}
	if os.Getenv(api.PluginIdxEnvVar) == "" {
		opts = append(opts, stub.WithPluginIdx(p.cfg.idx))
	}
	opts = append(opts, p.cfg.passStubOptions...)
	if p.cfg.socketPath != "" {
		opts = append(opts, stub.WithSocketPath(p.cfg.socketPath))
	}
	c.adapter = &adapter{p: p, self: c, synced: c.synced, lost: c.closed}
	if setup != nil {
		setup(c.adapter)
	}
	if !c.adapter.quiet {
		events := p.handles
		events.Set(api.Event_CREATE_CONTAINER)
		c.adapter.tag = p.coord.Conn(kindBits(events))
		p.coord.ConnGone(c.adapter.tag, c.adapter.runtimeClosed)
	}
	s, err := stub.New(c.adapter, opts...)
	if err != nil {
		// Nothing a retry could change: the configuration is wrong.
		return nil, &configError{fmt.Errorf("create NRI stub: %w", err)}
	}
	c.stub = s
	c.adapter.stub = s
	if !c.adapter.quiet {
		p.stubMu.Lock()
		p.stub = s
		p.configured = false
		p.stubMu.Unlock()
	}
	// The connection outlives Run's context: an owner asked to stop keeps
	// acting until its successor does (leave), and the stub derives every
	// handler's context from this one. The harness closes the connection
	// itself (disconnect, stopQuietly). A quiet connection is the
	// exception: it serves a stop, whose ctx bounds its registration too
	// (quietSyncWait), and its handlers need no context. Without that
	// bound a stop waited out the stub's registration timeout (5 s) when
	// the runtime did not answer: containerd registers one connection at a
	// time and takes the next only once the previous one is synchronized,
	// which a CRI StopContainer holds off until it ends (containerd issue
	// 14083). Under Kubernetes that is the stopping pod's own stop, so the
	// registration could not succeed before the process exited: seed 002's
	// 5 s without an answering owner (the copy's owner pod deleted, the
	// original's take-back connection queued ahead of its quiet one).
	startCtx := context.WithoutCancel(ctx)
	if c.adapter.quiet {
		startCtx = ctx
	}
	// The stub's Start waits for the runtime's Configure without watching
	// the connection (containerd/nri v0.12.5, stub.Start): a connection the
	// runtime closes after the registration and before Configure (a kill
	// or freeze of this instance, a runtime restart) left it waiting
	// forever, and with it Run: the demo hung at a full core, the rollout's
	// Crash waiting for a Run that never returned. Its close ends the
	// wait; the stub's goroutine is left to the stub.
	started := make(chan error, 1)
	go func() { started <- s.Start(startCtx) }()
	select {
	case err = <-started:
	case <-c.closed:
		err = errors.New("the connection closed before the runtime configured it")
	}
	if err != nil {
		p.disconnect(c)
		return nil, fmt.Errorf("start NRI stub: %w", err)
	}
	return c, nil
}

// disconnect closes a runtime connection. Its handlers stop acting first,
// so that a request still being handled on it cannot act after this
// instance took a role on a newer connection.
func (p *Plugin) disconnect(c *conn) {
	c.adapter.closed.Store(true)
	p.coord.CloseConn(c.adapter.tag)
	p.stubMu.Lock()
	if p.stub == c.stub {
		p.stub = nil
		p.configured = false
	}
	p.stubMu.Unlock()
	c.stub.Stop()
}

// leave hands ownership over before this instance stops; afterwards the
// instance acts on nothing. While its runtime connection is up (lost is
// open), an owner keeps acting and waits, up to the leave timeout, for a
// successor: a standby, or a new instance started meanwhile. Without a
// connection (lost nil or closed) it acts on nothing anyway, and a newcomer
// finds no owner to wait for: it leaves at once. Leave returns by the
// leave timeout even if an author's handler never returns.
func (p *Plugin) leave(lost <-chan struct{}) {
	if p.crashed() {
		p.log.Info("crashed (test kit): stopped without a handover")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.leaveTimeout)
	defer cancel()
	if lost == nil {
		cancel()
	} else {
		go func() {
			select {
			case <-lost:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if handed := p.coord.Leave(ctx); handed {
		p.log.Info("stopped; ownership is with another instance")
	} else {
		p.log.Info("stopped as owner; no successor took over")
	}
}

// crashed reports whether the test kit (plugin/plugintest) crashed this
// instance: it then stops as a killed process would, doing nothing.
func (p *Plugin) crashed() bool { return p.hook.Crashed() }
