package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/containerd/nri/pkg/api"
)

func open(t *testing.T, dir string, slots int) *Table {
	t.Helper()
	tb, err := OpenSlots(dir, slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

func entries(t *testing.T, tb *Table) []Entry {
	t.Helper()
	es, bad := tb.Entries()
	if bad != 0 {
		t.Fatalf("%d unreadable slots", bad)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].ID < es[j].ID })
	return es
}

func TestLifecycleSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 64)
	a.End(a.Begin(Pod, "pod-1", "", Running))
	a.End(a.Begin(Container, "ctr-1", "pod-1", Created))
	a.End(a.Begin(Container, "ctr-1", "pod-1", Running))
	a.End(a.Begin(Container, "ctr-2", "pod-1", Created))
	a.End(a.Begin(Container, "ctr-2", "pod-1", Stopped))
	a.End(a.Begin(Container, "ctr-2", "pod-1", Removed))
	a.Close()
	b := open(t, dir, 8) // an existing record keeps its own size
	if b.Slots() != 64 {
		t.Fatalf("reopened with %d slots, want 64", b.Slots())
	}
	want := []Entry{
		{Kind: Container, ID: "ctr-1", PodID: "pod-1", State: Running, Seq: 3}, // the third write
		{Kind: Pod, ID: "pod-1", State: Running, Seq: 1},
	}
	if got := entries(t, b); !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %+v, want %+v", got, want)
	}
}

func TestLifecycleKilledInsideTheHandlerLeavesThePendingChange(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 64)
	a.End(a.Begin(Container, "ctr-1", "pod-1", Created))
	a.Begin(Container, "ctr-1", "pod-1", Stopped) // the instance dies before End
	a.Close()
	b := open(t, dir, 64)
	got := entries(t, b)
	if len(got) != 1 || got[0].State != Created || got[0].Pending != Stopped {
		t.Fatalf("entries %+v, want ctr-1 created with stop pending", got)
	}
	if !b.Resolve(Container, "ctr-1") {
		t.Fatal("Resolve found no pending change")
	}
	if got := entries(t, b); got[0].State != Stopped || got[0].Pending != Unknown {
		t.Fatalf("after Resolve %+v, want stopped, nothing pending", got)
	}
}

// A kill -9 between the id bytes and the state word of an insert (the
// write order Begin and Set use) leaves a slot that reads empty, and the
// next insert on it writes cleanly.
func TestLifecycleTornInsertReadsEmpty(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 16)
	i := home(Container, "ctr-torn", a.slots)
	a.setIDs(i, "ctr-torn", "pod-1") // and the process dies here
	a.Close()
	b := open(t, dir, 16)
	if got := entries(t, b); len(got) != 0 {
		t.Fatalf("a torn insert reads as %+v, want nothing", got)
	}
	b.End(b.Begin(Container, "ctr-x", "pod-2", Created))
	got := entries(t, b)
	if len(got) != 1 || got[0].ID != "ctr-x" || got[0].PodID != "pod-2" {
		t.Fatalf("entries %+v", got)
	}
}

// A state word whose ids do not match its checksum (a write this build
// cannot explain) is unreadable, never a wrong entry, and Drop frees it.
func TestLifecycleCorruptSlotIsUnreadable(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 16)
	s := a.Begin(Container, "ctr-1", "pod-1", Created)
	a.End(s)
	a.setIDs(s.i, "ctr-9", "pod-1") // ids rewritten under a live word
	es, bad := a.Entries()
	if len(es) != 0 || bad != 1 {
		t.Fatalf("entries %+v, %d unreadable; want none, 1", es, bad)
	}
	a.Drop()
	if es, bad := a.Entries(); len(es) != 0 || bad != 0 {
		t.Fatalf("after Drop: %+v, %d unreadable", es, bad)
	}
}

