package sim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/sim"
)

// failAfter bounds waits for conditions; it is a failure deadline, never a
// stand-in for a condition.
const failAfter = 20 * time.Second

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.FatalLevel)
	os.Exit(m.Run())
}

// testPlugin is a minimal stub-based plugin that subscribes to every event,
// records each one in its ledger and optionally adds annotations in
// CreateContainer or blocks in StartContainer.
type testPlugin struct {
	instance string
	version  string
	rt       *sim.Runtime
	ledger   *sim.Ledger
	annotate map[string]string
	block    chan struct{} // if non-nil, StartContainer blocks until it is closed

	syncOnce sync.Once
	synced   chan struct{}

	mu         sync.Mutex
	syncPods   []*api.PodSandbox
	syncCtrs   []*api.Container
	seen       map[sim.EventKey]map[string]string // annotations seen, per (kind, id)
	badCurrent []string
}

func newPlugin(rt *sim.Runtime, instance string, annotate map[string]string) *testPlugin {
	return &testPlugin{
		instance: instance,
		version:  "v1",
		rt:       rt,
		ledger:   sim.NewLedger(),
		annotate: annotate,
		synced:   make(chan struct{}),
		seen:     map[sim.EventKey]map[string]string{},
	}
}

// start connects the plugin as name/idx and waits until its Synchronize ran.
func (p *testPlugin) start(t *testing.T, name, idx string) {
	t.Helper()
	s, err := stub.New(p, stub.WithSocketPath(p.rt.SocketPath()),
		stub.WithPluginName(name), stub.WithPluginIdx(idx))
	if err != nil {
		t.Fatalf("stub.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-p.synced:
	case <-done:
		t.Fatalf("plugin %s stopped before synchronizing", p.instance)
	case <-time.After(failAfter):
		t.Fatalf("plugin %s did not synchronize", p.instance)
	}
}

func (p *testPlugin) record(ev sim.Event, id string, ann map[string]string) {
	seq, cev, cid := p.rt.Current()
	p.mu.Lock()
	if seq == 0 || cev != ev || cid != id {
		p.badCurrent = append(p.badCurrent,
			fmt.Sprintf("%s %s: current is #%d %s %s", ev, id, seq, cev, cid))
	}
	p.seen[sim.EventKey{Event: ev, ID: id}] = maps.Clone(ann)
	p.mu.Unlock()
	p.ledger.Record(ev, id, p.instance, p.version)
}

func (p *testPlugin) seenAnnotations(ev sim.Event, id string) (map[string]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ann, ok := p.seen[sim.EventKey{Event: ev, ID: id}]
	return ann, ok
}

func (p *testPlugin) checkCurrent(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.badCurrent {
		t.Errorf("plugin %s: %s", p.instance, s)
	}
}

func (p *testPlugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	p.syncPods, p.syncCtrs = pods, ctrs
	p.mu.Unlock()
	p.syncOnce.Do(func() { close(p.synced) })
	return nil, nil
}

func (p *testPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(sim.EventRunPodSandbox, pod.Id, pod.Annotations)
	return nil
}

func (p *testPlugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	p.record(sim.EventUpdatePodSandbox, pod.Id, pod.Annotations)
	return nil
}

func (p *testPlugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(sim.EventPostUpdatePodSandbox, pod.Id, pod.Annotations)
	return nil
}

func (p *testPlugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(sim.EventStopPodSandbox, pod.Id, pod.Annotations)
	return nil
}

func (p *testPlugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(sim.EventRemovePodSandbox, pod.Id, pod.Annotations)
	return nil
}

func (p *testPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record(sim.EventCreateContainer, c.Id, c.Annotations)
	if len(p.annotate) == 0 {
		return nil, nil, nil
	}
	adjust := &api.ContainerAdjustment{}
	for k, v := range p.annotate {
		adjust.AddAnnotation(k, v)
	}
	return adjust, nil, nil
}

func (p *testPlugin) PostCreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record(sim.EventPostCreateContainer, c.Id, c.Annotations)
	return nil
}

