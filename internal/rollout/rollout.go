// Package rollout plays a node's plugin upgrades against the in-process NRI
// runtime: a stream of pod and container lifecycles runs while instances of
// the audit sample plugin replace each other, as a DaemonSet rollout with
// maxSurge does (start the new instance, wait until it owns the plugin,
// stop the old one), optionally with owners killed or frozen at random
// moments. It runs on plugin/plugintest's Node, whose ledger (kept by
// wrapping the plugin's handlers) the run is checked against. The demo
// command and the storm tests both use it.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// PluginName is the name the audit plugin registers with.
const PluginName = "audit"

// Order says where a newcomer sits in the runtime's call chain.
type Order int

const (
	// SameIndex registers every instance with the same index, as a real
	// DaemonSet does; the runtime then orders them as it likes.
	SameIndex Order = iota
	// Alternate gives successive instances indices 10 and 09 in turn, so
	// that the newcomer is called first in every other handover and second
	// in the rest.
	Alternate
)

// Config describes one run.
type Config struct {
	// Events is the minimum number of events to deliver.
	Events int
	// Handovers is the number of upgrades (and rollbacks) to perform.
	Handovers int
	// Versions are cycled through by successive instances, e.g. 1.0.0,
	// 2.0.0: upgrade, rollback, upgrade...
	Versions []string
	// ContainersPerPod in each lifecycle.
	ContainersPerPod int
	// Workers run lifecycles concurrently (the runtime serializes events).
	Workers int
	// Order of newcomers in the call chain.
	Order Order
	// Seed for the random handover moments.
	Seed int64
	// KeepOld leaves the retired instance running until the next handover
	// completes instead of stopping it at once, so up to three instances
	// are connected at a time.
	KeepOld bool
	// Mode is the runtime's mode (default plugintest.ModeContainerd).
	Mode plugintest.Mode
	// Faults is the number of owner faults to inject at random moments:
	// each kills the owner (as SIGKILL; a replacement instance of the same
	// version is then started, as the kubelet restarts a container) or
	// freezes it (as SIGSTOP) until the runtime drops it, then thaws it.
	// A fault strikes while another instance is in the runtime's chain to
	// take over (with KeepOld, the one retired at the last handover, or a
	// killed owner's replacement): the first step is then a handover, and
	// a fault due before a survivor is called for events waits for one.
	// Only with no other instance running (no handover yet, or KeepOld
	// off) does it strike a lone owner: the runtime then calls no
	// connection of the plugin until the instance is back, and what it
	// sends meanwhile is declared as a gap and caught up, not acted on.
	Faults int
	// RequestTimeout, if non-zero, is the runtime's request timeout (it
	// bounds how long a frozen owner holds events up). Process-wide: the
	// run sets it back to the default when it ends.
	RequestTimeout time.Duration
	// AtLeastOnce starts every instance with plugin.WithAtLeastOnce: an
	// event in doubt is acted on again by the instance that took over.
	// Events acted on twice are then allowed, each declared in doubt.
	AtLeastOnce bool
	// Log receives the instances' logs; nil discards them.
	Log io.Writer
}

// DefaultConfig is the demo's default: 10,000 events, 20 handovers.
func DefaultConfig() Config {
	return Config{
		Events: 10000, Handovers: 20, Versions: []string{"1.0.0", "2.0.0"},
		ContainersPerPod: 2, Workers: 2, Order: SameIndex, Seed: 1, KeepOld: true,
	}
}

// Handover records one completed handover.
type Handover struct {
	From, To               string // instance ids
	FromVersion, ToVersion string
	// Took is the time from starting the newcomer until it owned the plugin.
	Took time.Duration
}

