package plugintest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/plugin"
)

// waitHanded waits until the node's catch-ups handed container id.
func waitHanded(t *testing.T, n *Node, id string) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, cu := range n.CatchUps() {
			if cu.ID == id {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s was never handed to an author (catch-ups %v)", id, n.CatchUps())
		}
		<-tick.C
	}
}

// createAfterSync makes the runtime create a container in pod podID from
// inside its next plugin sync (after the listing, before the append: it
// reaches no instance and is listed to none); the channel receives it
// (nil if the creation failed, reported as an error of t).
func createAfterSync(t *testing.T, rt *Runtime, podID string) <-chan *api.Container {
	late := make(chan *api.Container, 1)
	var once sync.Once
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.afterSync = func() {
		once.Do(func() {
			c, err := rt.CreateContainer(context.Background(), podID, "late", nil)
			if err != nil {
				t.Error(err)
			}
			late <- c
		})
	}
	return late
}

// A container created while the only instance synchronizes (after the
// runtime listed the containers for its Synchronize, before the append:
// containerd issue 13698, cri-o issue 10090) reaches nobody and is listed
// to nobody. The owner then acts on its StopContainer: that later event of
// an unstamped container no instance processed is a missed creation, and
// the owner hands it to the author as unprocessed, once (its removal
// afterwards hands nothing more).
func TestMissedCreationHandedOnce(t *testing.T) {
	n := newNode(t, Config{Runtime: RuntimeOptions{Mode: ModeCRIO}})
	rt := n.Runtime()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	pod, err := rt.RunPod(ctx, "pod") // no instance yet: reaches nobody
	if err != nil {
		t.Fatal(err)
	}
	type made struct {
		c   *api.Container
		err error
	}
	late := make(chan made, 1)
	var once sync.Once
	rt.mu.Lock()
	rt.afterSync = func() {
		once.Do(func() {
			c, err := rt.CreateContainer(context.Background(), pod.Id, "late", nil)
			late <- made{c, err}
		})
	}
	rt.mu.Unlock()
	start(t, n, "1.0.0")
	var m made
	select {
	case m = <-late:
	case <-ctx.Done():
		t.Fatal("no container was created inside the sync callback")
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	waitPlugins(t, rt, 1)
	if err := rt.StopContainer(ctx, m.c.Id); err != nil {
		t.Fatal(err)
	}
	waitHanded(t, n, m.c.Id)
	if err := rt.RemoveContainer(ctx, m.c.Id); err != nil {
		t.Fatal(err)
	}
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if res.Unstamped != 1 || res.CaughtUp != 1 || res.UnprocessedCount != 0 || len(res.HandedTwice) != 0 {
		t.Fatalf("unstamped %d, caught up %d, unprocessed %v, handed twice %v; want 1, 1, none, none",
			res.Unstamped, res.CaughtUp, res.Unprocessed, res.HandedTwice)
	}
}

// lines is an io.Writer of log lines that tells when one contains any of
// some strings.
type lines struct {
	mu   sync.Mutex
	text strings.Builder
	ch   chan struct{} // closed and replaced at every write
}

func newLines() *lines { return &lines{ch: make(chan struct{})} }

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text.Write(b)
	close(l.ch)
	l.ch = make(chan struct{})
	return len(b), nil
}

// wait waits until some line contains one of subs and returns it.
func (l *lines) wait(t *testing.T, subs ...string) string {
	t.Helper()
	timeout := time.NewTimer(failAfter)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		text, ch := l.text.String(), l.ch
		l.mu.Unlock()
		for _, s := range subs {
			if strings.Contains(text, s) {
				return s
			}
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("no log line with any of %q", subs)
		}
	}
}