func (p *testPlugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record(sim.EventStartContainer, c.Id, c.Annotations)
	if p.block != nil {
		<-p.block // deliberately ignores the request deadline: a hung plugin
	}
	return nil
}

func (p *testPlugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record(sim.EventPostStartContainer, c.Id, c.Annotations)
	return nil
}

func (p *testPlugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.record(sim.EventUpdateContainer, c.Id, c.Annotations)
	return nil, nil
}

func (p *testPlugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record(sim.EventPostUpdateContainer, c.Id, c.Annotations)
	return nil
}

func (p *testPlugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.record(sim.EventStopContainer, c.Id, c.Annotations)
	return nil, nil
}

func (p *testPlugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record(sim.EventRemoveContainer, c.Id, c.Annotations)
	return nil
}

func startRuntime(t *testing.T, opts sim.Options) *sim.Runtime {
	t.Helper()
	rt, err := sim.Start(opts)
	if err != nil {
		t.Fatalf("sim.Start: %v", err)
	}
	t.Cleanup(rt.Stop)
	return rt
}

func waitPlugins(t *testing.T, rt *sim.Runtime, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := rt.WaitPlugins(ctx, n); err != nil {
		t.Fatal(err)
	}
}

var containerEvents = []sim.Event{
	sim.EventCreateContainer, sim.EventPostCreateContainer,
	sim.EventStartContainer, sim.EventPostStartContainer,
	sim.EventUpdateContainer, sim.EventPostUpdateContainer,
	sim.EventStopContainer, sim.EventRemoveContainer,
}

// expectedLifecycle returns the events a Lifecycle of pod with ctrs issues.
func expectedLifecycle(pod string, ctrs []string) map[sim.EventKey]int {
	want := map[sim.EventKey]int{
		{Event: sim.EventRunPodSandbox, ID: pod}:    1,
		{Event: sim.EventStopPodSandbox, ID: pod}:   1,
		{Event: sim.EventRemovePodSandbox, ID: pod}: 1,
	}
	for _, id := range ctrs {
		for _, ev := range containerEvents {
			want[sim.EventKey{Event: ev, ID: id}] = 1
		}
	}
	return want
}

