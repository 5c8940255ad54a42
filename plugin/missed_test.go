package plugin

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/protocol"
)

// syncAuthor records the containers its Synchronize is handed.
type syncAuthor struct {
	mu     sync.Mutex
	handed []string
	ch     chan struct{} // closed at the first hand
}

func (s *syncAuthor) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range ctrs {
		s.handed = append(s.handed, c.GetId())
	}
	if len(ctrs) != 0 && s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	return nil, nil
}

func (*syncAuthor) StopContainer(context.Context, *api.PodSandbox, *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// An owner that noted a missed creation (its stop acted on, no stamp, in
// no record) and is no longer owner when it comes to its catch-up (it
// yielded to a newcomer) hands the container to its author at once: no
// other instance knows of it. Before, the catch-up request was dropped
// ("not owner") and the container was handed to nobody.
func TestYieldedOwnerHandsItsMissedCreations(t *testing.T) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	root, err := os.MkdirTemp("", "nhm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	handed := make(chan struct{})
	author := &syncAuthor{ch: handed}
	p, err := New(author, WithVersion("1.0.0"), WithPluginName("missed"), WithPluginIdx("10"),
		WithHandoverDir(root), WithInstanceID("m1"), WithLogger(logrus.NewEntry(quiet)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.coord.Close(); p.dir.Close() })
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r := p.Role(); r != handover.RoleOwner {
		t.Fatalf("role %v after Synchronize, want owner", r)
	}
	pod := &api.PodSandbox{Id: "pod-1"}
	c := &api.Container{Id: "ctr-late", PodSandboxId: pod.Id}
	if _, err := a.StopContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	// No longer owner before the catch-up (a Leave with no successor
	// retires it as a yield does).
	left, lcancel := context.WithCancel(ctx)
	lcancel()
	p.coord.Leave(left)
	if r := p.Role(); r == handover.RoleOwner {
		t.Fatalf("still owner after Leave")
	}
	serving, stop := context.WithCancel(ctx)
	done := make(chan serveEnd, 1)
	go func() { done <- p.serve(serving, &conn{closed: make(chan struct{}), synced: make(chan struct{})}) }()
	select {
	case <-handed:
	case <-ctx.Done():
		t.Fatal("the missed creation was never handed to the author")
	}
	stop()
	<-done
	author.mu.Lock()
	defer author.mu.Unlock()
	if len(author.handed) != 1 || author.handed[0] != c.Id {
		t.Fatalf("handed %v, want [%s] once", author.handed, c.Id)
	}
}

// A listed container that another instance handed meanwhile (it recorded
// the hand, then dropped its note of the missed creation) is not handed
// again by a catch-up whose earlier read of the record missed it: takeNotes
// reads the record after the notes (the demo, mode cri-o, -faults 10
// -seed 93: one container handed by two instances 0.8 ms apart). A listed
// container nobody noted or recorded is handed.
func TestTakeNotesLeavesAContainerHandedMeanwhile(t *testing.T) {
	p, _ := newRecordTestPlugin(t, &syncAuthor{}, "notes", "a")
	other := protocol.SyncedBy{Version: "2.0.0", Instance: "b"}
	if err := p.dir.RecordSyncedUnstamped([]string{"ctr-1"}, other, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	hand, taken := p.takeNotes([]*api.Container{{Id: "ctr-1"}, {Id: "ctr-2"}}, map[string]bool{})
	var ids []string
	for _, c := range hand {
		ids = append(ids, c.GetId())
	}
	if len(ids) != 1 || ids[0] != "ctr-2" || len(taken) != 0 {
		t.Fatalf("handed %v (notes taken %v); want ctr-2 alone: ctr-1 was handed by another instance", ids, taken)
	}
}

// A listed container with a note that another instance takes, hands,
// records and drops between takeNotes' read of the notes and its take is
// not handed again: it was in the demo (mode exit-stop, -faults 10 -seed
// 1002: two authors 1 ms apart).
func TestTakeNotesLeavesAContainerWhoseNoteWasTakenMeanwhile(t *testing.T) {
	p, _ := newRecordTestPlugin(t, &syncAuthor{}, "notes", "a")
	if err := p.dir.NoteMissed("ctr-1", "b", nil); err != nil {
		t.Fatal(err)
	}
	beforeTakeNote = func(id string) {
		// Instance b hands ctr-1: takes its note, records, drops.
		if ok, _, err := p.dir.TakeMissed(id); err != nil || !ok {
			t.Errorf("b could not take the note of %s: %v", id, err)
		}
		by := protocol.SyncedBy{Version: "2.0.0", Instance: "b"}
		if err := p.dir.RecordSyncedUnstamped([]string{id}, by, func(string) bool { return true }); err != nil {
			t.Error(err)
		}
		if err := p.dir.DropMissed([]string{id}); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { beforeTakeNote = nil })
	hand, taken := p.takeNotes([]*api.Container{{Id: "ctr-1"}}, map[string]bool{})
	if len(hand) != 0 || len(taken) != 0 {
		t.Fatalf("handed %v (notes taken %v); want none: another instance handed ctr-1 meanwhile", hand, taken)
	}
}
