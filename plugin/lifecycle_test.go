package plugin

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-handover/nri-handover/internal/lifecycle"
)

// newRecordTestPlugin returns a Plugin of author, named name, instance
// id, with a handover directory of its own (removed at the end) and a
// null logger, whose hook it returns; released at the end.
func newRecordTestPlugin(t *testing.T, author any, name, id string) (*Plugin, *test.Hook) {
	t.Helper()
	log, hook := test.NewNullLogger()
	root, err := os.MkdirTemp("", "nhl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	p, err := New(author, WithVersion("1.0.0"), WithPluginName(name), WithPluginIdx("10"),
		WithHandoverDir(root), WithInstanceID(id), WithLogger(logrus.NewEntry(log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.release)
	return p, hook
}

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
	author := &stopAuthor{}
	p, hook := newRecordTestPlugin(t, author, "full", "f1")
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
	// The catch-up: the pod is listed, c2 stopped, c1 no more. (A
	// container created and not started is compared only once listed, or
	// settled: see TestCatchUpLeavesTheLastCreationBeforeTheGapAlone;
	// settled at once here.)
	defer setSettleDelay(0)()
	var events api.EventMask
	events.Set(api.Event_STOP_CONTAINER)
	c2 := &api.Container{Id: "c2", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_STOPPED}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{c2})
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
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{c2})
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
// it listed stopped hands the stop, and the StopContainer the runtime
// sends afterwards does not reach the author again.
func TestStopHandedByACatchUpIsNotHandedAgain(t *testing.T) {
	author := &stopAuthor{}
	p, _ := newRecordTestPlugin(t, author, "late", "l1")
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
	exited := &api.Container{Id: "c1", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_STOPPED}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{exited})
	if _, err := a.StopContainer(ctx, pod, c); err != nil { // the runtime's, late
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
	p, _ := newRecordTestPlugin(t, &removeAuthor{}, "stale", "s1")
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
	p.catchUpLifecycle(ctx, events, since, math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{c})
	if es, _ := p.rec.Entries(); len(es) != 0 {
		t.Fatalf("entries %+v after a catch-up with a stale list, want none", es)
	}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, nil, nil) // the next gap: the pod is gone
	if st := p.Stats(); st.CaughtUpChanges != 0 {
		t.Fatalf("%d changes handed, want none (all were acted on)", st.CaughtUpChanges)
	}
}

// podAuthor handles pods' stops and removals, and counts them.
type podAuthor struct {
	mu       sync.Mutex
	stops    []string
	caughtUp []string
}

func (a *podAuthor) note(ctx context.Context, what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if CatchingUp(ctx) {
		a.caughtUp = append(a.caughtUp, what)
	} else {
		a.stops = append(a.stops, what)
	}
}

func (*podAuthor) RunPodSandbox(context.Context, *api.PodSandbox) error { return nil }

func (a *podAuthor) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	a.note(ctx, "StopPodSandbox "+pod.GetId())
	return nil
}

func (a *podAuthor) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	a.note(ctx, "RemovePodSandbox "+pod.GetId())
	return nil
}

