package plugintest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/kithook"
	"github.com/nri-handover/nri-handover/internal/protocol"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/stamp"
)

// Constructor returns the author's plugin value for one new instance at
// version (a value with the NRI stub's handler methods, as plugin.New
// takes), and the options the author creates it with. The node adds its
// own options after them: WithVersion, WithPluginName, WithPluginIdx,
// WithSocketPath, WithHandoverDir, WithInstanceID and WithLogger, and a
// dialer through WithStubOptions; options given to Node.Start come last.
type Constructor func(version string) (p interface{}, opts []plugin.Option)

// Config configures a Node.
type Config struct {
	// Plugin makes the instances; required.
	Plugin Constructor
	// Name is the plugin name the instances register with; default
	// "plugintest".
	Name string
	// Idx is their plugin index; default "10".
	Idx string
	// Runtime configures the node's runtime.
	Runtime RuntimeOptions
	// Log receives the instances' logs and, unless Runtime.Logf is set,
	// the runtime's lines (field component=runtime: each delivery, each
	// Synchronize); nil discards them.
	Log io.Writer
}

// Node is one node's NRI runtime, handover directory and the instances of
// one plugin. Its methods are safe for concurrent use.
type Node struct {
	cfg    Config
	rt     *Runtime
	root   string
	ledger *Ledger
	log    *logrus.Logger
	// declared collects the instances' gap and in-doubt declarations.
	declared *declarations

	mu        sync.Mutex
	instances []*Instance
	catchUps  []CatchUp
	changes   []CaughtUpChange
	pods      int
	closeOnce sync.Once
}

// NewNode starts a runtime and creates a handover directory (under
// /dev/shm where it can, a tmpfs as on a node). Close the node when done.
func NewNode(cfg Config) (*Node, error) {
	if cfg.Plugin == nil {
		return nil, errors.New("plugintest: Config.Plugin (the constructor) is required")
	}
	if cfg.Name == "" {
		cfg.Name = "plugintest"
	}
	if cfg.Idx == "" {
		cfg.Idx = "10"
	}
	log := logrus.New()
	// Milliseconds, as the harness logs by default: a handover's steps
	// are apart by less than a second.
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000Z07:00"})
	log.SetOutput(io.Discard)
	if cfg.Log != nil {
		log.SetOutput(cfg.Log)
	}
	if cfg.Log != nil && cfg.Runtime.Logf == nil {
		// The runtime's deliveries beside the instances' lines: what a
		// failed run's log is read for.
		rtLog := log.WithField("component", "runtime")
		cfg.Runtime.Logf = func(format string, args ...any) { rtLog.Infof(format, args...) }
	}
	rt, err := StartRuntime(cfg.Runtime)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(tempBase(), "nho-")
	if err != nil {
		rt.Stop()
		return nil, fmt.Errorf("plugintest: handover directory: %w", err)
	}
	declared := &declarations{}
	log.AddHook(declared)
	return &Node{cfg: cfg, rt: rt, root: root, ledger: NewLedger(), log: log, declared: declared}, nil
}

// tempBase is /dev/shm where it is usable, else the default temporary
// directory.
func tempBase() string {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err == nil && st.IsDir() && unix.Access(shm, unix.W_OK) == nil {
		return shm
	}
	return ""
}

// Runtime returns the node's runtime.
func (n *Node) Runtime() *Runtime { return n.rt }

// Ledger returns the record of which instance acted on which event.
func (n *Node) Ledger() *Ledger { return n.ledger }

// HandoverDir returns the handover root directory the instances share.
func (n *Node) HandoverDir() string { return n.root }

// CatchUp is one container the harness handed an instance's author as
// unprocessed, in the author's Synchronize: created while no instance
// acted (or with a stamp that did not verify), and not handed before.
type CatchUp struct {
	// Instance is the id of the instance whose author was handed it.
	Instance string
	// ID is the container's id.
	ID string
	// At is when the author's Synchronize was called (wall clock).
	At time.Time
}

// CatchUps returns the containers handed to the instances' authors as
// unprocessed, in the order they were handed.
func (n *Node) CatchUps() []CatchUp {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]CatchUp(nil), n.catchUps...)
}

// CaughtUpChange is one lifecycle change (StartContainer, StopContainer,
// RemoveContainer, StopPodSandbox, RemovePodSandbox) a catch-up handed an
// instance's author late (plugin.CatchingUp): it happened while no
// instance acted. It is not in the ledger.
type CaughtUpChange struct {
	// Instance is the id of the instance whose author was handed it.
	Instance string
	// Event and ID name the change.
	Event Event
	ID    string
	// At is when the author's handler was called (wall clock).
	At time.Time
}