// A catch-up asked for is made also when the owner is asked to stop before
// the runtime synchronized the catch-up's connection: here the runtime's
// plugin sync is held (as containerd's CRI StopContainer holds it for a
// grace period) from before the owner acts on the stop of a missed
// creation until the stop of the instance has begun. It was cancelled
// with the run ("catch-up: could not replace the runtime connection:
// context canceled"), and the container, known to this instance alone,
// was handed to nobody.
func TestCatchUpAskedForIsMadeAtStop(t *testing.T) {
	log := newLines()
	n := newNode(t, Config{Runtime: RuntimeOptions{Mode: ModeCRIO}, Log: log})
	rt := n.Runtime()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	pod, err := rt.RunPod(ctx, "pod")
	if err != nil {
		t.Fatal(err)
	}
	late := createAfterSync(t, rt, pod.Id)
	in, err := n.Start("1.0.0", plugin.WithLeaveTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-late
	if c == nil {
		t.FailNow()
	}
	waitPlugins(t, rt, 1)
	release := rt.HoldPluginSync()
	defer release()
	if err := rt.StopContainer(ctx, c.Id); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- in.Stop() }()
	got := log.wait(t, "could not replace", "the catch-up asked for goes on first")
	release()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the instance did not stop")
	}
	for _, cu := range n.CatchUps() {
		if cu.ID == c.Id {
			return
		}
	}
	t.Fatalf("container %s, whose creation reached nobody and whose stop the owner acted on, was handed to no author (log: %q)", c.Id, got)
}

// A container the first owner's author synchronized unstamped (it existed
// before any instance) is removed between the runtime's listing for a
// newcomer's Synchronize and the call (CRI-O lists before it takes the
// lock its events take; so does this runtime in ModeCRIO). The owner's
// removal dropped the container from the synchronized record, the
// newcomer's list still had it, and its author was handed it a second
// time (the demo, mode cri-o, -faults 10: "handed to a catch-up more than
// once"). The removal now marks the entry, kept for a while.
func TestRemovedBetweenListingAndSynchronizeIsNotHandedAgain(t *testing.T) {
	n := newNode(t, Config{Runtime: RuntimeOptions{Mode: ModeCRIO},
		Plugin: func(string) (interface{}, []plugin.Option) { return &remover{}, nil }})
	rt := n.Runtime()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	pod, err := rt.RunPod(ctx, "pod") // no instance yet: unstamped
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.CreateContainer(ctx, pod.Id, "early", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, c.Id); err != nil {
		t.Fatal(err)
	}
	start(t, n, "1.0.0")
	waitHanded(t, n, c.Id)
	removed := make(chan error, 1)
	var once sync.Once
	rt.mu.Lock()
	rt.afterList = func() {
		once.Do(func() {
			err := rt.StopContainer(context.Background(), c.Id)
			if err == nil {
				err = rt.RemoveContainer(context.Background(), c.Id)
			}
			removed <- err
		})
	}
	rt.mu.Unlock()
	start(t, n, "2.0.0") // lists c, then c is removed, then synchronizes
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	handed := 0
	for _, cu := range n.CatchUps() {
		if cu.ID == c.Id {
			handed++
		}
	}
	if handed != 1 {
		t.Fatalf("container %s handed to an author %d times, want 1 (catch-ups %v)", c.Id, handed, n.CatchUps())
	}
}

// remover handles container removals (the harness marks a removed
// unstamped container in its record only for an author that does).
type remover struct{ stopper }

func (*remover) RemoveContainer(context.Context, *api.PodSandbox, *api.Container) error { return nil }

