package plugintest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// failAfter bounds waits on conditions; it is a failure deadline, never a
// stand-in for a condition.
const failAfter = 20 * time.Second

// bare is a bare NRI stub plugin (no harness) that records the pod updates
// and container stops it receives. If hold is set, its Synchronize waits
// until hold is closed.
type bare struct {
	name    string
	hold    chan struct{}
	syncing chan struct{} // closed when Synchronize was called
	once    sync.Once

	mu   sync.Mutex
	seen []string
}

func newBare(name string, hold bool) *bare {
	b := &bare{name: name, syncing: make(chan struct{})}
	if hold {
		b.hold = make(chan struct{})
	}
	return b
}

func (b *bare) record(ev Event, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = append(b.seen, string(ev)+" "+id)
}

func (b *bare) saw(ev Event, id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.seen, string(ev)+" "+id)
}

func (b *bare) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	b.once.Do(func() { close(b.syncing) })
	if b.hold != nil {
		<-b.hold
	}
	return nil, nil
}

func (b *bare) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	b.record(EventUpdatePodSandbox, pod.GetId())
	return nil
}

func (b *bare) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	b.record(EventStopContainer, c.GetId())
	return nil, nil
}

// connect starts b on rt's socket; it is stopped when the test ends.
func (b *bare) connect(t *testing.T, rt *Runtime, idx string) {
	t.Helper()
	s, err := stub.New(b, stub.WithPluginName(b.name), stub.WithPluginIdx(idx), stub.WithSocketPath(rt.SocketPath()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
}

func startRT(t *testing.T, opts RuntimeOptions) *Runtime {
	t.Helper()
	rt, err := StartRuntime(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	return rt
}

func waitPlugins(t *testing.T, rt *Runtime, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := rt.WaitPlugins(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// waitRuntime waits, on the runtime's event and operation notifications,
// until cond holds (called with r.mu held).
func waitRuntime(t *testing.T, r *Runtime, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(failAfter)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(), r.evC
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("waiting for %s", what)
		}
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failAfter):
		t.Fatalf("waiting for %s", what)
	}
}

// lateJoiner sets up the scene every mode test shares: plugin a connected,
// a pod, and plugin b (same name and index, as a newcomer instance)
// connecting with its Synchronize held.
func lateJoiner(t *testing.T, rt *Runtime) (a, b *bare, pod *api.PodSandbox) {
	t.Helper()
	a = newBare("p", false)
	a.connect(t, rt, "10")
	waitPlugins(t, rt, 1)
	pod, err := rt.RunPod(context.Background(), "pod")
	if err != nil {
		t.Fatal(err)
	}
	b = newBare("p", true)
	b.connect(t, rt, "10")
	wait(t, b.syncing, "the newcomer's Synchronize")
	return a, b, pod
}

// updateDuringSync starts UpdatePod while b's Synchronize is held, waits
// until the operation is under way, lets the Synchronize return and waits
// for the update and the append.
func updateDuringSync(t *testing.T, rt *Runtime, b *bare, pod *api.PodSandbox) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- rt.UpdatePod(context.Background(), pod.Id) }()
	waitRuntime(t, rt, "the update under way", func() bool { return rt.inflight == 1 })
	close(b.hold)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(failAfter):
		t.Fatal("UpdatePod did not return")
	}
	waitPlugins(t, rt, 2)
}

// In ModeContainerd an operation that starts while a plugin synchronizes
// waits for the plugin to be appended: both plugins see its event.
func TestModeContainerdHoldsEventsUntilAppend(t *testing.T) {
	rt := startRT(t, RuntimeOptions{Mode: ModeContainerd})
	a, b, pod := lateJoiner(t, rt)
	updateDuringSync(t, rt, b, pod)
	if !a.saw(EventUpdatePodSandbox, pod.Id) || !b.saw(EventUpdatePodSandbox, pod.Id) {
		t.Fatalf("UpdatePodSandbox seen by a %v, by the newcomer %v; want both", a.seen, b.seen)
	}
	if n := rt.Stats().GapEvents; n != 0 {
		t.Fatalf("%d events in a gap, want 0", n)
	}
}

// In ModeGap the sync callback lets the waiting operation deliver its
// event after the newcomer's Synchronize returned and before its append:
// only the plugin connected before sees it.
func TestModeGapDeliversBeforeAppend(t *testing.T) {
	rt := startRT(t, RuntimeOptions{Mode: ModeGap, GapEvents: 1})
	a, b, pod := lateJoiner(t, rt)
	updateDuringSync(t, rt, b, pod)
	if !a.saw(EventUpdatePodSandbox, pod.Id) {
		t.Fatalf("the connected plugin did not see UpdatePodSandbox %s: %v", pod.Id, a.seen)
	}
	if b.saw(EventUpdatePodSandbox, pod.Id) {
		t.Fatalf("the newcomer saw UpdatePodSandbox %s, delivered before its append", pod.Id)
	}
	rt.mu.Lock()
	gap := slices.Clone(rt.gapLog)
	rt.mu.Unlock()
	want := EventKey{Event: EventUpdatePodSandbox, ID: pod.Id, N: 1}
	// The PostUpdatePodSandbox that follows may fall in the gap too.
	if len(gap) == 0 || gap[0] != want || rt.Stats().GapEvents != len(gap) {
		t.Fatalf("gap log %v, GapEvents %d; want %v first, GapEvents counting them", gap, rt.Stats().GapEvents, want)
	}
	// With nothing under way, a connecting plugin is appended at once.
	c := newBare("q", false)
	c.connect(t, rt, "20")
	waitPlugins(t, rt, 3)
}