func TestLifecycleFullIsCounted(t *testing.T) {
	a := open(t, t.TempDir(), 4)
	for i := 0; i < 6; i++ {
		a.End(a.Begin(Container, fmt.Sprintf("ctr-%d", i), "pod", Created))
	}
	if n := len(entries(t, a)); n != 4 {
		t.Fatalf("%d entries in 4 slots", n)
	}
	if got := a.Overflows(); got != 2 {
		t.Fatalf("overflows %d, want 2", got)
	}
	long := string(make([]byte, maxID+1))
	if a.Set(Pod, long, "", Running) {
		t.Fatal("an id longer than 64 bytes was recorded")
	}
}

// Removed slots are reused: a table churns through far more objects than
// it has slots.
func TestLifecycleChurn(t *testing.T) {
	a := open(t, t.TempDir(), 32)
	for i := 0; i < 5000; i++ {
		id := fmt.Sprintf("ctr-%d", i)
		a.End(a.Begin(Container, id, "pod", Created))
		if i >= 10 {
			a.End(a.Begin(Container, fmt.Sprintf("ctr-%d", i-10), "pod", Removed))
		}
	}
	if a.Overflows() != 0 {
		t.Fatalf("%d overflows with at most 11 live entries", a.Overflows())
	}
	if n := len(entries(t, a)); n != 10 {
		t.Fatalf("%d entries, want 10", n)
	}
}

// A late writer (a handler thawed after the catch-up moved its entry on)
// changes nothing.
func TestLifecycleLateEndChangesNothing(t *testing.T) {
	a := open(t, t.TempDir(), 16)
	a.End(a.Begin(Container, "ctr-1", "pod", Created))
	late := a.Begin(Container, "ctr-1", "pod", Running)
	a.Resolve(Container, "ctr-1")
	a.Set(Container, "ctr-1", "pod", Removed)
	a.End(a.Begin(Container, "ctr-2", "pod", Created))
	a.End(late)
	got := entries(t, a)
	if len(got) != 1 || got[0].ID != "ctr-2" || got[0].State != Created {
		t.Fatalf("entries %+v", got)
	}
}

// Begin on a closed record says so (Slot.Closed), so that its caller
// does not hand the author a change no record will hold; Begin on an
// open record, even without room, does not.
func TestLifecycleBeginOnAClosedRecordSaysSo(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 1)
	if s := a.Begin(Container, "ctr-1", "pod", Created); !s.Valid() || s.Closed() {
		t.Fatalf("first begin %+v, want valid, not closed", s)
	}
	if s := a.Begin(Container, "ctr-2", "pod", Created); s.Valid() || s.Closed() {
		t.Fatalf("begin without room %+v, want not valid, not closed", s)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.Begin(Container, "ctr-1", "pod", Running); s.Valid() || !s.Closed() {
		t.Fatalf("begin on a closed record %+v, want closed", s)
	}
}

func TestLifecycleSetOnlyMovesForward(t *testing.T) {
	a := open(t, t.TempDir(), 16)
	a.Set(Container, "c", "p", Stopped)
	a.Set(Container, "c", "p", Running)
	if got := entries(t, a); got[0].State != Stopped {
		t.Fatalf("state %v, want stopped", got[0].State)
	}
}

func TestLifecycleForeignLayoutIsRefused(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 16)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&a.mem[offLayout])), Layout+1)
	a.Close()
	if _, err := OpenSlots(dir, 16); !errors.Is(err, ErrLayout) {
		t.Fatalf("open of a foreign layout: %v, want ErrLayout", err)
	}
	if st, err := os.Stat(filepath.Join(dir, FileName)); err != nil || st.Size() == 0 {
		t.Fatalf("the foreign record was changed: %v", err)
	}
}