// A gap declared at an event (a takeover, not in a Synchronize) is caught
// up at this instance's next Synchronize, which may come much later: the
// instance acted meanwhile, and the runtime's list may lag what it acted
// on (CRI-O sends RunPodSandbox before it lists the pod, and lists outside
// the lock its events take). A pod created after the gap and not listed
// yet is not gone: its stop and removal are not handed, while those of a
// pod recorded before the gap and gone are. Without the gap's bound (the
// record's Seq when the gap was declared) both pods' changes were handed,
// and the runtime's own StopPodSandbox and RemovePodSandbox of the new pod
// then reached the author a second time (TestDemoFaultsInEveryMode, cri-o,
// about 1 run in 10). The old pod, run just before the gap, may itself be
// in the runtime's hands still: its changes come with the follow-up
// catch-up, once it has settled and is still not listed.
func TestCatchUpOfAnEarlierGapIgnoresWhatWasActedOnSince(t *testing.T) {
	defer setSettleDelay(20 * time.Millisecond)()
	author := &podAuthor{}
	p, _ := newRecordTestPlugin(t, author, "lag", "g1")
	var events api.EventMask
	events.Set(api.Event_RUN_POD_SANDBOX)
	events.Set(api.Event_STOP_POD_SANDBOX)
	events.Set(api.Event_REMOVE_POD_SANDBOX)
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	a.events.Store(uint64(events))
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	old, fresh := &api.PodSandbox{Id: "pod-old"}, &api.PodSandbox{Id: "pod-new"}
	if err := a.RunPodSandbox(ctx, old); err != nil {
		t.Fatal(err)
	}
	p.noteGap(time.Second) // a takeover at an event: old goes in the window
	if err := a.RunPodSandbox(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	// A new connection of this instance (a catch-up or a resync): the
	// runtime lists neither pod, the new one not yet.
	b := newSyncedAdapter(t, p, events, nil)
	// The runtime's own events for the new pod, later.
	if err := b.StopPodSandbox(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := b.RemovePodSandbox(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if got := author.caught(); got != "" {
		t.Fatalf("caught up %q before the old pod settled, want nothing", got)
	}
	awaitFollowUp(t, p)
	newSyncedAdapter(t, p, events, nil) // the follow-up: still not listed
	if got, want := author.caught(), "StopPodSandbox pod-old,RemovePodSandbox pod-old"; got != want {
		t.Fatalf("caught up %q, want %q", got, want)
	}
	author.mu.Lock()
	defer author.mu.Unlock()
	if got, want := strings.Join(author.stops, ","), "StopPodSandbox pod-new,RemovePodSandbox pod-new"; got != want {
		t.Fatalf("handed as events %q, want %q", got, want)
	}
}

// A pod run just before a gap, by an instance that died before the
// runtime was done with it, and not listed yet by the catch-up's list
// (CRI-O lists outside the lock its events take, and adds a pod once
// its RunPodSandbox is done): it is not read as gone. The follow-up lists
// it and hands nothing; the runtime's own StopPodSandbox and
// RemovePodSandbox reach the author as events. Before, the catch-up
// handed its stop and removal at once, while the pod ran, and the
// runtime's own events, found handed, reached nobody.
func TestCatchUpLeavesAPodRunJustBeforeTheGapUntilListed(t *testing.T) {
	defer setSettleDelay(20 * time.Millisecond)()
	author := &podAuthor{}
	p, _ := newRecordTestPlugin(t, author, "podlag", "q1")
	var events api.EventMask
	events.Set(api.Event_STOP_POD_SANDBOX)
	events.Set(api.Event_REMOVE_POD_SANDBOX)
	newSyncedAdapter(t, p, events, nil)
	pod := &api.PodSandbox{Id: "pod-1"}
	p.rec.End(p.rec.Begin(lifecycle.Pod, pod.Id, "", lifecycle.Running)) // the dead owner's last act
	p.noteGap(time.Millisecond)                                          // this instance takes over
	newSyncedAdapter(t, p, events, nil)                                  // the list lacks the pod
	if got := author.caught(); got != "" {
		t.Fatalf("caught up %q while the runtime may still run the pod, want nothing", got)
	}
	awaitFollowUp(t, p)
	c := newSyncedAdapter(t, p, events, []*api.PodSandbox{pod}) // listed now
	if err := c.StopPodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	author.mu.Lock()
	defer author.mu.Unlock()
	if got := fmt.Sprintf("caught up %v, events %v", author.caughtUp, author.stops); got != "caught up [], events [StopPodSandbox pod-1 RemovePodSandbox pod-1]" {
		t.Fatalf("%s; want the runtime's own stop and removal handed, nothing caught up", got)
	}
}

// caught is what a catch-up handed the author, in order.
func (a *podAuthor) caught() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.caughtUp, ",")
}

// newSyncedAdapter makes a new connection of p's, with events, whose
// Synchronize the runtime calls with pods (configured first: the record's
// Seq then bounds the catch-up).
func newSyncedAdapter(t *testing.T, p *Plugin, events api.EventMask, pods []*api.PodSandbox) *adapter {
	t.Helper()
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	a.events.Store(uint64(events))
	a.recSeq.Store(p.rec.Seq())
	if _, err := a.Synchronize(context.Background(), pods, nil); err != nil {
		t.Fatal(err)
	}
	return a
}

// awaitFollowUp waits until p asks for the follow-up catch-up of objects a
// catch-up left out (see unsettled), as Run would before replacing its
// connection.
func awaitFollowUp(t *testing.T, p *Plugin) {
	t.Helper()
	select {
	case <-p.catchUp:
	case <-time.After(10 * time.Second):
		t.Fatal("no follow-up catch-up asked for")
	}
}

// The runtime may drop a removed pod from its list before it sends
// RemovePodSandbox, and list in between (CRI-O, outside the lock its
// events take): a catch-up then hands the removal, late, and the
// RemovePodSandbox the runtime sends afterwards does not reach the author
// again. The catch-up's own bringing of the record in line with the list
// dropped the late entry, and the event reached the author a second time.
func TestRemovalHandedByACatchUpIsNotHandedAgain(t *testing.T) {
	author := &podAuthor{}
	p, _ := newRecordTestPlugin(t, author, "lateremove", "r1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod, other := &api.PodSandbox{Id: "pod-1"}, &api.PodSandbox{Id: "pod-2"}
	for _, p := range []*api.PodSandbox{pod, other} {
		if err := a.RunPodSandbox(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := a.StopPodSandbox(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var events api.EventMask
	events.Set(api.Event_STOP_POD_SANDBOX)
	events.Set(api.Event_REMOVE_POD_SANDBOX)
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, nil, nil) // neither listed
	if err := a.RemovePodSandbox(ctx, pod); err != nil {                   // the runtime's, late
		t.Fatal(err)
	}
	author.mu.Lock()
	got, stops := strings.Join(author.caughtUp, ","), strings.Join(author.stops, ",")
	author.mu.Unlock()
	if got != "RemovePodSandbox pod-1,RemovePodSandbox pod-2" && got != "RemovePodSandbox pod-2,RemovePodSandbox pod-1" ||
		stops != "StopPodSandbox pod-1,StopPodSandbox pod-2" {
		t.Fatalf("caught up %q, handed as events %q; want both removals caught up, only the stops as events", got, stops)
	}
	// The next catch-up drops what is left late (pod-2's event never
	// came) and hands nothing again.
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, nil, nil)
	if es, _ := p.rec.Entries(); len(es) != 0 {
		t.Fatalf("entries %+v after the next catch-up, want none", es)
	}
	if st := p.Stats(); st.CaughtUpChanges != 2 {
		t.Fatalf("%d changes caught up, want 2", st.CaughtUpChanges)
	}
}

// An event whose decision was taken before the lifecycle record closed
// (Run returned, or the test kit crashed the instance, while the event's
// goroutine was between its decision and its record) is not handed to the
// author: its act would be in no record, and the next owner's catch-up,
// finding the change not made, would hand it a second time.
func TestChangeBegunAfterTheRecordClosedIsNotHanded(t *testing.T) {
	author := &stopAuthor{}
	p, hook := newRecordTestPlugin(t, author, "closed", "c1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	c1 := &api.Container{Id: "c1", PodSandboxId: pod.Id}
	if _, _, err := a.CreateContainer(ctx, pod, c1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StopContainer(ctx, pod, c1); err != nil {
		t.Fatal(err)
	}
	// The record closes; the coordinator, still open, lets the next
	// events through their decision, as it did for the event in flight.
	if err := p.rec.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := &api.Container{Id: "c2", PodSandboxId: pod.Id}
	adj, _, err := a.CreateContainer(ctx, pod, c2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := adj.GetAnnotations()[p.stampKey]; ok {
		t.Fatal("a creation begun after the record closed was stamped")
	}
	if _, err := a.StopContainer(ctx, pod, c2); err != nil {
		t.Fatal(err)
	}
	author.mu.Lock()
	defer author.mu.Unlock()
	if strings.Join(author.stops, ",") != "c1" {
		t.Fatalf("stops handed %v, want [c1]: c2's came after the record closed", author.stops)
	}
	warned := 0
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, "lifecycle record closed") {
			warned++
		}
	}
	if warned != 2 {
		t.Fatalf("%d warnings of a change not handed for a closed record, want 2", warned)
	}
}

// startStopAuthor records the starts and stops it is handed.
type startStopAuthor struct {
	stopAuthor
	starts []string
}

func (s *startStopAuthor) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts = append(s.starts, c.GetId())
	return nil
}

// A creation the owner died inside of (pending in the record) whose
// container the runtime's list does not have yet: CRI-O adds it once the
// event is done, and lists outside the lock its events take. The catch-up
// must not read it as gone: before, it handed its StopContainer, and the
// runtime's StartContainer that followed was found handed and dropped,
// acted on by nobody (the demo, cri-o, -faults 10: an undeclared miss).
// Left alone, the start reaches the author, and a later catch-up that
// does not list it hands its stop.
func TestCatchUpLeavesACreationInFlightAlone(t *testing.T) {
	author := &startStopAuthor{}
	p, _ := newRecordTestPlugin(t, author, "inflight", "f1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	c := &api.Container{Id: "c1", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_CREATED}
	p.rec.Begin(lifecycle.Container, c.Id, pod.Id, lifecycle.Created) // the dead owner's, never ended
	var events api.EventMask
	events.Set(api.Event_START_CONTAINER, api.Event_STOP_CONTAINER)
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, nil) // c1 not listed yet
	if err := a.StartContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	author.mu.Lock()
	got := fmt.Sprintf("starts %v, stops %v, caught up %v", author.starts, author.stops, author.caughtUp)
	author.mu.Unlock()
	if got != "starts [c1], stops [], caught up []" {
		t.Fatalf("%s; want the runtime's start handed, nothing caught up", got)
	}
	// A later catch-up that still does not list it: stopped (and gone).
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, nil)
	author.mu.Lock()
	defer author.mu.Unlock()
	if strings.Join(author.caughtUp, ",") != "c1" {
		t.Fatalf("caught up %v, want [c1]: its stop, by the next catch-up", author.caughtUp)
	}
}

// A creation a connection declares in doubt without acting on it is not
// recorded (other changes are, as decided): the runtime may not list the
// new object yet, and a catch-up reading the recorded creation as gone
// handed its stop and made the runtime's StartContainer, found handed,
// reach nobody (the demo, cri-o, -faults 10 -seed 100: an undeclared miss).
func TestCreationInDoubtIsNotRecorded(t *testing.T) {
	p, _ := newRecordTestPlugin(t, &startStopAuthor{}, "doubt", "d1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	doubt := turn{a: a, inDoubt: true}
	doubt.record(context.Background(), evCreateContainer, "c1", "pod-1")
	doubt.record(context.Background(), evRunPodSandbox, "pod-2", "")
	doubt.record(context.Background(), evStopContainer, "c3", "pod-1")
	entries, _ := p.rec.Entries()
	var got []string
	for _, e := range entries {
		got = append(got, e.Kind.String()+"/"+e.ID+"/"+e.State.String())
	}
	if len(got) != 1 || !strings.HasSuffix(got[0], "/c3/"+lifecycle.Stopped.String()) {
		t.Fatalf("record %v, want only c3, stopped: a creation in doubt is not recorded", got)
	}
}

// A container whose creation is its last change, which the list lacks, is
// left to its own events until settled: the last creation any instance
// began before the gap (its acting instance died before the runtime was
// done with it: the demo, cri-o, -faults 10 -seed 97, the last creation
// read as gone, its StartContainer found handed and dropped), and an older
// one too (CRI-O lists a container only once the OCI runtime created it:
// -seed 3063, one created 3 ms before the list, others acted on between).
// One still not listed once settled is gone: the follow-up hands its stop.
func TestCatchUpLeavesTheLastCreationBeforeTheGapAlone(t *testing.T) {
	defer setSettleDelay(20 * time.Millisecond)()
	author := &startStopAuthor{}
	p, _ := newRecordTestPlugin(t, author, "last", "l1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	// The dead owner's acts: c0, then c1, its last.
	p.rec.End(p.rec.Begin(lifecycle.Container, "c0", pod.Id, lifecycle.Created))
	p.rec.End(p.rec.Begin(lifecycle.Container, "c1", pod.Id, lifecycle.Created))
	p.noteGap(time.Millisecond) // this instance takes over
	var events api.EventMask
	events.Set(api.Event_START_CONTAINER, api.Event_STOP_CONTAINER)
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, nil)
	c1 := &api.Container{Id: "c1", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_CREATED}
	if err := a.StartContainer(ctx, pod, c1); err != nil {
		t.Fatal(err)
	}
	author.mu.Lock()
	got := fmt.Sprintf("starts %v, stops %v, caught up %v", author.starts, author.stops, author.caughtUp)
	author.mu.Unlock()
	if got != "starts [c1], stops [], caught up []" {
		t.Fatalf("%s; want c1's start handed, nothing caught up before the two settle", got)
	}
	awaitFollowUp(t, p)
	var events2 api.EventMask
	events2.Set(api.Event_START_CONTAINER, api.Event_STOP_CONTAINER)
	c1.State = api.ContainerState_CONTAINER_RUNNING
	p.catchUpLifecycle(ctx, events2, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{c1})
	author.mu.Lock()
	defer author.mu.Unlock()
	got = fmt.Sprintf("starts %v, stops %v, caught up %v", author.starts, author.stops, author.caughtUp)
	if got != "starts [c1], stops [], caught up [c0]" {
		t.Fatalf("%s; want c0's stop caught up by the follow-up", got)
	}
}

// A gap this Synchronize ends (a first owner's claim after the owner
// died; the gap is declared only once the connection acts): the last
// creation before it is left out while the list lacks it, as for a gap
// declared earlier, although the Seq noted at this instance's previous
// gap is stale. Before, the catch-up read that Seq, handed the stop of a
// container the runtime had not listed yet, and dropped the runtime's own
// StartContainer as handed (demo, mode gap, -faults 10 -seed 79).
func TestCatchUpLeavesTheLastCreationBeforeAClaimedGapAlone(t *testing.T) {
	author := &startStopAuthor{}
	p, _ := newRecordTestPlugin(t, author, "claimed", "g1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	p.rec.End(p.rec.Begin(lifecycle.Container, "c0", pod.Id, lifecycle.Created))
	p.noteGap(time.Millisecond)                                                  // an earlier gap, caught up
	p.rec.End(p.rec.Begin(lifecycle.Container, "c1", pod.Id, lifecycle.Created)) // the dead owner's last act
	var events api.EventMask
	events.Set(api.Event_START_CONTAINER, api.Event_STOP_CONTAINER)
	c0 := &api.Container{Id: "c0", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_CREATED}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{c0})
	c1 := &api.Container{Id: "c1", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_CREATED}
	if err := a.StartContainer(ctx, pod, c1); err != nil {
		t.Fatal(err)
	}
	author.mu.Lock()
	defer author.mu.Unlock()
	got := fmt.Sprintf("starts %v, stops %v, caught up %v", author.starts, author.stops, author.caughtUp)
	if got != "starts [c1], stops [], caught up []" {
		t.Fatalf("%s; want c1 left out of the catch-up and its start handed", got)
	}
}

// The last creation before the gap, listed running: the runtime started
// it while no instance acted, and the catch-up hands its start (it is left
// out of the comparison only while the list lacks it).
func TestCatchUpHandsTheStartOfTheLastCreationListedRunning(t *testing.T) {
	author := &startStopAuthor{}
	p, _ := newRecordTestPlugin(t, author, "started", "s1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	p.rec.End(p.rec.Begin(lifecycle.Container, "c1", pod.Id, lifecycle.Created)) // the dead owner's last act
	p.noteGap(time.Millisecond)
	var events api.EventMask
	events.Set(api.Event_START_CONTAINER, api.Event_STOP_CONTAINER)
	c1 := &api.Container{Id: "c1", PodSandboxId: pod.Id, State: api.ContainerState_CONTAINER_RUNNING}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{pod}, []*api.Container{c1})
	author.mu.Lock()
	defer author.mu.Unlock()
	if strings.Join(author.starts, ",") != "c1" || len(author.stops)+len(author.caughtUp) != 0 {
		t.Fatalf("starts %v, stops %v, caught up stops %v; want c1's start caught up, nothing else", author.starts, author.stops, author.caughtUp)
	}
}

// The last creation before the gap, still not listed once it has settled:
// the runtime created and stopped it while no instance acted (or never
// created it), and the follow-up catch-up hands its stop. Before, that
// waited for a later gap's catch-up, which might never come.
func TestFollowUpHandsTheStopOfTheLastCreationStillNotListed(t *testing.T) {
	defer setSettleDelay(20 * time.Millisecond)()
	author := &startStopAuthor{}
	p, _ := newRecordTestPlugin(t, author, "settled", "u1")
	var events api.EventMask
	events.Set(api.Event_START_CONTAINER, api.Event_STOP_CONTAINER)
	newSyncedAdapter(t, p, events, nil)
	pod := &api.PodSandbox{Id: "pod-1"}
	p.rec.End(p.rec.Begin(lifecycle.Container, "c1", pod.Id, lifecycle.Created)) // the dead owner's last act
	p.noteGap(time.Millisecond)
	newSyncedAdapter(t, p, events, []*api.PodSandbox{pod}) // c1 not listed
	author.mu.Lock()
	early := len(author.caughtUp)
	author.mu.Unlock()
	if early != 0 {
		t.Fatalf("caught up %d stops before c1 settled, want none", early)
	}
	awaitFollowUp(t, p)
	newSyncedAdapter(t, p, events, []*api.PodSandbox{pod}) // still not listed
	author.mu.Lock()
	defer author.mu.Unlock()
	if got := fmt.Sprintf("starts %v, stops %v, caught up %v", author.starts, author.stops, author.caughtUp); got != "starts [], stops [], caught up [c1]" {
		t.Fatalf("%s; want c1's stop caught up by the follow-up", got)
	}
	if due, _ := p.unsettled.takeDue(); due {
		t.Fatal("another follow-up asked for after the last object settled")
	}
}

// podRunAuthor notes the pod runs it is handed.
type podRunAuthor struct {
	stopAuthor
	runs []string
}

func (a *podRunAuthor) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs = append(a.runs, pod.GetId())
	return nil
}

// A catch-up hands the run of a listed pod the record lacks, except one
// removed since the runtime listed: a pod run and acted on, then removed
// and acted on after the list, is listed and not recorded too. Before,
// its run was handed (and a later catch-up, finding it recorded and not
// listed, handed its stop and removal): the demo, mode gap, -faults 10,
// three events acted on twice. The removal here is this process's own
// act (a promoted owner's old connection acts on while its new one
// catches up), which the record's mapping knows.
func TestCatchUpHandsNoRunOfAPodRemovedSinceTheList(t *testing.T) {
	author := &podRunAuthor{}
	p, _ := newRecordTestPlugin(t, author, "podrun", "r1")
	ctx := context.Background()
	var events api.EventMask
	events.Set(api.Event_RUN_POD_SANDBOX)
	kept, gone, missed := &api.PodSandbox{Id: "kept"}, &api.PodSandbox{Id: "gone"}, &api.PodSandbox{Id: "missed"}
	p.rec.SetPodsTracked(true) // as the first owner on the node leaves it (trackPods)
	p.rec.End(p.rec.Begin(lifecycle.Pod, kept.Id, "", lifecycle.Running))
	p.rec.End(p.rec.Begin(lifecycle.Pod, gone.Id, "", lifecycle.Running))
	listed := []*api.PodSandbox{kept, gone, missed} // missed: run while no instance acted
	configured := p.rec.Seq()
	p.rec.End(p.rec.Begin(lifecycle.Pod, gone.Id, "", lifecycle.Removed)) // acted on after the list
	p.rec.End(p.rec.Begin(lifecycle.Pod, "later", "", lifecycle.Running)) // and a run after the list
	p.catchUpLifecycle(ctx, events, configured, math.MaxUint64, listed, nil)
	author.mu.Lock()
	defer author.mu.Unlock()
	if got := fmt.Sprint(author.runs); got != "[missed]" {
		t.Fatalf("runs handed %s, want [missed]", got)
	}
}

// Another instance's act since the runtime listed leaves the catch-up
// unable to tell a pod removed since from one run while no instance
// acted: it hands no run, and says so; the next catch-up, with a list
// taken after that act, hands the missed one.
func TestCatchUpHandsNoRunAfterAnotherInstanceActedSinceTheList(t *testing.T) {
	author := &podRunAuthor{}
	p, hook := newRecordTestPlugin(t, author, "podrun", "r1")
	other, err := lifecycle.Open(filepath.Dir(p.rec.Path())) // another instance's mapping
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	ctx := context.Background()
	var events api.EventMask
	events.Set(api.Event_RUN_POD_SANDBOX)
	kept, gone, missed := &api.PodSandbox{Id: "kept"}, &api.PodSandbox{Id: "gone"}, &api.PodSandbox{Id: "missed"}
	p.rec.SetPodsTracked(true)
	p.rec.End(p.rec.Begin(lifecycle.Pod, kept.Id, "", lifecycle.Running))
	p.rec.End(p.rec.Begin(lifecycle.Pod, gone.Id, "", lifecycle.Running))
	listed := []*api.PodSandbox{kept, gone, missed}
	configured := p.rec.Seq()
	other.End(other.Begin(lifecycle.Pod, gone.Id, "", lifecycle.Removed)) // another instance, after the list
	p.catchUpLifecycle(ctx, events, configured, math.MaxUint64, listed, nil)
	author.mu.Lock()
	runs := fmt.Sprint(author.runs)
	author.mu.Unlock()
	if runs != "[]" {
		t.Fatalf("runs handed %s after another instance acted since the list, want none", runs)
	}
	said := false
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, "lifecycle catch-up: listed pods the record lacks") && e.Data["pods"] == 2 {
			said = true
		}
	}
	if !said {
		t.Fatal("the two listed pods the record lacks (gone since, missed) were not said in the log")
	}
	p.catchUpLifecycle(ctx, events, p.rec.Seq(), math.MaxUint64, []*api.PodSandbox{kept, missed}, nil)
	author.mu.Lock()
	defer author.mu.Unlock()
	if got := fmt.Sprint(author.runs); got != "[missed]" {
		t.Fatalf("runs handed %s, want [missed]", got)
	}
}