// CaughtUpChanges returns the lifecycle changes handed to the instances'
// authors by catch-ups, in the order they were handed.
func (n *Node) CaughtUpChanges() []CaughtUpChange {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]CaughtUpChange(nil), n.changes...)
}

// Instances returns every instance started, in start order.
func (n *Node) Instances() []*Instance {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Instance(nil), n.instances...)
}

// Owner returns the running instance that owns the plugin, nil if none.
func (n *Node) Owner() *Instance {
	for _, in := range n.Instances() {
		if in.Running() && in.p.Role() == handover.RoleOwner {
			return in
		}
	}
	return nil
}

// Start creates an instance of the plugin at version and runs it (Run, in
// a goroutine); opts are added after the node's own options (e.g. a
// different WithPluginIdx; the name, handover directory and instance id
// must stay the node's). It returns once the instance runs; see
// Instance.WaitOwner.
func (n *Node) Start(version string, opts ...plugin.Option) (*Instance, error) {
	n.mu.Lock()
	seq := len(n.instances)
	n.mu.Unlock()
	id := instanceID(seq, version)
	dir, err := protocol.OpenDir(n.root, n.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("plugintest: %w", err)
	}
	socket := dir.InstanceSocket(id)
	dir.Close()

	in := &Instance{n: n, id: id, version: version, socket: socket, done: make(chan struct{})}
	in.h = kithook.Register(socket)
	in.conns = &conns{h: in.h}
	in.h.SetConnWrapper(in.conns.wrap)
	author, aopts := n.cfg.Plugin(version)
	in.handlers = newHandlers(author, func(ev Event, oid string) { n.ledger.Record(ev, oid, id, version) })
	in.handlers.inDoubt = func(ev Event, oid string, acting bool) {
		at := time.Now().Round(0)
		n.declared.add(Declaration{Instance: id, Start: at, End: at, Event: ev, ID: oid, Acting: acting})
	}
	in.handlers.namedInDoubt = func(ev Event, oid string, acting bool) { n.declared.name(id, ev, oid, acting) }
	in.handlers.caughtUp = func(ev Event, oid string) {
		at := time.Now().Round(0)
		n.mu.Lock()
		n.changes = append(n.changes, CaughtUpChange{Instance: id, Event: ev, ID: oid, At: at})
		n.mu.Unlock()
	}
	in.handlers.handed = func(ids []string) {
		at := time.Now().Round(0)
		n.mu.Lock()
		for _, c := range ids {
			n.catchUps = append(n.catchUps, CatchUp{Instance: id, ID: c, At: at})
		}
		n.mu.Unlock()
	}
	all := append(append([]plugin.Option(nil), aopts...),
		plugin.WithVersion(version),
		plugin.WithPluginName(n.cfg.Name),
		plugin.WithPluginIdx(n.cfg.Idx),
		plugin.WithSocketPath(n.rt.SocketPath()),
		plugin.WithHandoverDir(n.root),
		plugin.WithInstanceID(id),
		plugin.WithLogger(logrus.NewEntry(n.log)),
	)
	all = append(all, opts...)
	in.p, err = plugin.New(in.handlers, all...)
	if err != nil {
		kithook.Unregister(socket)
		return nil, fmt.Errorf("plugintest: start instance %s: %w", id, err)
	}
	if in.p.Name() != n.cfg.Name || in.p.Instance().ID != id {
		kithook.Unregister(socket)
		return nil, fmt.Errorf("plugintest: start instance %s: its name and id are the node's (Config.Name): options to Start must not change them", id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() {
		in.err = in.p.Run(ctx)
		close(in.done)
	}()
	n.mu.Lock()
	n.instances = append(n.instances, in)
	n.mu.Unlock()
	return in, nil
}

// instanceID names the seq-th instance, e.g. "i03-v2.0.0".
func instanceID(seq int, version string) string {
	b := []byte(version)
	for i, ch := range b {
		ok := ch == '-' || ch == '_' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z'
		if !ok {
			b[i] = '-'
		}
	}
	return fmt.Sprintf("i%02d-v%s", seq, b)
}

// Upgrade replaces the owner as a DaemonSet rollout with maxSurge does: it
// starts an instance at version, waits until it owns the plugin, then
// stops the previous owner (a clean stop: it hands over first). It returns
// the new instance.
func (n *Node) Upgrade(ctx context.Context, version string, opts ...plugin.Option) (*Instance, error) {
	old := n.Owner()
	next, err := n.Start(version, opts...)
	if err != nil {
		return nil, err
	}
	if err := next.WaitOwner(ctx); err != nil {
		return next, err
	}
	if old != nil {
		if err := old.Stop(); err != nil {
			return next, fmt.Errorf("plugintest: stop %s: %w", old.id, err)
		}
	}
	return next, nil
}

// Rollback is Upgrade to an older version: with the default handover
// policy (handover.NewestInstance) the newest instance takes over whatever
// its version.
func (n *Node) Rollback(ctx context.Context, version string, opts ...plugin.Option) (*Instance, error) {
	return n.Upgrade(ctx, version, opts...)
}

// Rollout starts the plugin at versions[0], then upgrades (or rolls back)
// to each later version in turn, as a DaemonSet rollout does, running three
// pod lifecycles of two containers each after every step; it returns the
// node's Check. Rollout(ctx, "1.0.0", "2.0.0", "1.0.0") is an upgrade and
// a rollback.
func (n *Node) Rollout(ctx context.Context, versions ...string) (Result, error) {
	if len(versions) == 0 {
		return Result{}, fmt.Errorf("plugintest: Rollout needs at least one version")
	}
	first, err := n.Start(versions[0])
	if err != nil {
		return Result{}, err
	}
	if err := first.WaitOwner(ctx); err != nil {
		return Result{}, fmt.Errorf("plugintest: %s did not become owner: %w", versions[0], err)
	}
	for i, v := range versions {
		if i > 0 {
			if _, err := n.Upgrade(ctx, v); err != nil {
				return Result{}, err
			}
		}
		if err := n.Lifecycles(ctx, 3, 2); err != nil {
			return Result{}, err
		}
	}
	return n.Check()
}

// Lifecycles runs pods pods, one after the other, through their whole
// lives with containers containers each (see Runtime.Lifecycle).
func (n *Node) Lifecycles(ctx context.Context, pods, containers int) error {
	for i := 0; i < pods; i++ {
		n.mu.Lock()
		n.pods++
		name := fmt.Sprintf("pod%d", n.pods)
		n.mu.Unlock()
		if err := n.rt.Lifecycle(ctx, name, containers); err != nil {
			return err
		}
	}
	return nil
}

// Load runs pod lifecycles (containers containers each, see
// Runtime.Lifecycle) on workers goroutines, back to back, until the
// returned stop function is called: the load under which to upgrade. stop
// lets the lifecycles under way finish (no event is cut off) and returns
// the first error one of them returned.
func (n *Node) Load(ctx context.Context, workers, containers int) (stop func() error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		stopped = make(chan struct{})
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopped:
					return
				case <-ctx.Done():
					return
				default:
				}
				n.mu.Lock()
				n.pods++
				name := fmt.Sprintf("pod%d", n.pods)
				n.mu.Unlock()
				if err := n.rt.Lifecycle(ctx, name, containers); err != nil && ctx.Err() == nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	var once sync.Once
	return func() error {
		once.Do(func() { close(stopped) })
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// Result is what Check found.
type Result struct {
	// Events compares the events the runtime delivered, of the kinds every
	// instance subscribed to, with the calls of the author's handlers.
	Events Report
	// StampProblems lists the created containers (first 20) without one
	// valid stamp, or stamped by another instance than the one whose
	// handler saw their CreateContainer.
	StampProblems []string
	// Unstamped counts the created containers without a valid stamp (all
	// of them, not only the first 20): containers no instance processed
	// at their creation. Each is also counted in exactly one of CaughtUp,
	// Unseen and Unprocessed.
	Unstamped int
	// CaughtUp counts the unstamped containers handed to an author as
	// unprocessed (see CatchUps).
	CaughtUp int
	// Unseen counts the unstamped containers that no runtime Synchronize
	// listed, that no instance acted on any event of, and that were
	// stopped or removed by the time of Check: they were created and ended
	// while no instance was connected to act on them or to be
	// synchronized with them, so nothing could hand them to an author.
	Unseen int
	// Unprocessed lists (first 20) the unstamped containers never handed
	// to an author although a runtime Synchronize listed them after their
	// creation, or an instance acted on a later event of theirs, or that
	// were still running at Check: containers the catch-up should have
	// covered. UnprocessedCount counts all of them.
	Unprocessed      []string
	UnprocessedCount int
	// HandedTwice lists (first 20) the containers handed to an author as
	// unprocessed more than once.
	HandedTwice []string
	// CaughtUpChanges counts the lifecycle changes catch-ups handed to an
	// author (see Node.CaughtUpChanges). ChangesTwice lists (first 20)
	// the events handed or acted on more often than the runtime issued
	// them: a change handed twice, or acted on and also handed;
	// ChangeDuplicates sums the excess over all of them.
	CaughtUpChanges  int
	ChangesTwice     []string
	ChangeDuplicates int
}

// OK reports whether every event reached the author's handlers exactly
// once and every container carries one valid stamp.
func (r Result) OK() bool {
	return r.Events.OK() && len(r.StampProblems) == 0 && r.ChangeDuplicates == 0
}

// Err returns nil if OK, else an error listing what is wrong.
func (r Result) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	b.WriteString("plugintest: ")
	b.WriteString(r.Events.String())
	for _, p := range append(append([]string(nil), r.StampProblems...), r.ChangesTwice...) {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return errors.New(b.String())
}

// Check compares the node's ledger with the events the runtime delivered
// and verifies every created container's stamp. Call it when no event is
// in flight.
func (n *Node) Check() (Result, error) {
	var res Result
	mask := ^api.EventMask(0)
	for _, in := range n.Instances() {
		mask &= in.handlers.subscribed()
	}
	kinds := kindsOf(mask)
	res.Events = n.ledger.Compare(n.rt.Issued(), func(e Event) bool { return kinds[e] })

	dir, err := protocol.OpenDir(n.root, n.cfg.Name)
	if err != nil {
		return res, fmt.Errorf("plugintest: check stamps: %w", err)
	}
	keyPath := dir.KeyPath()
	dir.Close()
	key, err := stamp.LoadOrCreateKey(keyPath)
	if err != nil {
		return res, fmt.Errorf("plugintest: check stamps: %w", err)
	}
	signer, err := stamp.NewSigner(n.cfg.Name, key)
	if err != nil {
		return res, fmt.Errorf("plugintest: check stamps: %w", err)
	}
	handed := map[string]int{}
	firstHand := map[string]CatchUp{}
	for _, cu := range n.CatchUps() {
		handed[cu.ID]++
		if handed[cu.ID] == 1 {
			firstHand[cu.ID] = cu
		}
		if f := firstHand[cu.ID]; handed[cu.ID] == 2 && len(res.HandedTwice) < maxTexts {
			res.HandedTwice = append(res.HandedTwice, fmt.Sprintf("container %s: handed to a catch-up more than once (%s at %s, %s at %s)",
				cu.ID, f.Instance, f.At.UTC().Format("15:04:05.000000"), cu.Instance, cu.At.UTC().Format("15:04:05.000000")))
		}
	}
	res.CaughtUpChanges, res.ChangesTwice, res.ChangeDuplicates = n.checkChanges()
	listed := map[string]time.Time{} // container -> first listed
	for _, s := range n.rt.Syncs() {
		for _, id := range s.Containers {
			if _, ok := listed[id]; !ok {
				listed[id] = s.At
			}
		}
	}
	created := map[string]time.Time{}
	for _, d := range n.rt.Deliveries() {
		if d.Event == EventCreateContainer {
			created[d.ID] = d.Start
		}
	}
	for _, c := range n.rt.AllCreated() {
		st, err := signer.Verify(c.Id, c.Annotations)
		acted := n.ledger.Acted(EventCreateContainer, c.Id)
		var problem string
		switch {
		case err != nil:
			res.Unstamped++
			problem = fmt.Sprintf("container %s: %v", c.Id, err)
			live := n.rt.Container(c.Id) != nil && c.State != api.ContainerState_CONTAINER_STOPPED
			switch {
			case handed[c.Id] != 0:
				res.CaughtUp++
			case listed[c.Id].IsZero() && !live && !n.ledger.actedOn(c.Id):
				res.Unseen++
			default:
				res.UnprocessedCount++
				if len(res.Unprocessed) < maxTexts {
					why := "still running"
					if !live && listed[c.Id].IsZero() {
						why = fmt.Sprintf("created %s, a later event of it acted on", created[c.Id].UTC().Format("15:04:05.000000"))
					}
					if t := listed[c.Id]; !t.IsZero() {
						why = fmt.Sprintf("created %s, listed by a runtime Synchronize at %s",
							created[c.Id].UTC().Format("15:04:05.000000"), t.UTC().Format("15:04:05.000000"))
					}
					res.Unprocessed = append(res.Unprocessed, fmt.Sprintf("container %s: no stamp, %s, never handed to an author", c.Id, why))
				}
			}
		case len(acted) != 1 || acted[0] != st.Instance:
			problem = fmt.Sprintf("container %s: stamped by %s, created by %v", c.Id, st.Instance, acted)
		}
		if problem != "" && len(res.StampProblems) < maxTexts {
			res.StampProblems = append(res.StampProblems, problem)
		}
	}
	sort.Strings(res.StampProblems)
	return res, nil
}

// checkChanges counts the lifecycle changes caught up and lists those
// handed or acted on more often than issued.
func (n *Node) checkChanges() (count int, twice []string, excess int) {
	issued := map[EventKey]int{}
	for k, c := range n.rt.Issued() {
		k.N = 0
		issued[k] += c
	}
	handed := map[EventKey]int{}
	for _, c := range n.CaughtUpChanges() {
		handed[EventKey{Event: c.Event, ID: c.ID}]++
		count++
	}
	keys := make([]EventKey, 0, len(handed))
	for k := range handed {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		acted := len(n.ledger.Acted(k.Event, k.ID))
		if acted+handed[k] <= issued[k] {
			continue
		}
		excess += acted + handed[k] - issued[k]
		if len(twice) < maxTexts {
			twice = append(twice, fmt.Sprintf("%s %s: issued %d, acted on %d, handed by a catch-up %d",
				k.Event, k.ID, issued[k], acted, handed[k]))
		}
	}
	return count, twice, excess
}

// Verify is Check, as one error: nil when every event reached the author's
// handlers exactly once and every container carries one valid stamp.
func (n *Node) Verify() error {
	res, err := n.Check()
	if err != nil {
		return err
	}
	return res.Err()
}

// Close stops every instance still running (thawing frozen ones first),
// stops the runtime and removes the handover directory. A request timeout
// set through Config.Runtime is set back to the default.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		for _, in := range n.Instances() {
			in.Thaw()
			_ = in.Stop()
			kithook.Unregister(in.socket)
		}
		n.rt.Stop()
		os.RemoveAll(n.root)
		if n.cfg.Runtime.RequestTimeout != 0 {
			adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout)
		}
	})
}