func TestDiff(t *testing.T) {
	ctr := func(id, pod string, st api.ContainerState) *api.Container {
		return &api.Container{Id: id, PodSandboxId: pod, State: st}
	}
	entries := []Entry{
		{Kind: Pod, ID: "p1", State: Running},
		{Kind: Pod, ID: "p2", State: Running},
		{Kind: Pod, ID: "p3", State: Stopped},
		{Kind: Container, ID: "started", PodID: "p1", State: Created},
		{Kind: Container, ID: "same", PodID: "p1", State: Running},
		{Kind: Container, ID: "stopped", PodID: "p1", State: Running},
		{Kind: Container, ID: "gone-in-pod", PodID: "p2", State: Created},
		{Kind: Container, ID: "gone-stopped", PodID: "p2", State: Stopped},
		{Kind: Container, ID: "pending", PodID: "p2", State: Running, Pending: Stopped},
	}
	pods := []*api.PodSandbox{{Id: "p1"}, {Id: "p4"}}
	ctrs := []*api.Container{
		ctr("started", "p1", api.ContainerState_CONTAINER_RUNNING),
		ctr("same", "p1", api.ContainerState_CONTAINER_RUNNING),
		ctr("new", "p4", api.ContainerState_CONTAINER_CREATED),
	}
	changes, sets := Diff(entries, pods, ctrs)
	var got []string
	for _, c := range changes {
		got = append(got, c.Event.String()+" "+c.Entry.ID)
	}
	want := []string{
		"START_CONTAINER started",
		"STOP_CONTAINER stopped",
		"STOP_CONTAINER gone-in-pod", "REMOVE_CONTAINER gone-in-pod",
		"REMOVE_CONTAINER gone-stopped",
		"STOP_POD_SANDBOX p2", "REMOVE_POD_SANDBOX p2",
		"REMOVE_POD_SANDBOX p3",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes\n %v\nwant\n %v", got, want)
	}
	if changes[0].Container == nil || changes[2].Container != nil {
		t.Fatal("a listed container must come with the listed object, a gone one without")
	}
	var gotSets []string
	for _, s := range sets {
		gotSets = append(gotSets, fmt.Sprintf("%s %s %s", s.Kind, s.ID, s.State))
	}
	wantSets := []string{
		"pod p2 removed", "pod p3 removed",
		"container started running", "container stopped stopped", "container gone-in-pod removed",
		"container gone-stopped removed",
		"pod p4 running", "container new created",
	}
	if !reflect.DeepEqual(gotSets, wantSets) {
		t.Fatalf("sets\n %v\nwant\n %v", gotSets, wantSets)
	}
	// Applied, the same list finds nothing more: a second catch-up in a
	// row hands nothing twice.
	tb := open(t, t.TempDir(), 64)
	for _, e := range entries {
		tb.Set(e.Kind, e.ID, e.PodID, e.State)
	}
	tb.Begin(Container, "pending", "p2", Stopped)
	for _, s := range sets {
		tb.Set(s.Kind, s.ID, s.PodID, s.State)
	}
	tb.Resolve(Container, "pending")
	es, _ := tb.Entries()
	again, _ := Diff(es, pods, ctrs)
	if len(again) != 1 || again[0].Entry.ID != "pending" || again[0].Event != api.Event_REMOVE_CONTAINER {
		// "pending" resolved to stopped: its pod p2 is gone, so only its
		// removal is left.
		t.Fatalf("second diff %+v", again)
	}
}

// A change a catch-up handed (EndLate) is reported handed when the
// runtime sends its event after all, once; a later change acts as usual,
// and a late removal stays until dropped.
func TestLifecycleLateChangeIsHandedOnce(t *testing.T) {
	a := open(t, t.TempDir(), 16)
	a.End(a.Begin(Container, "c", "p", Created))
	a.EndLate(a.Begin(Container, "c", "p", Running)) // the catch-up's Start
	s := a.Begin(Container, "c", "p", Running)       // the runtime's Start, late
	if !s.Handed() {
		t.Fatal("the runtime's late Start was not found handed")
	}
	a.End(s)
	if s := a.Begin(Container, "c", "p", Running); s.Handed() {
		t.Fatal("a second Start found handed: the late mark is for one event")
	}
	s = a.Begin(Container, "c", "p", Stopped)
	if s.Handed() {
		t.Fatal("a stop nobody handed found handed")
	}
	a.End(s)
	a.EndLate(a.Begin(Container, "c", "p", Removed)) // the catch-up's Remove
	got := entries(t, a)
	if len(got) != 1 || got[0].State != Removed || !got[0].Late {
		t.Fatalf("entries %+v, want c removed, late", got)
	}
	if s := a.Begin(Container, "c", "p", Stopped); !s.Handed() {
		t.Fatal("a stop after the handed removal was not found handed")
	}
	s = a.Begin(Container, "c", "p", Removed)
	if !s.Handed() {
		t.Fatal("the runtime's late Remove was not found handed")
	}
	a.End(s)
	if got := entries(t, a); len(got) != 0 {
		t.Fatalf("entries %+v after the late remove", got)
	}
}