// A change a handler of this process is inside of when a catch-up runs
// (a promoted owner's old connection acts on while its new one catches
// up) is live, not in doubt: the catch-up neither tells the author's
// InDoubt nor hands it, and leaves it to its handler's end. The same
// change left by another instance (one that died inside it) is in doubt.
func TestCatchUpLeavesAChangeItsOwnHandlerIsInside(t *testing.T) {
	for _, mine := range []bool{true, false} {
		t.Run(fmt.Sprintf("mine=%v", mine), func(t *testing.T) {
			author := &doubtAuthor{}
			p, _ := newRecordTestPlugin(t, author, "live", "r1")
			p.cfg.atLeastOnce = true
			writer := p.rec
			if !mine {
				other, err := lifecycle.Open(filepath.Dir(p.rec.Path()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { other.Close() })
				writer = other
			}
			var events api.EventMask
			events.Set(api.Event_STOP_CONTAINER)
			ctr := &api.Container{Id: "c1", PodSandboxId: "pod", State: api.ContainerState_CONTAINER_RUNNING}
			writer.End(writer.Begin(lifecycle.Container, "c1", "pod", lifecycle.Created))
			writer.End(writer.Begin(lifecycle.Container, "c1", "pod", lifecycle.Running))
			inside := writer.Begin(lifecycle.Container, "c1", "pod", lifecycle.Stopped) // the handler runs
			configured := p.rec.Seq()
			p.catchUpLifecycle(context.Background(), events, configured, math.MaxUint64,
				[]*api.PodSandbox{{Id: "pod"}}, []*api.Container{ctr})
			author.mu.Lock()
			got := fmt.Sprint(author.doubts, author.stops)
			author.mu.Unlock()
			want := "[StopContainer/c1] [c1]" // told, and handed again (at-least-once)
			if mine {
				want = "[] []"
			}
			if got != want {
				t.Fatalf("in doubt, stops handed: %s, want %s", got, want)
			}
			writer.End(inside)
			es, _ := p.rec.Entries()
			if len(es) != 1 || es[0].State != lifecycle.Stopped || es[0].Pending != lifecycle.Unknown {
				t.Fatalf("after the handler's end the record holds %+v, want c1 stopped", es)
			}
		})
	}
}

// doubtAuthor records what InDoubt names and the stops it is handed.
type doubtAuthor struct {
	mu     sync.Mutex
	doubts []string
	stops  []string
}

func (a *doubtAuthor) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stops = append(a.stops, c.GetId())
	return nil, nil
}