// Instance is one instance of the author's plugin on a Node.
type Instance struct {
	n        *Node
	id       string
	version  string
	socket   string
	p        *plugin.Plugin
	h        *kithook.Instance
	conns    *conns
	handlers *handlers

	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, with its error in err
	err    error
}

// ID is the instance id, e.g. "i01-v2.0.0" (the ledger names instances so).
func (in *Instance) ID() string { return in.id }

// Version is the plugin version the instance runs.
func (in *Instance) Version() string { return in.version }

// Plugin is the harness's instance (its role, status and counters).
func (in *Instance) Plugin() *plugin.Plugin { return in.p }

// Done is closed when the instance's Run has returned.
func (in *Instance) Done() <-chan struct{} { return in.done }

// Running reports whether the instance's Run has not returned.
func (in *Instance) Running() bool {
	select {
	case <-in.done:
		return false
	default:
		return true
	}
}

// WaitOwner waits, on the instance's change notifications, until it owns
// the plugin, or ctx ends, or the instance stops.
func (in *Instance) WaitOwner(ctx context.Context) error {
	for {
		ch := in.p.RoleChanged()
		// Owner, and acting: the runtime has it in its chain (Ready).
		if ready, _ := in.p.Ready(); ready && in.p.Role() == handover.RoleOwner {
			return nil
		}
		select {
		case <-ch:
		case <-in.done:
			return fmt.Errorf("plugintest: instance %s stopped before it owned the plugin: %v", in.id, in.err)
		case <-ctx.Done():
			_, why := in.p.Ready()
			return fmt.Errorf("plugintest: instance %s never became owner (%s): %w", in.id, why, ctx.Err())
		}
	}
}

// Stop stops the instance as the kubelet does, by ending Run's context
// (SIGTERM): an owner hands over to a standby first. It waits for Run and
// returns what Run returned. It may be called again.
func (in *Instance) Stop() error {
	in.cancel()
	<-in.done
	return in.err
}

// Crash stops the instance abruptly, as SIGKILL would: its runtime
// connection and its handover socket close without a handover (no Leave).
// Handlers of the author's that are still running go on, unseen: their
// results reach nobody. It waits for Run to return.
func (in *Instance) Crash() {
	in.h.Crash()
	in.conns.cut()
	in.cancel()
	<-in.done
}

// Freeze stops the instance as SIGSTOP would: its runtime connection and
// its handover service neither read nor answer, and its handover protocol
// halts at its next step, until Thaw. The runtime drops a plugin that does
// not answer within its request timeout. (The harness's background
// goroutines, such as a standby's watch of the owner, are not frozen.)
func (in *Instance) Freeze() { in.h.Freeze() }

// Thaw ends a Freeze, as SIGCONT would.
func (in *Instance) Thaw() { in.h.Thaw() }