func TestLifecycle(t *testing.T) {
	const key, val = "sim.test/annotated-by", "a"
	rt := startRuntime(t, sim.Options{})
	p := newPlugin(rt, "a", map[string]string{key: val})
	p.start(t, "t", "10")
	waitPlugins(t, rt, 1)

	ctx := context.Background()
	if err := rt.Lifecycle(ctx, "web", 3); err != nil {
		t.Fatalf("Lifecycle: %v", err)
	}

	created := rt.AllCreated()
	if len(created) != 3 {
		t.Fatalf("AllCreated: %d containers, want 3", len(created))
	}
	var ids []string
	for _, c := range created {
		ids = append(ids, c.Id)
		if c.Annotations[key] != val {
			t.Errorf("container %s annotations %v lack %s=%s", c.Id, c.Annotations, key, val)
		}
		if c.State != api.ContainerState_CONTAINER_STOPPED {
			t.Errorf("container %s state %v, want stopped", c.Id, c.State)
		}
		// Every event after CreateContainer showed the annotation.
		for _, ev := range containerEvents[1:] {
			ann, ok := p.seenAnnotations(ev, c.Id)
			if !ok || ann[key] != val {
				t.Errorf("%s %s: plugin saw annotations %v (seen %v)", ev, c.Id, ann, ok)
			}
		}
	}
	if n := len(rt.Containers()); n != 0 {
		t.Errorf("Containers: %d left after lifecycle", n)
	}
	if pods := rt.Pods(); len(pods) != 0 {
		t.Errorf("Pods: %d left after lifecycle", len(pods))
	}

	issued := rt.Issued()
	podID := created[0].PodSandboxId
	want := expectedLifecycle(podID, ids)
	if !maps.Equal(issued, want) {
		t.Errorf("Issued:\n got %v\nwant %v", issued, want)
	}
	st := rt.Stats()
	if st.Events != 27 || st.FailedCreates != 0 || st.PluginCount != 1 || len(st.PluginErrors) != 0 {
		t.Errorf("Stats: %+v", st)
	}
	if log := rt.IssuedLog(); len(log) != 27 || log[0] != (sim.EventKey{Event: sim.EventRunPodSandbox, ID: podID, N: 1}) {
		t.Errorf("IssuedLog: %v", log)
	}

	rep := p.ledger.Compare(issued, nil)
	if !rep.OK() || rep.Events != 27 || rep.Acted != 27 || rep.ByInstance["a"] != 27 || rep.ByVersion["v1"] != 27 {
		t.Errorf("Compare: %+v", rep)
	}
	p.checkCurrent(t)
	if seq, ev, id := rt.Current(); seq != 0 || ev != "" || id != "" {
		t.Errorf("Current between events: %d %q %q", seq, ev, id)
	}

	// Pod updates, and an only-filter on the comparison.
	pod, err := rt.RunPod(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.UpdatePod(ctx, pod.Id); err != nil {
		t.Fatal(err)
	}
	issued = rt.Issued()
	for _, ev := range []sim.Event{sim.EventUpdatePodSandbox, sim.EventPostUpdatePodSandbox} {
		if issued[sim.EventKey{Event: ev, ID: pod.Id}] != 1 {
			t.Errorf("%s %s not issued once: %v", ev, pod.Id, issued)
		}
	}
	rep = p.ledger.Compare(issued, sim.Event.IsPodEvent)
	if !rep.OK() || rep.Events != 3+2+1 {
		t.Errorf("Compare pod events: %+v", rep)
	}

	// An unsolicited update from the plugin reaches the update function.
	c, err := rt.CreateContainer(ctx, pod.Id, "app", map[string]string{"own": "yes"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Annotations["own"] != "yes" || c.Annotations[key] != val {
		t.Errorf("created container annotations: %v", c.Annotations)
	}
	// A stub's UpdateContainers needs the stub; use a fresh one for it.
	upd := newPlugin(rt, "u", nil)
	s, err := stub.New(upd, stub.WithSocketPath(rt.SocketPath()),
		stub.WithPluginName("updater"), stub.WithPluginIdx("90"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	waitPlugins(t, rt, 2)
	failed, err := s.UpdateContainers([]*api.ContainerUpdate{{
		ContainerId: c.Id,
		Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{
			Cpu: &api.LinuxCPU{Shares: api.UInt64(512)},
		}},
	}})
	if err != nil || len(failed) != 0 {
		t.Fatalf("UpdateContainers: %v, failed %v", err, failed)
	}
	if ups := rt.Updates(); len(ups) != 1 || ups[0].ContainerId != c.Id {
		t.Errorf("Updates: %v", ups)
	}
	if got := rt.Container(c.Id).GetLinux().GetResources().GetCpu().GetShares().GetValue(); got != 512 {
		t.Errorf("cpu shares after update: %d", got)
	}
	if rt.Stats().Updates != 1 {
		t.Errorf("Stats.Updates: %+v", rt.Stats())
	}
	if err := rt.UpdateContainer(ctx, c.Id, 2048); err != nil {
		t.Fatal(err)
	}
	if got := rt.Container(c.Id).GetLinux().GetResources().GetCpu().GetShares().GetValue(); got != 2048 {
		t.Errorf("cpu shares after UpdateContainer: %d", got)
	}
	if err := rt.RemovePod(ctx, pod.Id); err != nil {
		t.Fatal(err)
	}
	issued = rt.Issued()
	for _, ev := range []sim.Event{sim.EventStopContainer, sim.EventRemoveContainer} {
		if issued[sim.EventKey{Event: ev, ID: c.Id}] != 1 {
			t.Errorf("RemovePod did not %s %s once: %v", ev, c.Id, issued)
		}
	}
	if rep := p.ledger.Compare(issued, nil); !rep.OK() {
		t.Errorf("final Compare: %v", rep)
	}
	p.checkCurrent(t)
}

func TestConflictingPluginsRejectCreate(t *testing.T) {
	const key = "sim.test/owner"
	rt := startRuntime(t, sim.Options{})
	a := newPlugin(rt, "a", map[string]string{key: "a"})
	b := newPlugin(rt, "b", map[string]string{key: "b"})
	a.start(t, "t", "10")
	b.start(t, "t", "10")
	waitPlugins(t, rt, 2)

	ctx := context.Background()
	pod, err := rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.CreateContainer(ctx, pod.Id, "c", map[string]string{"orig": "1"})
	var rejected *sim.CreateRejectedError
	if c != nil || !errors.As(err, &rejected) || !strings.Contains(err.Error(), "both tried to set") {
		t.Fatalf("CreateContainer: %v, %v", c, err)
	}
	id := rejected.ID
	t.Logf("rejected: %v", err)
	st := rt.Stats()
	if st.FailedCreates != 1 || len(st.CreateErrors) != 1 || !strings.Contains(st.CreateErrors[0], "both tried to set") {
		t.Errorf("Stats: %+v", st)
	}
	if rt.Container(id) != nil || len(rt.AllCreated()) != 0 {
		t.Errorf("rejected container %s is stored", id)
	}

	issued := rt.Issued()
	for ev, n := range map[sim.Event]int{
		sim.EventCreateContainer:     1,
		sim.EventPostCreateContainer: 0,
		sim.EventStopContainer:       1,
		sim.EventRemoveContainer:     1,
	} {
		if got := issued[sim.EventKey{Event: ev, ID: id}]; got != n {
			t.Errorf("%s %s issued %d times, want %d", ev, id, got, n)
		}
	}
	for _, p := range []*testPlugin{a, b} {
		if rep := p.ledger.Compare(issued, nil); !rep.OK() || rep.Acted != 4 {
			t.Errorf("plugin %s: %v", p.instance, rep)
		}
		// The undo events carry the original container, without adjustments.
		for _, ev := range []sim.Event{sim.EventStopContainer, sim.EventRemoveContainer} {
			ann, ok := p.seenAnnotations(ev, id)
			if _, adjusted := ann[key]; !ok || adjusted || ann["orig"] != "1" {
				t.Errorf("plugin %s: %s %s saw annotations %v (seen %v)", p.instance, ev, id, ann, ok)
			}
		}
		p.checkCurrent(t)
	}

	// A lifecycle goes on without the containers it could not create.
	if err := rt.Lifecycle(ctx, "q", 2); err != nil {
		t.Fatalf("Lifecycle: %v", err)
	}
	if st := rt.Stats(); st.FailedCreates != 3 {
		t.Errorf("FailedCreates %d, want 3", st.FailedCreates)
	}
	if rep := a.ledger.Compare(rt.Issued(), nil); !rep.OK() {
		t.Errorf("plugin a after lifecycle: %v", rep)
	}
}

func TestSynchronizeShowsAnnotations(t *testing.T) {
	const key, val = "sim.test/annotated-by", "early"
	rt := startRuntime(t, sim.Options{})
	early := newPlugin(rt, "early", map[string]string{key: val})
	early.start(t, "early", "10")
	waitPlugins(t, rt, 1)

	ctx := context.Background()
	pod, err := rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		c, err := rt.CreateContainer(ctx, pod.Id, fmt.Sprintf("c%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.Id)
	}
	if err := rt.StartContainer(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := rt.StopContainer(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}

	late := newPlugin(rt, "late", nil)
	late.start(t, "late", "20")
	waitPlugins(t, rt, 2)

	late.mu.Lock()
	pods, ctrs := late.syncPods, late.syncCtrs
	late.mu.Unlock()
	if len(pods) != 1 || pods[0].Id != pod.Id {
		t.Errorf("synchronized pods: %v", pods)
	}
	got := map[string]*api.Container{}
	for _, c := range ctrs {
		got[c.Id] = c
	}
	if len(got) != 2 || got[ids[0]] == nil || got[ids[1]] == nil {
		t.Fatalf("synchronized containers: %v (want %s, %s; stopped %s omitted)", ctrs, ids[0], ids[1], ids[2])
	}
	for _, c := range got {
		if c.Annotations[key] != val {
			t.Errorf("synchronized container %s annotations %v", c.Id, c.Annotations)
		}
	}
	if got[ids[1]].State != api.ContainerState_CONTAINER_RUNNING {
		t.Errorf("synchronized container %s state %v", ids[1], got[ids[1]].State)
	}

	// The late plugin takes part in the next event, with the annotation.
	if err := rt.StartContainer(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if ann, ok := late.seenAnnotations(sim.EventStartContainer, ids[0]); !ok || ann[key] != val {
		t.Errorf("late plugin StartContainer %s saw %v (seen %v)", ids[0], ann, ok)
	}
	late.checkCurrent(t)
	early.checkCurrent(t)
}

func TestTimeoutDropsPlugin(t *testing.T) {
	const timeout = 200 * time.Millisecond
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	rt := startRuntime(t, sim.Options{RequestTimeout: timeout})

	good := newPlugin(rt, "good", nil)
	slow := newPlugin(rt, "slow", nil)
	slow.block = make(chan struct{})
	good.start(t, "good", "05")
	slow.start(t, "slow", "10")
	// Registered after the plugins' cleanups, so it runs before them.
	t.Cleanup(func() { close(slow.block) })
	waitPlugins(t, rt, 2)

	ctx := context.Background()
	pod, err := rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.CreateContainer(ctx, pod.Id, "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, c.Id); err != nil {
		t.Fatalf("StartContainer with a hung plugin: %v", err)
	}

	st := rt.Stats()
	if st.PluginErrors["10-slow"] == 0 || st.PluginErrors["05-good"] != 0 {
		t.Errorf("PluginErrors: %v", st.PluginErrors)
	}
	t.Logf("plugin errors: %q, max latency %v", st.PluginErrorTexts, st.MaxEventLatency)
	if st.PluginCount != 1 {
		t.Errorf("PluginCount %d, want 1", st.PluginCount)
	}
	if st.MaxEventLatency < timeout {
		t.Errorf("MaxEventLatency %v < %v", st.MaxEventLatency, timeout)
	}
	waitPlugins(t, rt, 1)

	// The event counts as delivered (the adaptation proceeded without the
	// hung plugin); the remaining plugin gets the rest of the lifecycle.
	issued := rt.Issued()
	if issued[sim.EventKey{Event: sim.EventStartContainer, ID: c.Id}] != 1 ||
		issued[sim.EventKey{Event: sim.EventPostStartContainer, ID: c.Id}] != 1 {
		t.Errorf("Issued: %v", issued)
	}
	if err := rt.RemovePod(ctx, pod.Id); err != nil {
		t.Fatal(err)
	}
	if rep := good.ledger.Compare(rt.Issued(), nil); !rep.OK() {
		t.Errorf("good plugin: %v", rep)
	}
	rep := slow.ledger.Compare(rt.Issued(), nil)
	if rep.Duplicates != 0 || rep.Missed == 0 {
		t.Errorf("slow plugin should have missed the events after its drop: %v", rep)
	}
	good.checkCurrent(t)
}

func TestStopIdempotent(t *testing.T) {
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := rt.SocketPath()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("socket: %v", err)
	}
	rt.Stop()
	rt.Stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket still there after Stop: %v", err)
	}
	if _, err := rt.RunPod(context.Background(), "p"); !errors.Is(err, sim.ErrStopped) {
		t.Errorf("RunPod after Stop: %v", err)
	}
}

func TestLedgerCompare(t *testing.T) {
	l := sim.NewLedger()
	l.Record(sim.EventStartContainer, "ctr-17", "a", "v1")
	l.Record(sim.EventStartContainer, "ctr-17", "b", "v2")
	l.Record(sim.EventStopContainer, "ctr-3", "a", "v1")
	issued := map[sim.EventKey]int{
		{Event: sim.EventStartContainer, ID: "ctr-17"}: 1,
		{Event: sim.EventStopContainer, ID: "ctr-3"}:   1,
		{Event: sim.EventRemoveContainer, ID: "ctr-3"}: 1,
	}
	rep := l.Compare(issued, nil)
	if rep.Events != 3 || rep.Acted != 3 || rep.Duplicates != 1 || rep.Missed != 1 ||
		rep.ByVersion["v1"] != 2 || rep.ByInstance["b"] != 1 {
		t.Errorf("Compare: %+v", rep)
	}
	wantProblems := []string{
		"RemoveContainer ctr-3: issued 1, acted 0 (by none)",
		"StartContainer ctr-17: issued 1, acted 2 (by a, b)",
	}
	if strings.Join(rep.Problems, "\n") != strings.Join(wantProblems, "\n") {
		t.Errorf("Problems:\n%s", strings.Join(rep.Problems, "\n"))
	}
	rep = l.Compare(issued, func(e sim.Event) bool { return e == sim.EventStopContainer })
	if !rep.OK() || rep.Events != 1 || rep.Acted != 1 {
		t.Errorf("Compare only StopContainer: %+v", rep)
	}
}

func TestConcurrentLifecycles(t *testing.T) {
	const workers, rounds, ctrs = 6, 3, 2
	rt := startRuntime(t, sim.Options{})
	a := newPlugin(rt, "a", map[string]string{"a": "1"})
	b := newPlugin(rt, "b", nil)
	a.start(t, "a", "10")
	b.start(t, "b", "20")
	waitPlugins(t, rt, 2)

	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				errs <- rt.Lifecycle(ctx, fmt.Sprintf("w%d-%d", w, i), ctrs)
			}
		}()
	}
	// A plugin joining mid-run synchronizes between events.
	late := newPlugin(rt, "late", nil)
	late.start(t, "late", "30")
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	issued := rt.Issued()
	total := workers * rounds * (3 + 8*ctrs)
	if st := rt.Stats(); st.Events != total || len(rt.IssuedLog()) != total {
		t.Errorf("Events %d, want %d", st.Events, total)
	}
	for _, p := range []*testPlugin{a, b} {
		if rep := p.ledger.Compare(issued, nil); !rep.OK() || rep.Acted != total {
			t.Errorf("plugin %s: %v", p.instance, rep)
		}
		p.checkCurrent(t)
	}
	// The late plugin saw a suffix of the events: never more than issued.
	if rep := late.ledger.Compare(issued, nil); rep.Duplicates != 0 {
		t.Errorf("late plugin: %v", rep)
	}
	late.checkCurrent(t)
	for _, c := range rt.AllCreated() {
		if c.Annotations["a"] != "1" {
			t.Errorf("container %s annotations %v", c.Id, c.Annotations)
		}
	}
}

func BenchmarkLifecycle(b *testing.B) {
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Stop()
	p := newPlugin(rt, "a", map[string]string{"a": "1"})
	s, err := stub.New(p, stub.WithSocketPath(rt.SocketPath()),
		stub.WithPluginName("bench"), stub.WithPluginIdx("10"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	wctx, cancel := context.WithTimeout(ctx, failAfter)
	defer cancel()
	if err := rt.WaitPlugins(wctx, 1); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := rt.Lifecycle(ctx, "bench", 1); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rt.Stats().Events)/float64(b.N), "events/op")
}
