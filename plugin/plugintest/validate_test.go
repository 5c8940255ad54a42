package plugintest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/plugin"
)

// denier is a validator-only author plugin: it refuses every container
// annotated deny=yes and counts the validations it saw per container.
type denier struct {
	mu   sync.Mutex
	seen map[string]int
}

func (d *denier) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	d.mu.Lock()
	d.seen[req.GetContainer().GetId()]++
	d.mu.Unlock()
	if req.GetContainer().GetAnnotations()["deny"] == "yes" {
		return errors.New("denied by annotation")
	}
	return nil
}

// TestLedgerComparesValidations: the kit wraps ValidateContainerAdjustment
// like any handler. Through an upgrade with both instances subscribed as
// validators, every created container was validated exactly once, by the
// owner's author (the ledger and the author agree), a refusal reaches the
// runtime as a rejected create, and Check compares the validations with
// the ones the runtime asked for.
func TestLedgerComparesValidations(t *testing.T) {
	authors := map[string]*denier{}
	var mu sync.Mutex
	n := newNode(t, Config{Plugin: func(v string) (interface{}, []plugin.Option) {
		d := &denier{seen: map[string]int{}}
		mu.Lock()
		authors[v] = d
		mu.Unlock()
		return d, nil
	}})
	ctx := context.Background()
	v1 := start(t, n, "1.0.0")
	lifecycles(t, n, 2)
	pod, err := n.Runtime().RunPod(ctx, "deny")
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.Runtime().CreateContainer(ctx, pod.Id, "c", map[string]string{"deny": "yes"})
	var rej *CreateRejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("a container the validator refuses was created: %v", err)
	}
	if got := n.Ledger().Acted(EventValidateContainerAdjustment, rej.ID); !slices.Equal(got, []string{v1.ID()}) {
		t.Fatalf("the refused container was validated by %v, want [%s]", got, v1.ID())
	}
	upgradeCtx, cancel := context.WithTimeout(ctx, failAfter)
	defer cancel()
	v2, err := n.Upgrade(upgradeCtx, "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	lifecycles(t, n, 2)

	res, err := n.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatal(res.Err())
	}
	created := len(n.Runtime().AllCreated())
	issued := 0
	for k, c := range n.Runtime().Issued() {
		if k.Event == EventValidateContainerAdjustment {
			issued += c
		}
	}
	if issued != created+1 || res.Events.ByInstance[v1.ID()] == 0 || res.Events.ByInstance[v2.ID()] == 0 {
		t.Fatalf("validations issued %d for %d created containers and 1 refused; acts by instance %v",
			issued, created, res.Events.ByInstance)
	}
	for _, c := range append(n.Runtime().AllCreated(), &api.Container{Id: rej.ID}) {
		acted := n.Ledger().Acted(EventValidateContainerAdjustment, c.Id)
		total := authors["1.0.0"].count(c.Id) + authors["2.0.0"].count(c.Id)
		if len(acted) != 1 || total != 1 {
			t.Errorf("container %s: validated by %v in the ledger, %d times by the authors; want once", c.Id, acted, total)
		}
	}
}

func (d *denier) count(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[id]
}

// shutter records Shutdown calls.
type shutter struct{ calls int }

func (s *shutter) Shutdown(context.Context) { s.calls++ }

// TestWrapperRecordsShutdown: Shutdown, which the kit's runtime never
// sends, is still recorded and passed on when the harness calls it; an
// author without a Shutdown handler is not called and the call is
// recorded all the same.
func TestWrapperRecordsShutdown(t *testing.T) {
	l := NewLedger()
	author := &shutter{}
	h := newHandlers(author, func(ev Event, id string) { l.Record(ev, id, "a", "1.0.0") })
	h.Shutdown(context.Background())
	if author.calls != 1 || !slices.Equal(l.Acted(EventShutdown, ""), []string{"a"}) {
		t.Fatalf("Shutdown: author called %d times, ledger %v", author.calls, l.Acted(EventShutdown, ""))
	}
	if h.handles.IsSet(api.Event_VALIDATE_CONTAINER_ADJUSTMENT) {
		t.Fatal("an author without a validator is subscribed to validation")
	}
	bare := newHandlers(&stopper{}, func(ev Event, id string) { l.Record(ev, id, "b", "1.0.0") })
	bare.Shutdown(context.Background())
	if got := l.Acted(EventShutdown, ""); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ledger %v after a Shutdown without an author handler", got)
	}
}
