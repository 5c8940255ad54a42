// Package rollout plays a node's plugin upgrades against the in-process NRI
// runtime: a stream of pod and container lifecycles runs while instances of
// the audit sample plugin replace each other, as a DaemonSet rollout with
// maxSurge does (start the new instance, wait until it owns the plugin,
// stop the old one). It checks the run against an independent ledger. The
// demo command and the storm tests both use it.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
	"github.com/nri-handover/nri-handover/stamp"
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
}

// InstanceResult is one instance's view of the run.
type InstanceResult struct {
	ID, Version, Idx string
	Stats            plugin.Stats
}

// OK reports whether the run kept every guarantee.
func (r *Result) OK() bool {
	if !r.Report.OK() || r.Stats.FailedCreates != 0 || len(r.StampProblems) != 0 || len(r.WorkloadErrors) != 0 {
		return false
	}
	if len(r.Dropped()) != 0 {
		return false
	}
	for _, in := range r.Instances {
		if in.Stats.Disconnects != 0 {
			return false
		}
	}
	return true
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
	if !r.Report.OK() {
		out = append(out, r.Report.String())
	}
	if r.Stats.FailedCreates != 0 {
		out = append(out, fmt.Sprintf("%d container creations failed: %v", r.Stats.FailedCreates, r.Stats.CreateErrors))
	}
	out = append(out, r.Dropped()...)
	for _, in := range r.Instances {
		if in.Stats.Disconnects != 0 {
			out = append(out, fmt.Sprintf("instance %s lost its runtime connection %d times", in.ID, in.Stats.Disconnects))
		}
	}
	out = append(out, r.StampProblems...)
	out = append(out, r.WorkloadErrors...)
	return out
}

type instance struct {
	p       *plugin.Plugin
	idx     string
	version string
	cancel  context.CancelFunc
	done    chan error
}

type runner struct {
	cfg    Config
	rt     *sim.Runtime
	root   string
	ledger *sim.Ledger
	log    *logrus.Logger
	all    []*instance
}