// Result is what a run measured.
type Result struct {
	Mode      plugintest.Mode
	Report    sim.Report
	Handovers []Handover
	Stats     sim.Stats
	Elapsed   time.Duration
	// ActedByVersion counts acted events per plugin version.
	ActedByVersion map[string]int
	// Instances lists each instance's counters, in start order.
	Instances []InstanceResult
	// StampProblems lists created containers without exactly one valid stamp
	// written by the instance that acted on their CreateContainer.
	StampProblems []string
	// WorkloadErrors lists errors of the lifecycles (first 20).
	WorkloadErrors []string
	// Faults lists the faults injected, e.g. "kill i03-v2.0.0 at event 812".
	Faults []string
	// Unstamped counts the created containers without a valid stamp; each
	// is in one of CaughtUpContainers (handed to an author as
	// unprocessed), Unseen (created and ended while no instance was
	// connected: no Synchronize listed it) and Unprocessed (listed by a
	// Synchronize, or still running, and never handed: a broken catch-up).
	Unstamped, CaughtUpContainers, Unseen int
	// Unprocessed lists (first 20) the unstamped containers that the
	// catch-up should have handed to an author and did not;
	// UnprocessedCount counts them all.
	Unprocessed      []string
	UnprocessedCount int
	// HandedTwice lists containers handed to a catch-up more than once.
	HandedTwice []string
	// CaughtUpChanges counts the lifecycle changes catch-ups handed to an
	// author; ChangesTwice lists those handed twice, or acted on and also
	// handed (duplicates).
	CaughtUpChanges  int
	ChangesTwice     []string
	ChangeDuplicates int
	// InDoubt counts the events the harness declared in doubt (an owner
	// died inside its handler), CaughtUp the containers and lifecycle
	// changes it handed to a catch-up after a gap: both as the instances
	// report them (see harnessCounts). Gaps counts the takeovers that
	// found no instance acting since the last event acted on (declared
	// windows in which events reached no instance).
	InDoubt, CaughtUp, Gaps int
	// Missed sorts the missed events into declared (inside a declared gap
	// window, or declared in doubt) and undeclared, from the runtime's
	// delivery times and the declarations the instances made.
	Missed Missed
	// AtLeastOnce: the instances acted on events in doubt again
	// (Config.AtLeastOnce). ActedAgain then counts the acts beyond the
	// issued count (by a handler, or handed late) of events declared in
	// doubt, the option's allowed duplicates; AgainUndeclared lists the
	// events acted on more often than issued that were not declared.
	AtLeastOnce     bool
	ActedAgain      int
	AgainUndeclared []string
}

// AllMissedDeclared reports whether every missed event was declared: it
// fell in a declared gap window or was declared in doubt (and a window
// was collected for every gap the instances counted).
func (r *Result) AllMissedDeclared() bool {
	return r.Missed.UndeclaredCount == 0 && r.Missed.GapsCaptured
}

// InstanceResult is one instance's view of the run.
type InstanceResult struct {
	ID, Version, Idx string
	Stats            plugin.Stats
	// Faulted tells that a fault killed or froze the instance.
	Faulted bool
}

// OK reports whether the run kept every guarantee: Problems lists none.
func (r *Result) OK() bool { return len(r.Problems()) == 0 }

// eventsKept reports whether every event was acted on exactly once or, the
// contract's two exceptions after a fault, declared in doubt (an owner
// died or was dropped inside it) or caught up (its container or change
// handed to an author later). Events in a declared gap window reached no
// instance: they are lost, declared or not.
func (r *Result) eventsKept() bool {
	return r.duplicatesKept() && r.Report.Missed == r.Missed.InDoubt+r.Missed.CaughtUp && r.Missed.NotActedAgainCount == 0
}

// duplicatesKept reports whether no event was acted on twice, or, with
// AtLeastOnce, none that was not declared in doubt.
func (r *Result) duplicatesKept() bool {
	if r.AtLeastOnce {
		return len(r.AgainUndeclared) == 0
	}
	return r.Report.Duplicates == 0
}

// froze reports whether a fault froze an owner: the runtime drops a frozen
// instance, so drops are then expected.
func (r *Result) froze() bool {
	for _, f := range r.Faults {
		if strings.HasPrefix(f, "freeze ") {
			return true
		}
	}
	return false
}

// Dropped lists, per plugin, the invocations the runtime gave up on because
// the instance exceeded the request timeout: the runtime drops such an
// instance. Calls that failed because a stopped instance closed its
// connection are expected in a rollout (the old pod goes away) and are not
// listed.
func (r *Result) Dropped() []string {
	var out []string
	for p, n := range r.Stats.Timeouts {
		if n != 0 {
			out = append(out, fmt.Sprintf("plugin %s timed out %d times and was dropped", p, n))
		}
	}
	sort.Strings(out)
	return out
}

