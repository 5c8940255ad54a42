package protocol

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// actOnce runs one event through c's connection tag, as the harness does.
func actOnce(c *Coordinator, tag uint16, key uint32) Decision {
	c.Enter()
	defer c.Exit()
	d := c.Decide(tag, key, 1, nil)
	if d.Act {
		c.Finish(tag, key)
	}
	return d
}

// queuedPair makes a, owner, acting through its connection, and b, a
// standby with a connection of its own in the runtime's chain (NewestVersion
// refuses b's older version); it returns b's connection tag.
func queuedPair(t *testing.T, root string) (a, b *testInstance, aTag, bTag uint16) {
	t.Helper()
	ctx := context.Background()
	a = newInstance(t, root, "a", "2.0.0", 1, NewestVersion{})
	aTag = a.Conn(1)
	if role, err := a.ClaimConn(ctx, aTag, nil, nil); role != api.Role_ROLE_OWNER {
		t.Fatalf("a: %v %v", role, err)
	}
	if d := actOnce(a.Coordinator, aTag, 1); !d.Act {
		t.Fatalf("a's first event: %+v, want acted", d)
	}
	b = newInstance(t, root, "b", "1.0.0", 2, NewestVersion{})
	bTag = b.Conn(1)
	if role, _ := b.ClaimConn(ctx, bTag, nil, nil); role != api.Role_ROLE_STANDBY {
		t.Fatalf("b: %v, want standby", role)
	}
	if d := actOnce(b.Coordinator, bTag, 1); d.Act {
		t.Fatalf("b acted on a's event: %+v", d)
	}
	return a, b, aTag, bTag
}

// TestLeavingOwnerYieldsToAQueuedSuccessor: a standby whose new runtime
// connection is queued for its Synchronize tells the leaving owner so; the
// owner yields outside any Synchronize, its Leave returns at once (not at
// its timeout), and the standby owns, its connection in the chain holding
// the register. An owner that is not leaving refuses.
func TestLeavingOwnerYieldsToAQueuedSuccessor(t *testing.T) {
	root := testRoot(t)
	a, b, aTag, bTag := queuedPair(t, root)
	newTag := b.Conn(1) // registered by the runtime, not synchronized

	// Not leaving: refused, whoever asks.
	cl, err := Dial(context.Background(), filepath.Join(root, "demo", ownerSocketName))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Queued(context.Background(), &api.QueuedRequest{Taker: b.Self()})
	cl.Close()
	if err != nil || resp.GetAccepted() {
		t.Fatalf("a owner not leaving answered %+v, %v; want a refusal", resp, err)
	}
	if b.TakeOverQueued(context.Background(), newTag, 300*time.Millisecond) {
		t.Fatal("b took over from an owner that is not leaving")
	}
	if a.Status().Role != api.Role_ROLE_OWNER {
		t.Fatalf("a is %v after refusing, want owner", a.Status().Role)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left := make(chan bool, 1)
	start := time.Now()
	go func() { left <- a.Leave(ctx) }()
	waitFor(t, a.Coordinator, "a leaving", func(st *api.StatusResponse) bool { return st.Leaving })
	<-b.resync // the harness would now open the new connection
	if !b.TakeOverQueued(context.Background(), newTag, 300*time.Millisecond) {
		t.Fatal("b did not take over from the leaving owner")
	}
	select {
	case handed := <-left:
		if !handed {
			t.Fatal("a's Leave reported no handover")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a's Leave waited on after yielding to the queued successor")
	}
	t.Logf("a's Leave returned %v after it began", time.Since(start).Round(time.Millisecond))
	if !a.YieldedToQueued() {
		t.Fatal("a does not report its yield to a queued successor")
	}
	if st := a.Status(); st.Role != api.Role_ROLE_RETIRED || !strings.Contains(st.Reason, "queued") || st.LastHandover.GetToId() != "b" {
		t.Fatalf("a: %v, reason %q, last handover %+v", st.Role, st.Reason, st.LastHandover)
	}
	if st := b.Status(); st.Role != api.Role_ROLE_OWNER || st.Epoch != a.Status().Epoch {
		t.Fatalf("b: %v at epoch %d, want owner at a's epoch %d", st.Role, st.Epoch, a.Status().Epoch)
	}
	if got := ownerID(t, root); got != "b" {
		t.Fatalf("owner name leads to %q, want b", got)
	}
	if !b.OwnsCut(bTag) || a.OwnsCut(aTag) {
		t.Fatal("the register is not with b's connection in the chain")
	}
	// The next event: b's connection acts, a's does not.
	if d := actOnce(a.Coordinator, aTag, 2); d.Act {
		t.Fatalf("a acted after yielding: %+v", d)
	}
	if d := actOnce(b.Coordinator, bTag, 2); !d.Act {
		t.Fatalf("b's connection did not act: %+v", d)
	}
	// The queued connection claims later in its Synchronize, as a
	// reconnection: b keeps owning.
	if role, err := b.ClaimConn(context.Background(), newTag, nil, nil); role != api.Role_ROLE_OWNER {
		t.Fatalf("b's queued connection claimed %v, %v", role, err)
	}
}

// TestQueuedAskedOfAnOlderBuild: an owner whose build has no Queued method
// answers Unimplemented; the successor then changes nothing and waits for
// its Synchronize, as before.
func TestQueuedAskedOfAnOlderBuild(t *testing.T) {
	root := testRoot(t)
	_, b, _, _ := queuedPair(t, root)
	// An older build's service: Status (a leaving owner), no Queued.
	path := filepath.Join(root, "old.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.RegisterService("nrihandover.v1.Handover", &ttrpc.ServiceDesc{Methods: map[string]ttrpc.Method{
		"Status": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			var req api.StatusRequest
			if err := unmarshal(&req); err != nil {
				return nil, err
			}
			return &api.StatusResponse{Instance: &api.Instance{Plugin: "demo", Id: "old"}, Role: api.Role_ROLE_OWNER, Leaving: true}, nil
		},
	}})
	go srv.Serve(context.Background(), l)
	owner := filepath.Join(root, "demo", ownerSocketName)
	if err := os.Link(path, owner+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(owner+".old", owner); err != nil {
		t.Fatal(err)
	}
	if b.TakeOverQueued(context.Background(), b.Conn(1), 300*time.Millisecond) {
		t.Fatal("b took over from an owner that cannot have yielded")
	}
	if r := b.Status().Role; r != api.Role_ROLE_STANDBY {
		t.Fatalf("b is %v, want standby", r)
	}
}