// Run performs one rollout run and checks it. It returns an error only if
// the run could not be carried out; broken guarantees are in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Events <= 0 || cfg.Handovers < 0 || len(cfg.Versions) == 0 || cfg.ContainersPerPod <= 0 {
		return nil, fmt.Errorf("rollout: invalid config %+v", cfg)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		return nil, fmt.Errorf("rollout: start runtime: %w", err)
	}
	defer rt.Stop()
	root, err := os.MkdirTemp(HandoverTempBase(), "nho-")
	if err != nil {
		return nil, fmt.Errorf("rollout: handover dir: %w", err)
	}
	defer os.RemoveAll(root)

	log := logrus.New()
	log.SetOutput(io.Discard)
	if cfg.Log != nil {
		log.SetOutput(cfg.Log)
	}
	r := &runner{cfg: cfg, rt: rt, root: root, ledger: sim.NewLedger(), log: log}
	defer r.stopAll()
	return r.run(ctx)
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	start := time.Now()
	rng := rand.New(rand.NewSource(r.cfg.Seed))
	res := &Result{ActedByVersion: map[string]int{}}

	first, err := r.startInstance(ctx, 0)
	if err != nil {
		return nil, err
	}
	if err := waitOwner(ctx, first.p); err != nil {
		return nil, err
	}

	// The workload: lifecycles until told to stop; progress is signalled so
	// the handover schedule can wait for event counts without polling.
	// Workers finish the lifecycle in progress when told to stop, so that no
	// event is cut off half-delivered.
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
				err := r.rt.Lifecycle(ctx, fmt.Sprintf("w%d-%d", w, n), r.cfg.ContainersPerPod)
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
	waitEvents := func(n int) error {
		for r.rt.Stats().Events < n {
			select {
			case <-progress:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}

	owner := first
	var retired *instance
	step := r.cfg.Events / (r.cfg.Handovers + 1)
	for h := 1; h <= r.cfg.Handovers; h++ {
		// A random moment within this handover's slice of the stream.
		at := h*step - step/2 + rng.Intn(step/2+1)
		if err := waitEvents(at); err != nil {
			return nil, err
		}
		begin := time.Now()
		next, err := r.startInstance(ctx, h)
		if err != nil {
			return nil, err
		}
		if err := waitOwner(ctx, next.p); err != nil {
			return nil, fmt.Errorf("handover %d: %w", h, err)
		}
		res.Handovers = append(res.Handovers, Handover{
			From: owner.p.Instance().Id, To: next.p.Instance().Id,
			FromVersion: owner.version, ToVersion: next.version, Took: time.Since(begin),
		})
		// As the DaemonSet controller does once the new pod is ready.
		if retired != nil {
			r.stop(retired)
		}
		if r.cfg.KeepOld {
			retired = owner
		} else {
			r.stop(owner)
		}
		owner = next
	}
	if err := waitEvents(r.cfg.Events); err != nil {
		return nil, err
	}
	stopWork()
	wg.Wait()
	r.stopAll()

	res.Elapsed = time.Since(start)
	res.Stats = r.rt.Stats()
	res.Report = r.ledger.Compare(r.rt.Issued(), nil)
	for v, n := range res.Report.ByVersion {
		res.ActedByVersion[v] = n
	}
	for _, in := range r.all {
		res.Instances = append(res.Instances, InstanceResult{
			ID: in.p.Instance().Id, Version: in.version, Idx: in.idx,
			Stats: in.p.Stats(),
		})
	}
	res.StampProblems, err = r.checkStamps()
	if err != nil {
		return nil, err
	}
	return res, nil
}

// startInstance starts the n-th instance and returns once it runs.
func (r *runner) startInstance(ctx context.Context, n int) (*instance, error) {
	ver := r.cfg.Versions[n%len(r.cfg.Versions)]
	idx := "10"
	if r.cfg.Order == Alternate && n%2 == 1 {
		idx = "09"
	}
	id := fmt.Sprintf("i%02d-v%s", n, ver)
	rec := &ledgerRecorder{l: r.ledger, instance: id, version: ver}
	p, err := plugin.New(&audit.Plugin{Version: ver, Recorder: rec},
		plugin.WithVersion(ver),
		plugin.WithPluginName(PluginName),
		plugin.WithPluginIdx(idx),
		plugin.WithSocketPath(r.rt.SocketPath()),
		plugin.WithHandoverDir(r.root),
		plugin.WithInstanceID(id),
		plugin.WithLeaveTimeout(time.Second),
		plugin.WithLogger(logrus.NewEntry(r.log)),
	)
	if err != nil {
		return nil, fmt.Errorf("start instance %s: %w", id, err)
	}
	ictx, cancel := context.WithCancel(ctx)
	in := &instance{p: p, idx: idx, version: ver, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- p.Run(ictx) }()
	r.all = append(r.all, in)
	return in, nil
}

// stop stops an instance as the kubelet would (SIGTERM) and waits for it.
func (r *runner) stop(in *instance) {
	if in.cancel == nil {
		return
	}
	in.cancel()
	<-in.done
	in.cancel = nil
}

func (r *runner) stopAll() {
	for _, in := range r.all {
		r.stop(in)
	}
}

// waitOwner waits, on the instance's change notifications, until it owns
// the plugin.
func waitOwner(ctx context.Context, p *plugin.Plugin) error {
	for {
		ch := p.RoleChanged()
		if p.Role() == plugin.RoleOwner {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_, why := p.Ready()
			return fmt.Errorf("instance %s never became owner (%s): %w", p.Instance().Id, why, ctx.Err())
		}
	}
}

// checkStamps verifies every created container carries one valid stamp of
// the instance that the ledger says acted on its CreateContainer.
func (r *runner) checkStamps() ([]string, error) {
	key, err := stamp.LoadOrCreateKey(r.root + "/" + PluginName + "/stamp.key")
	if err != nil {
		return nil, fmt.Errorf("check stamps: %w", err)
	}
	signer, err := stamp.NewSigner(PluginName, key)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, c := range r.rt.AllCreated() {
		st, err := signer.Verify(c.Id, c.Annotations)
		acted := r.ledger.Acted(sim.EventCreateContainer, c.Id)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("container %s: %v", c.Id, err))
		case len(acted) != 1 || acted[0] != st.Instance:
			problems = append(problems, fmt.Sprintf("container %s: stamped by %s, created by %v", c.Id, st.Instance, acted))
		}
		if len(problems) >= 20 {
			break
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// ledgerRecorder records the audit plugin's acts into the run's ledger.
type ledgerRecorder struct {
	l                 *sim.Ledger
	instance, version string
}

func (l *ledgerRecorder) Record(event, id string) error {
	if event == "" {
		return errors.New("empty event")
	}
	l.l.Record(sim.Event(event), id, l.instance, l.version)
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