// Problems explains why OK is false, one line each.
func (r *Result) Problems() []string {
	var out []string
	if !r.eventsKept() {
		out = append(out, r.Report.String())
		if r.Report.Missed != 0 {
			out = append(out, fmt.Sprintf("%d of the %d events not acted on were neither declared in doubt nor caught up (%d in declared gap windows, %d undeclared)",
				r.Report.Missed-r.Missed.InDoubt-r.Missed.CaughtUp, r.Report.Missed, r.Missed.InGap, r.Missed.UndeclaredCount))
		}
		for _, e := range r.Missed.InGapEvents {
			out = append(out, "  lost in a gap window: "+e)
		}
		if n := r.Missed.NotActedAgainCount; n != 0 {
			out = append(out, fmt.Sprintf("%d events declared in doubt were to be acted on again and were not:", n))
			for _, e := range r.Missed.NotActedAgain {
				out = append(out, "  "+e)
			}
		}
	}
	if len(r.Faults) != 0 && r.InDoubt > len(r.Faults) {
		out = append(out, fmt.Sprintf("%d events declared in doubt after %d faults: more than one per fault", r.InDoubt, len(r.Faults)))
	}
	if r.ChangeDuplicates != 0 && len(r.ChangesTwice) == 0 && !r.AtLeastOnce {
		out = append(out, fmt.Sprintf("%d lifecycle changes acted on twice", r.ChangeDuplicates))
	}
	if r.Stats.FailedCreates != 0 {
		out = append(out, fmt.Sprintf("%d container creations failed: %v", r.Stats.FailedCreates, r.Stats.CreateErrors))
	}
	if !r.froze() {
		out = append(out, r.Dropped()...)
	}
	for _, in := range r.Instances {
		if in.Stats.Disconnects != 0 && !in.Faulted {
			out = append(out, fmt.Sprintf("instance %s lost its runtime connection %d times", in.ID, in.Stats.Disconnects))
		}
	}
	if !r.Missed.GapsCaptured {
		out = append(out, fmt.Sprintf("gap windows: collected %d, the instances declared %d gaps: the missed events cannot all be checked",
			len(r.Missed.Windows), r.Gaps))
	}
	if n := r.Missed.UndeclaredCount; n != 0 {
		out = append(out, fmt.Sprintf("%d missed events were not declared (no gap window, not in doubt), in %d runs:", n, len(r.Missed.UndeclaredRuns)))
		for _, u := range r.Missed.UndeclaredRuns {
			out = append(out, "  "+u)
		}
	}
	if r.UnprocessedCount != 0 {
		out = append(out, fmt.Sprintf("%d containers without a stamp were never handed to an author (a Synchronize listed them, or they still run):", r.UnprocessedCount))
		for _, u := range r.Unprocessed {
			out = append(out, "  "+u)
		}
	}
	out = append(out, r.HandedTwice...)
	if r.AtLeastOnce {
		out = append(out, r.AgainUndeclared...)
	} else {
		out = append(out, r.ChangesTwice...)
	}
	out = append(out, r.StampProblems...)
	out = append(out, r.WorkloadErrors...)
	return out
}

type instance struct {
	*plugintest.Instance
	idx     string
	faulted bool
}

type runner struct {
	cfg  Config
	node *plugintest.Node
	all  []*instance
	rng  *rand.Rand
}

// Run performs one rollout run and checks it. It returns an error only if
// the run could not be carried out; broken guarantees are in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Events <= 0 || cfg.Handovers < 0 || cfg.Faults < 0 || len(cfg.Versions) == 0 || cfg.ContainersPerPod <= 0 {
		return nil, fmt.Errorf("rollout: invalid config %+v", cfg)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	node, err := plugintest.NewNode(plugintest.Config{
		Name: PluginName,
		Plugin: func(ver string) (interface{}, []plugin.Option) {
			// The node's ledger records the acts, from the wrapped handlers.
			opts := []plugin.Option{plugin.WithLeaveTimeout(time.Second)}
			if cfg.AtLeastOnce {
				opts = append(opts, plugin.WithAtLeastOnce())
			}
			return &audit.Plugin{Version: ver, Recorder: discard{}}, opts
		},
		Runtime: plugintest.RuntimeOptions{Mode: cfg.Mode, Seed: cfg.Seed, RequestTimeout: cfg.RequestTimeout},
		Log:     cfg.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("rollout: start node: %w", err)
	}
	defer node.Close()
	r := &runner{cfg: cfg, node: node, rng: rand.New(rand.NewSource(cfg.Seed))}
	defer r.stopAll()
	return r.run(ctx)
}

