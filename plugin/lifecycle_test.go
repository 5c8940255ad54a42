package plugin

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// stopAuthor counts the stops it is handed, and which came late.
type stopAuthor struct {
	mu         sync.Mutex
	stops      []string
	caughtUp   []string
	syncHanded int
}

func (s *stopAuthor) StopContainer(ctx context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if CatchingUp(ctx) {
		s.caughtUp = append(s.caughtUp, c.GetId())
	} else {
		s.stops = append(s.stops, c.GetId())
	}
	return nil, nil
}

// A record with no room for every container says so at the catch-up
// (warning, Stats.Unrecorded) and hands what it recorded; the container
// it had no room for is not handed (its change cannot be known).
func TestFullRecordIsDeclaredAtTheCatchUp(t *testing.T) {
	defer SetRecordSlots(2)()
	log, hook := test.NewNullLogger()
	log.SetOutput(io.Discard)
	root, err := os.MkdirTemp("", "nhl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	author := &stopAuthor{}
	p, err := New(author, WithVersion("1.0.0"), WithPluginName("full"), WithPluginIdx("10"),
		WithHandoverDir(root), WithInstanceID("f1"), WithLogger(logrus.NewEntry(log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.release)
	if p.rec == nil || p.rec.Slots() != 2 {
		t.Fatalf("record %v, want one of 2 slots", p.rec)
	}
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		if _, _, err := a.CreateContainer(ctx, pod, &api.Container{Id: id, PodSandboxId: pod.Id}); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.rec.Overflows(); got != 1 {
		t.Fatalf("overflows %d, want 1 (3 containers, 2 slots)", got)
	}
	// The catch-up: the pod is listed, no container is (all stopped).
	var events api.EventMask
	events.Set(api.Event_STOP_CONTAINER)
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), []*api.PodSandbox{pod}, nil)
	if st := p.Stats(); st.Unrecorded != 1 || st.CaughtUpChanges != 2 {
		t.Fatalf("stats unrecorded %d, caught up changes %d; want 1, 2", st.Unrecorded, st.CaughtUpChanges)
	}
	author.mu.Lock()
	handed := strings.Join(author.caughtUp, ",")
	author.mu.Unlock()
	if handed != "c1,c2" && handed != "c2,c1" {
		t.Fatalf("handed %q, want c1 and c2", handed)
	}
	said := false
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, "lifecycle record full") {
			said = true
		}
	}
	if !said {
		t.Fatal("the full record was not declared in the log")
	}
	// A second catch-up hands nothing again and says nothing new.
	hook.Reset()
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), []*api.PodSandbox{pod}, nil)
	if st := p.Stats(); st.CaughtUpChanges != 2 {
		t.Fatalf("a second catch-up handed more: %d", st.CaughtUpChanges)
	}
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, "lifecycle record full") {
			t.Fatal("the same overflow declared twice")
		}
	}
}

// The runtime may change a container's state before it sends the event
// (CRI-O's exit monitor, containerd's task exit): a catch-up that found
// it unlisted hands the stop, and the StopContainer the runtime sends
// afterwards does not reach the author again.
func TestStopHandedByACatchUpIsNotHandedAgain(t *testing.T) {
	log, _ := test.NewNullLogger()
	root, err := os.MkdirTemp("", "nhl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	author := &stopAuthor{}
	p, err := New(author, WithVersion("1.0.0"), WithPluginName("late"), WithPluginIdx("10"),
		WithHandoverDir(root), WithInstanceID("l1"), WithLogger(logrus.NewEntry(log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.release)
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	c := &api.Container{Id: "c1", PodSandboxId: pod.Id}
	if _, _, err := a.CreateContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	var events api.EventMask
	events.Set(api.Event_STOP_CONTAINER)
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), []*api.PodSandbox{pod}, nil) // c1 exited: not listed
	if _, err := a.StopContainer(ctx, pod, c); err != nil {                   // the runtime's, late
		t.Fatal(err)
	}
	if _, err := a.StopContainer(ctx, pod, &api.Container{Id: "c2", PodSandboxId: pod.Id}); err != nil {
		t.Fatal(err) // one nobody handed: reaches the author
	}
	author.mu.Lock()
	defer author.mu.Unlock()
	if strings.Join(author.caughtUp, ",") != "c1" || strings.Join(author.stops, ",") != "c2" {
		t.Fatalf("caught up %v, stops %v; want [c1], [c2]", author.caughtUp, author.stops)
	}
}

// removeAuthor handles stops and removals.
type removeAuthor struct{ stopAuthor }

func (*removeAuthor) RemoveContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

// A list older than the record (the instance's other connection acted
// between this connection's Configure and its Synchronize) does not bring
// back a container removed meanwhile: a later catch-up would hand its
// stop and removal although they were acted on.
func TestStaleListDoesNotResurrect(t *testing.T) {
	log, _ := test.NewNullLogger()
	root, err := os.MkdirTemp("", "nhl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	p, err := New(&removeAuthor{}, WithVersion("1.0.0"), WithPluginName("stale"), WithPluginIdx("10"),
		WithHandoverDir(root), WithInstanceID("s1"), WithLogger(logrus.NewEntry(log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.release)
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	c := &api.Container{Id: "c1", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_RUNNING}
	if _, _, err := a.CreateContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	since := p.rec.Seq() // the new connection's Configure; the runtime lists c1
	if _, err := a.StopContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	var events api.EventMask
	events.Set(api.Event_STOP_CONTAINER)
	events.Set(api.Event_REMOVE_CONTAINER)
	p.catchUpLifecycle(ctx, events, since, []*api.PodSandbox{pod}, []*api.Container{c})
	if es, _ := p.rec.Entries(); len(es) != 0 {
		t.Fatalf("entries %+v after a catch-up with a stale list, want none", es)
	}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), nil, nil) // the next gap: the pod is gone
	if st := p.Stats(); st.CaughtUpChanges != 0 {
		t.Fatalf("%d changes handed, want none (all were acted on)", st.CaughtUpChanges)
	}
}