func (a *doubtAuthor) InDoubt(_ context.Context, event, id string, _ bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.doubts = append(a.doubts, event+"/"+id)
}

// A gap one instance declared and did not catch up (it yielded before its
// catch-up) is caught up by the next owner's Synchronize, whichever
// instance it is: the record notes it. Before, only the declaring
// instance knew of the gap, and the changes in it were never handed (the
// demo, mode gap, -faults 10 -seed 2089: a pod run in the window).
func TestGapOfAnotherInstanceIsCaughtUpByTheNextOwner(t *testing.T) {
	root := t.TempDir()
	mk := func(id string, author any) *Plugin {
		log, _ := test.NewNullLogger()
		p, err := New(author, WithVersion("1.0.0"), WithPluginName("gap"), WithPluginIdx("10"),
			WithHandoverDir(root), WithInstanceID(id), WithLogger(logrus.NewEntry(log)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.release)
		return p
	}
	declarer := mk("a", &stopAuthor{})
	author := &stopAuthor{}
	next := mk("b", author)
	declarer.rec.End(declarer.rec.Begin(lifecycle.Container, "c1", "pod", lifecycle.Created))
	declarer.rec.End(declarer.rec.Begin(lifecycle.Container, "c1", "pod", lifecycle.Running))
	if gap, _ := next.lifecycleGap(); gap {
		t.Fatal("a catch-up with no gap declared by any instance")
	}
	declarer.noteGap(time.Millisecond) // and it yields before its catch-up
	gap, upTo := next.lifecycleGap()
	if !gap || upTo != declarer.rec.Seq() {
		t.Fatalf("the next owner's catch-up: gap %v up to %d, want a gap up to %d", gap, upTo, declarer.rec.Seq())
	}
	var events api.EventMask
	events.Set(api.Event_STOP_CONTAINER)
	next.catchUpLifecycle(context.Background(), events, next.rec.Seq(), upTo,
		[]*api.PodSandbox{{Id: "pod"}}, nil) // c1 stopped in the gap
	author.mu.Lock()
	got := fmt.Sprint(author.caughtUp)
	author.mu.Unlock()
	if got != "[c1]" {
		t.Fatalf("stops caught up %s, want [c1]", got)
	}
	if gap, _ := next.lifecycleGap(); gap {
		t.Fatal("the gap was caught up twice")
	}
}

// A change whose request the runtime gave up on before it was recorded
// (the instance froze between the decision and the record, and the
// runtime went on without it) is neither recorded nor handed: recorded
// late, it brought back an entry later acts had removed, and a later
// catch-up handed those acts again (the demo, mode exit-stop, -faults 10
// -seed 3076: a killed owner's RunPodSandbox recorded after the pod's
// stop and removal).
func TestChangeOfARequestGivenUpIsNotRecorded(t *testing.T) {
	p, _ := newRecordTestPlugin(t, &startStopAuthor{}, "late", "g1")
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	acting := turn{a: a, act: true}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r, skip := acting.record(gone, evRunPodSandbox, "pod-1", "")
	r.done()
	if !skip {
		t.Fatal("a change of a request the runtime gave up on was to be handed")
	}
	if es, _ := p.rec.Entries(); len(es) != 0 {
		t.Fatalf("recorded %+v, want nothing", es)
	}
	r, skip = acting.record(context.Background(), evRunPodSandbox, "pod-2", "")
	r.done()
	if es, _ := p.rec.Entries(); skip || len(es) != 1 || es[0].ID != "pod-2" || es[0].State != lifecycle.Running {
		t.Fatalf("a live request: skip %v, entries %+v; want pod-2 running", skip, es)
	}
}

// A pod's run that reached no handler (the owner was dropped before its
// call) is handed late once, whichever comes first: the late hand of the
// instance that took over by the cut (handOwed), or the catch-up that
// takeover asks for, which hands each listed pod the record lacks. The
// late hand records the pod as a catch-up's hand does; one that finds the
// pod recorded hands nothing.
func TestAPodRunHandedLateIsNotHandedAgainByACatchUp(t *testing.T) {
	for _, lateFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "late hand first", false: "catch-up first"}[lateFirst], func(t *testing.T) {
			author := &podRunAuthor{}
			p, _ := newRecordTestPlugin(t, author, "podrun", "r1")
			a := &adapter{p: p}
			ctx := context.Background()
			var events api.EventMask
			events.Set(api.Event_RUN_POD_SANDBOX)
			missed := &api.PodSandbox{Id: "missed"}
			p.rec.SetPodsTracked(true) // as the first owner on the node leaves it (trackPods)
			configured := p.rec.Seq()
			catchUp := func() {
				p.catchUpLifecycle(ctx, events, configured, math.MaxUint64, []*api.PodSandbox{missed}, nil)
			}
			if !lateFirst {
				catchUp()
			}
			p.owe(owedCall{recentCall: recentCall{event: evRunPodSandbox, id: missed.Id, pod: missed}, unacted: true})
			a.handOwed(ctx)
			if lateFirst {
				catchUp()
			}
			author.mu.Lock()
			defer author.mu.Unlock()
			if got := fmt.Sprint(author.runs); got != "[missed]" {
				t.Fatalf("runs handed %s, want [missed] once", got)
			}
		})
	}
}