// step is one scheduled change: a handover, or a fault.
type step struct {
	at    int // event count to wait for
	fault bool
}

// schedule spreads the handovers and faults over the stream, each at a
// random moment within its slice; which steps are faults is random too.
func (r *runner) schedule() []step {
	n := r.cfg.Handovers + r.cfg.Faults
	kinds := make([]bool, n)
	for i := 0; i < r.cfg.Faults; i++ {
		kinds[i] = true
	}
	r.rng.Shuffle(n, func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	if r.cfg.Handovers > 0 && r.cfg.KeepOld && kinds[0] {
		// A handover first, so that a retired instance survives each fault.
		for i := range kinds {
			if !kinds[i] {
				kinds[0], kinds[i] = kinds[i], kinds[0]
				break
			}
		}
	}
	sliceLen := r.cfg.Events / (n + 1)
	steps := make([]step, n)
	for i := range steps {
		h := i + 1
		steps[i] = step{at: h*sliceLen - sliceLen/2 + r.rng.Intn(sliceLen/2+1), fault: kinds[i]}
	}
	return steps
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	start := time.Now()
	rt := r.node.Runtime()
	res := &Result{Mode: rt.Mode(), ActedByVersion: map[string]int{}}

	first, err := r.startInstance(0)
	if err != nil {
		return nil, err
	}
	if err := waitOwner(ctx, first); err != nil {
		return nil, err
	}

	// The workload: lifecycles until told to stop; progress is signalled so
	// the schedule can wait for event counts without polling. Workers
	// finish the lifecycle in progress when told to stop, so that no event
	// is cut off half-delivered.
	var stopping atomic.Bool
	stopWork := func() { stopping.Store(true) }
	progress := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWork()
	var errMu sync.Mutex
	for w := 0; w < r.cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 0; !stopping.Load() && ctx.Err() == nil; n++ {
				err := rt.Lifecycle(ctx, fmt.Sprintf("w%d-%d", w, n), r.cfg.ContainersPerPod)
				if err != nil && ctx.Err() == nil {
					errMu.Lock()
					if len(res.WorkloadErrors) < 20 {
						res.WorkloadErrors = append(res.WorkloadErrors, err.Error())
					}
					errMu.Unlock()
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}(w)
	}
	// waitCond waits on the workload's progress until cond holds.
	waitCond := func(ctx context.Context, cond func() bool) error {
		for !cond() {
			select {
			case <-progress:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	waitEvents := func(n int) error {
		return waitCond(ctx, func() bool { return rt.Stats().Events >= n })
	}

	owner := first
	var retired *instance
	started := 1
	for h, st := range r.schedule() {
		if err := waitEvents(st.at); err != nil {
			return nil, err
		}
		if st.fault {
			if err := r.waitSurvivor(ctx, waitCond); err != nil {
				return nil, fmt.Errorf("fault %d: %w", len(res.Faults)+1, err)
			}
			if o := r.actingOwner(); o != nil {
				owner = o // a survivor of an earlier fault may have taken over
			}
			n := len(r.all)
			next, err := r.fault(ctx, res, owner, started, waitCond)
			if err != nil {
				return nil, fmt.Errorf("fault %d: %w", len(res.Faults), err)
			}
			started += len(r.all) - n // a killed owner's replacement
			owner = next
			continue
		}
		begin := time.Now()
		next, err := r.startInstance(started)
		if err != nil {
			return nil, err
		}
		started++
		// The newcomer owns; or, after a fault, an instance that took
		// over from a frozen owner by the cut superseded it meanwhile.
		to, err := r.waitSettled(ctx, next)
		if err != nil {
			return nil, fmt.Errorf("handover %d: %w", h+1, err)
		}
		res.Handovers = append(res.Handovers, Handover{
			From: owner.ID(), To: to.ID(),
			FromVersion: owner.Version(), ToVersion: to.Version(), Took: time.Since(begin),
		})
		// As the DaemonSet controller does once the new pod is ready.
		if retired != nil && retired != to {
			_ = retired.Stop()
		}
		if to != owner {
			if r.cfg.KeepOld {
				retired = owner
			} else {
				_ = owner.Stop()
			}
		}
		owner = to
	}
	if err := waitEvents(r.cfg.Events); err != nil {
		return nil, err
	}
	if len(res.Faults) != 0 {
		// The run ends only once an instance acts again after the last
		// fault: else the events after it would be left to a takeover
		// that never comes (no instance declared them, none caught up).
		actCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := waitCond(actCtx, r.acting)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("no instance acting after the last fault: %w", err)
		}
	}
	stopWork()
	wg.Wait()
	r.stopAll()

	res.Elapsed = time.Since(start)
	res.Stats = rt.Stats()
	res.Report = r.node.Ledger().Compare(rt.Issued(), nil)
	deliveries := rt.Deliveries()
	unacted := r.node.Ledger().Unacted(deliveries)
	for v, n := range res.Report.ByVersion {
		res.ActedByVersion[v] = n
	}
	for _, in := range r.all {
		st := in.Plugin().Stats()
		res.Instances = append(res.Instances, InstanceResult{
			ID: in.ID(), Version: in.Version(), Idx: in.idx, Stats: st, Faulted: in.faulted,
		})
		inDoubt, caughtUp := harnessCounts(st)
		res.InDoubt += inDoubt
		res.CaughtUp += caughtUp
		res.Gaps += int(st.Gaps)
	}
	timeout := r.cfg.RequestTimeout
	if timeout <= 0 {
		timeout = api.DefaultPluginRequestTimeout
	}
	res.Missed = classify(unacted, deliveries, r.node.Declarations(), r.node.CatchUps(), r.node.CaughtUpChanges(), res.Gaps, timeout)
	res.Missed.checkActedAgain(r.cfg.AtLeastOnce)
	check, err := r.node.Check()
	if err != nil {
		return nil, err
	}
	res.StampProblems, res.Unstamped = withoutCaughtUp(check.StampProblems, r.node.CatchUps()), check.Unstamped
	res.CaughtUpContainers, res.Unseen = check.CaughtUp, check.Unseen
	res.Unprocessed, res.UnprocessedCount, res.HandedTwice = check.Unprocessed, check.UnprocessedCount, check.HandedTwice
	res.CaughtUpChanges, res.ChangesTwice, res.ChangeDuplicates = check.CaughtUpChanges, check.ChangesTwice, check.ChangeDuplicates
	if r.cfg.AtLeastOnce {
		var again map[plugintest.EventKey]bool
		res.AtLeastOnce = true
		res.ActedAgain, again, res.AgainUndeclared = res.Missed.declaredAgain(r.actedAgain())
		res.StampProblems = withoutCreatedAgain(res.StampProblems, again)
	}
	return res, nil
}

// problemContainer is the id of the container a stamp problem is about:
// plugintest words each "container <id>: ...".
func problemContainer(problem string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(problem, "container "), ":")
	return id
}

// withoutCreatedAgain drops from the stamp problems the containers
// created by two instances whose CreateContainer was declared in doubt
// and acted on again (Config.AtLeastOnce: what the option asks).
func withoutCreatedAgain(problems []string, again map[plugintest.EventKey]bool) []string {
	var out []string
	for _, p := range problems {
		if !again[plugintest.EventKey{Event: plugintest.EventCreateContainer, ID: problemContainer(p)}] || !strings.Contains(p, ", created by ") {
			out = append(out, p)
		}
	}
	return out
}

// actedAgain returns, by event and object, how many more times than the
// runtime issued it an event was acted on: by a handler (the ledger) or
// handed late (a catch-up, or an event in doubt handed again).
func (r *runner) actedAgain() map[plugintest.EventKey]int {
	count := map[plugintest.EventKey]int{}
	for k, n := range r.node.Runtime().Issued() {
		k.N = 0
		count[k] -= n
	}
	for _, c := range r.node.CaughtUpChanges() {
		count[plugintest.EventKey{Event: c.Event, ID: c.ID}]++
	}
	for k, n := range r.node.Ledger().Counts() {
		count[k] += n
	}
	again := map[plugintest.EventKey]int{}
	for k, n := range count {
		if n > 0 {
			again[k] = n
		}
	}
	return again
}

// withoutCaughtUp drops from the node's stamp problems the containers
// without a stamp that a catch-up handed to an author as unprocessed: the
// contract's way of processing a container created while no instance
// acted. Every other unstamped container is a problem (Unprocessed, or
// created in a declared gap window, whose events are missed).
func withoutCaughtUp(problems []string, handed []plugintest.CatchUp) []string {
	caughtUp := make(map[string]bool, len(handed))
	for _, c := range handed {
		caughtUp[c.ID] = true
	}
	var out []string
	for _, p := range problems {
		if !caughtUp[problemContainer(p)] || strings.Contains(p, ": stamped by ") {
			out = append(out, p)
		}
	}
	return out
}

// harnessCounts returns what an instance reports of events in doubt and of
// containers it caught up on.
func harnessCounts(st plugin.Stats) (inDoubt, caughtUp int) {
	return int(st.InDoubt), int(st.CaughtUp + st.CaughtUpChanges)
}

// fault kills or freezes the owner and waits until the plugin has an owner
// again; it returns the owner then.
func (r *runner) fault(ctx context.Context, res *Result, owner *instance, started int,
	waitCond func(context.Context, func() bool) error) (*instance, error) {
	rt := r.node.Runtime()
	at := rt.Stats().Events
	owner.faulted = true
	if r.rng.Intn(2) == 0 {
		res.Faults = append(res.Faults, fmt.Sprintf("kill %s at event %d", owner.ID(), at))
		owner.Crash()
		// The kubelet restarts the container: a new instance, same version.
		next, err := r.startInstanceAt(started, owner.Version())
		if err != nil {
			return nil, err
		}
		return r.waitSettled(ctx, next)
	}
	res.Faults = append(res.Faults, fmt.Sprintf("freeze %s at event %d", owner.ID(), at))
	timeouts := func() int {
		n := 0
		for _, v := range rt.Stats().Timeouts {
			n += v
		}
		return n
	}
	before := timeouts()
	owner.Freeze()
	// Frozen until the runtime gives up on it (a request to it timed out),
	// or, if it was not connected, until the stream went on without it for
	// a while; then thawed, as a SIGSTOP a little longer than the runtime's
	// request timeout.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := waitCond(waitCtx, func() bool {
		return timeouts() > before || rt.Stats().Events >= at+frozenEvents
	})
	owner.Thaw()
	if err != nil {
		return nil, fmt.Errorf("frozen %s: %w", owner.ID(), err)
	}
	return r.waitAnyOwner(ctx)
}