// In ModeCRIO no operation holds the plugin-sync block: a whole lifecycle
// operation runs inside the sync callback, after the newcomer's
// Synchronize returned (in ModeContainerd it would wait for the callback
// to end, forever), and reaches only the plugin connected before.
func TestModeCRIOTakesNoSyncBlock(t *testing.T) {
	rt := startRT(t, RuntimeOptions{Mode: ModeCRIO})
	var pod *api.PodSandbox
	ran := make(chan error, 1)
	rt.mu.Lock()
	rt.afterSync = func() {
		if pod != nil {
			ran <- rt.UpdatePod(context.Background(), pod.Id)
		}
	}
	rt.mu.Unlock()
	a, b, p := lateJoiner(t, rt)
	rt.mu.Lock()
	pod = p
	rt.mu.Unlock()
	close(b.hold)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(failAfter):
		t.Fatal("UpdatePod inside the sync callback did not return")
	}
	waitPlugins(t, rt, 2)
	if !a.saw(EventUpdatePodSandbox, p.Id) || b.saw(EventUpdatePodSandbox, p.Id) {
		t.Fatalf("UpdatePodSandbox seen by a %v, by the newcomer %v; want a only", a.seen, b.seen)
	}
}

// In ModeExitStop a container's self-exit StopContainer is sent without the
// plugin-sync block, here inside the sync callback after the newcomer's
// Synchronize returned: only the plugin connected before sees it, and the
// later CRI stop sends no second StopContainer.
func TestModeExitStopSendsStopWithoutSyncBlock(t *testing.T) {
	rt := startRT(t, RuntimeOptions{Mode: ModeExitStop, ExitRate: -1})
	ctx := context.Background()
	exit := make(chan struct{})
	rt.mu.Lock()
	rt.afterSync = func() {
		select {
		case <-exit:
			rt.mu.Lock()
			rt.bg.Add(1)
			rt.mu.Unlock()
			rt.exitOne()
		default:
		}
	}
	rt.mu.Unlock()
	a := newBare("p", false)
	a.connect(t, rt, "10")
	waitPlugins(t, rt, 1)
	pod, err := rt.RunPod(ctx, "pod")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.CreateContainer(ctx, pod.Id, "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, c.Id); err != nil {
		t.Fatal(err)
	}
	close(exit)
	b := newBare("p", false)
	b.connect(t, rt, "10")
	waitPlugins(t, rt, 2)
	if !a.saw(EventStopContainer, c.Id) || b.saw(EventStopContainer, c.Id) {
		t.Fatalf("StopContainer seen by a %v, by the newcomer %v; want a only", a.seen, b.seen)
	}
	if err := rt.StopContainer(ctx, c.Id); err != nil {
		t.Fatal(err)
	}
	k := EventKey{Event: EventStopContainer, ID: c.Id}
	if n, st := rt.Issued()[k], rt.Stats(); n != 1 || st.ExitStops != 1 || st.GapEvents != 1 {
		t.Fatalf("StopContainer %s issued %d times, %d exit stops, %d gap events; want 1, 1, 1", c.Id, n, st.ExitStops, st.GapEvents)
	}
}

// At random moments in ModeExitStop, containers exit by themselves; the
// lifecycles go on without errors and no container is stopped twice.
func TestModeExitStopAtRandomMoments(t *testing.T) {
	rt := startRT(t, RuntimeOptions{Mode: ModeExitStop, ExitRate: 0.3, Seed: 7})
	a := newBare("p", false)
	a.connect(t, rt, "10")
	waitPlugins(t, rt, 1)
	for i := 0; i < 20; i++ {
		if err := rt.Lifecycle(context.Background(), fmt.Sprintf("pod%d", i), 3); err != nil {
			t.Fatal(err)
		}
	}
	st := rt.Stats()
	if st.ExitStops == 0 {
		t.Fatal("no container exited by itself")
	}
	for _, c := range rt.AllCreated() {
		if n := rt.Issued()[EventKey{Event: EventStopContainer, ID: c.Id}]; n != 1 {
			t.Fatalf("StopContainer %s issued %d times, want 1", c.Id, n)
		}
		if !a.saw(EventStopContainer, c.Id) {
			t.Fatalf("plugin did not see StopContainer %s", c.Id)
		}
	}
	t.Logf("%d exit stops among %d containers", st.ExitStops, len(rt.AllCreated()))
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes() {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Fatalf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	if got, err := ParseMode(""); err != nil || got != ModeContainerd {
		t.Fatalf(`ParseMode("") = %q, %v`, got, err)
	}
	if _, err := ParseMode("docker"); err == nil {
		t.Fatal("ParseMode(docker) accepted")
	}
	if _, err := StartRuntime(RuntimeOptions{Mode: "docker"}); err == nil {
		t.Fatal("StartRuntime accepted mode docker")
	}
}

func TestRunPodAnnotated(t *testing.T) {
	rt := startRT(t, RuntimeOptions{})
	pod, err := rt.RunPodAnnotated(context.Background(), "p", map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.Pod(pod.Id).GetAnnotations()["k"]; got != "v" {
		t.Fatalf("annotation k = %q, want v", got)
	}
}