// BenchmarkBeginEnd is the record's cost on the event path: one change
// of a container among 200 recorded (a Begin and an End).
func BenchmarkBeginEnd(b *testing.B) {
	a, err := OpenSlots(b.TempDir(), DefaultSlots)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("%064d", i)
		a.End(a.Begin(Container, ids[i], "pod", Created))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%len(ids)]
		a.End(a.Begin(Container, id, "pod", State(Running+State(i&1))))
	}
}

func TestLifecyclePodsRemovedSince(t *testing.T) {
	dir := t.TempDir()
	a, b := open(t, dir, 64), open(t, dir, 64) // two instances' mappings
	a.End(a.Begin(Pod, "p1", "", Running))
	a.End(a.Begin(Pod, "p2", "", Running))
	since := a.Seq()
	if pods, mine := a.PodsRemovedSince(since); !mine || len(pods) != 0 {
		t.Fatalf("no write since: %v %v, want none and only mine", pods, mine)
	}
	a.End(a.Begin(Pod, "p1", "", Removed))
	a.End(a.Begin(Pod, "p9", "", Removed)) // a pod the record never held
	a.End(a.Begin(Container, "c1", "p2", Created))
	a.End(a.Begin(Container, "c1", "p2", Removed)) // a container is no pod
	a.Set(Pod, "p2", "", Removed)                  // a catch-up's
	pods, mine := a.PodsRemovedSince(since)
	if !mine || fmt.Sprint(pods) != "map[p1:true p2:true p9:true]" {
		t.Fatalf("after this mapping's removals: %v %v, want p1, p2, p9 and only mine", pods, mine)
	}
	if pods, mine := b.PodsRemovedSince(since); mine {
		t.Fatalf("the other mapping says it made every write since: %v", pods)
	}
	mid := a.Seq()
	b.End(b.Begin(Pod, "p3", "", Running))
	if _, mine := a.PodsRemovedSince(mid); mine {
		t.Fatal("another mapping wrote, and this one says it made every write since")
	}
	if pods, mine := b.PodsRemovedSince(mid); !mine || len(pods) != 0 {
		t.Fatalf("the writer of the only write since: %v %v, want none removed and only mine", pods, mine)
	}
	// More writes than a mapping keeps: not known any more.
	last := a.Seq()
	for i := range maxOwnWrites + 1 {
		a.End(a.Begin(Container, fmt.Sprint("c", i%8), "p", Running))
	}
	if _, mine := a.PodsRemovedSince(last); mine {
		t.Fatal("more writes than kept, and this mapping says it knows them all")
	}
}

func TestLifecycleMineIsAChangeThisMappingIsInside(t *testing.T) {
	dir := t.TempDir()
	a, b := open(t, dir, 64), open(t, dir, 64)
	sa := a.Begin(Container, "ca", "p", Created)
	b.Begin(Container, "cb", "p", Created)
	mine := func(tb *Table) string {
		var ids []string
		for _, e := range entries(t, tb) {
			if e.Mine {
				ids = append(ids, e.ID)
			}
		}
		return fmt.Sprint(ids)
	}
	if got := mine(a) + mine(b); got != "[ca][cb]" {
		t.Fatalf("mine as a, as b: %s, want [ca][cb]", got)
	}
	a.End(sa)
	b.Resolve(Container, "cb") // a takeover settles it
	if got := mine(a) + mine(b); got != "[][]" {
		t.Fatalf("mine after End and Resolve: %s, want none", got)
	}
	s := a.Begin(Container, "ca", "p", Running)
	b.Set(Container, "ca", "p", Stopped) // another writer moved it on
	if got := mine(a); got != "[]" {
		t.Fatalf("mine after another writer moved the entry on: %s, want none", got)
	}
	a.End(s)
}