// survivorCalls is how many events another instance must be called for,
// after a fault is due, to count as in the runtime's chain.
const survivorCalls = 2

// waitSurvivor waits, on the workload's progress, until an instance other
// than the acting owner is in the runtime's chain: called for
// survivorCalls events since now (it skips them). It returns at once if no
// other instance runs (a fault then strikes a lone owner, see
// Config.Faults).
func (r *runner) waitSurvivor(ctx context.Context, waitCond func(context.Context, func() bool) error) error {
	base := map[*instance]uint64{}
	for _, in := range r.all {
		if in.Running() {
			base[in] = in.Plugin().Stats().Skipped
		}
	}
	if len(base) < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := waitCond(ctx, func() bool {
		o := r.actingOwner()
		for in, n := range base {
			if in != o && in.Running() && in.Plugin().Stats().Skipped >= n+survivorCalls {
				return true
			}
		}
		return false
	})
	if err != nil {
		var seen []string
		for in, n := range base {
			seen = append(seen, fmt.Sprintf("%s (%v, running %v): called for %d events since",
				in.ID(), in.Plugin().Role(), in.Running(), in.Plugin().Stats().Skipped-n))
		}
		sort.Strings(seen)
		st := r.node.Runtime().Stats()
		return fmt.Errorf("no instance but the owner in the runtime's chain (%d events, %d plugins connected; %s): %w",
			st.Events, st.PluginCount, strings.Join(seen, ", "), err)
	}
	return nil
}