// An owner that asked for a catch-up (it acted on the stop of a missed
// creation; the runtime holds plugin sync, so the catch-up's connection
// waits) is frozen, and the runtime drops its connection when a request to
// it times out. The next event reaches no connection of the plugin. Then
// the owner is thawed and its catch-up connection appended: at its first
// event it takes over from its own dropped connection, which still owned
// the register. That takeover must declare the gap from the last act:
// before, the drop was read only after it (the demo, mode gap, -faults 10:
// 21 events unsaid).
func TestFrozenOwnerDroppedBeforeItsCatchUpDeclaresTheGap(t *testing.T) {
	log := newLines()
	n := newNode(t, Config{Runtime: RuntimeOptions{Mode: ModeCRIO, RequestTimeout: 200 * time.Millisecond}, Log: log})
	rt := n.Runtime()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	pod, err := rt.RunPod(ctx, "pod")
	if err != nil {
		t.Fatal(err)
	}
	late := createAfterSync(t, rt, pod.Id)
	v1, err := n.Start("1.0.0", plugin.WithLeaveTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.WaitOwner(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-late
	if c == nil {
		t.FailNow()
	}
	waitPlugins(t, rt, 1)
	release := rt.HoldPluginSync()
	defer release()
	if err := rt.StopContainer(ctx, c.Id); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "handing it to the author as unprocessed")
	v1.Freeze()
	if _, err := rt.RunPod(ctx, "timed-out"); err != nil { // the runtime drops the frozen connection
		t.Fatal(err)
	}
	waitPlugins(t, rt, 0)
	unseen, err := rt.RunPod(ctx, "unseen") // reaches no connection of the plugin
	if err != nil {
		t.Fatal(err)
	}
	v1.Thaw()
	release()
	waitPlugins(t, rt, 1)
	if _, err := rt.RunPod(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	for _, d := range rt.Deliveries() {
		if d.Event == EventRunPodSandbox && d.ID == unseen.Id {
			at = d.Start
		}
	}
	if at.IsZero() {
		t.Fatalf("no delivery of %s", unseen.Id)
	}
	if n.Ledger().actedOn(unseen.Id) {
		t.Fatalf("%s was acted on: the test needs it to reach nobody", unseen.Id)
	}
	for _, d := range n.Declarations() {
		if d.Gap && !at.Before(d.Start) && !at.After(d.End) {
			return
		}
	}
	t.Fatalf("RunPodSandbox %s, delivered at %s to no connection of the plugin, is in no declared gap window (declarations %+v)",
		unseen.Id, at.Format("15:04:05.000000"), n.Declarations())
}

// failingSync is an author whose Synchronize always fails.
type failingSync struct{ stopper }

func (*failingSync) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	return nil, errors.New("broken on purpose")
}

// A container created while no instance is connected (the owner was
// killed) is listed only by a newcomer whose author Synchronize fails (its
// claim fails: it hands nothing), and ends before the next owner's
// Synchronize. It was handed to nobody (the demo, mode gap, -faults 10:
// "listed by a runtime Synchronize, never handed to an author"). The
// failed Synchronize notes it, and the next owner's catch-up hands it.
func TestContainerListedOnlyByAFailedSynchronizeIsHanded(t *testing.T) {
	n := newNode(t, Config{Runtime: RuntimeOptions{Mode: ModeCRIO}, Plugin: func(v string) (interface{}, []plugin.Option) {
		if v == "2.0.0" {
			return &failingSync{}, nil
		}
		return &stopper{}, []plugin.Option{plugin.WithLeaveTimeout(100 * time.Millisecond)}
	}})
	rt := n.Runtime()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	v1 := start(t, n, "1.0.0")
	pod, err := rt.RunPod(ctx, "pod") // acted on: an instance acted before
	if err != nil {
		t.Fatal(err)
	}
	v1.Crash()
	x, err := rt.CreateContainer(ctx, pod.Id, "x", nil) // reaches nobody
	if err != nil {
		t.Fatal(err)
	}
	v2, err := n.Start("2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	listed := func() bool {
		for _, s := range rt.Syncs() {
			for _, id := range s.Containers {
				if id == x.Id {
					return true
				}
			}
		}
		return false
	}
	for !listed() {
		select {
		case <-ctx.Done():
			t.Fatalf("no Synchronize listed %s", x.Id)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := v2.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := rt.StopContainer(ctx, x.Id); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveContainer(ctx, x.Id); err != nil {
		t.Fatal(err)
	}
	start(t, n, "1.0.0")
	waitHanded(t, n, x.Id)
	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if res.UnprocessedCount != 0 || len(res.HandedTwice) != 0 {
		t.Fatalf("unprocessed %v, handed twice %v; want none", res.Unprocessed, res.HandedTwice)
	}
}