// actingOwner returns the running instance that owns the plugin and acts
// (Ready: a frozen owner that another instance took over from may still
// see itself as owner until it runs again), else the owner as
// Node.Owner finds it, nil if none.
func (r *runner) actingOwner() *instance {
	for _, in := range r.all {
		if ready, _ := in.Plugin().Ready(); ready && in.Running() && in.Plugin().Role() == handover.RoleOwner {
			return in
		}
	}
	return r.owner()
}

// waitSettled waits, on the instances' change notifications, until the
// newly started instance next owns the plugin and acts, or has settled in
// another role while another instance owns and acts (a retired instance
// that took ownership back when the owner was killed or frozen may keep
// it, superseding next); it returns the owner then, for at most 30 s.
func (r *runner) waitSettled(ctx context.Context, next *instance) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		changed, stop := r.roleChanges()
		role := next.Plugin().Role()
		if o := r.owner(); o != nil && (o == next || role != handover.RoleJoining && role != handover.RoleUnknown) {
			if ready, _ := o.Plugin().Ready(); ready {
				close(stop)
				return o, nil
			}
		}
		select {
		case <-changed:
			close(stop)
		case <-ctx.Done():
			close(stop)
			_, why := next.Plugin().Ready()
			return nil, fmt.Errorf("%s started: no instance owns and acts (%s is %v: %s): %w",
				next.ID(), next.ID(), role, why, ctx.Err())
		}
	}
}

// roleChanges returns a channel that receives once any running instance's
// role changes; close stop when no longer waiting.
func (r *runner) roleChanges() (changed chan struct{}, stop chan struct{}) {
	changed = make(chan struct{}, len(r.all))
	stop = make(chan struct{})
	for _, in := range r.all {
		if in.Running() {
			go func(ch <-chan struct{}) {
				select {
				case <-ch:
					changed <- struct{}{}
				case <-stop:
				}
			}(in.Plugin().RoleChanged())
		}
	}
	return changed, stop
}

// frozenEvents is how many events a frozen owner that the runtime does
// not drop (it was not connected) lets pass before it is thawed.
const frozenEvents = 200

// waitAnyOwner waits, on the instances' change notifications, until one
// owns the plugin, for at most 30 s.
func (r *runner) waitAnyOwner(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		changed, stop := r.roleChanges()
		o := r.owner()
		if o != nil {
			close(stop)
			return o, nil
		}
		select {
		case <-changed:
			close(stop)
		case <-ctx.Done():
			close(stop)
			return nil, fmt.Errorf("no owner: %w", ctx.Err())
		}
	}
}

// actingTail is how many of the latest deliveries acting waits to see
// acted on.
const actingTail = 8

// acting reports whether an instance acts now: the latest deliveries
// (actingTail of them, each ended) were all acted on.
func (r *runner) acting() bool {
	all := r.node.Runtime().Deliveries()
	var tail []plugintest.Delivery
	for i := len(all) - 1; i >= 0 && len(tail) < actingTail; i-- {
		if !all[i].End.IsZero() {
			tail = append(tail, all[i])
		}
	}
	return len(tail) == actingTail && len(r.node.Ledger().Unacted(tail)) == 0
}

// owner returns the running instance that owns the plugin, if any.
func (r *runner) owner() *instance {
	o := r.node.Owner()
	for _, in := range r.all {
		if o != nil && in.Instance == o {
			return in
		}
	}
	return nil
}

// startInstance starts the n-th instance at its version in the cycle.
func (r *runner) startInstance(n int) (*instance, error) {
	return r.startInstanceAt(n, r.cfg.Versions[n%len(r.cfg.Versions)])
}

// startInstanceAt starts the n-th instance at version ver and returns once
// it runs.
func (r *runner) startInstanceAt(n int, ver string) (*instance, error) {
	idx := "10"
	if r.cfg.Order == Alternate && n%2 == 1 {
		idx = "09"
	}
	in, err := r.node.Start(ver, plugin.WithPluginIdx(idx))
	if err != nil {
		return nil, err
	}
	out := &instance{Instance: in, idx: idx}
	r.all = append(r.all, out)
	return out, nil
}

func (r *runner) stopAll() {
	for _, in := range r.all {
		_ = in.Stop()
	}
}

// waitOwner waits until the instance owns the plugin, for at most 30 s.
func waitOwner(ctx context.Context, in *instance) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return in.WaitOwner(ctx)
}

// discard is the audit plugin's recorder in a run: the node's ledger
// records the acts.
type discard struct{}

func (discard) Record(event, id string) error {
	if event == "" {
		return errors.New("empty event")
	}
	return nil
}

// HandoverTempBase is where temporary handover directories go: /dev/shm,
// a tmpfs, where it is usable (on a node the handover directory is under
// /var/run, a tmpfs as well, so claims cost what they cost there), else
// the default temporary directory.
func HandoverTempBase() string {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err == nil && st.IsDir() && unix.Access(shm, unix.W_OK) == nil {
		return shm
	}
	return ""
}
