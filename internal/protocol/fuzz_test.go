package protocol

// Bad input to the handover protocol (issue 5, docs/reliability.md):
// arbitrary bytes sent as the protocol's requests to a live coordinator over
// a real ttrpc connection (the policies' own: policy_test.go).

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/stamp"
)

// fuzzNode is a live plugin directory for FuzzHandoverMessages: "r" owned
// the plugin first, "a" took over from it (r is retired and watches a).
type fuzzNode struct {
	root string
	a, r *Coordinator
}

func newFuzzNode(tb testing.TB) *fuzzNode {
	tb.Helper()
	root, err := os.MkdirTemp("", "nhf-")
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := OpenDir(root, "demo")
	if err != nil {
		tb.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(discard{})
	n := &fuzzNode{root: root}
	mk := func(id string, started int64) *Coordinator {
		c, err := New(Config{Dir: dir, Log: logrus.NewEntry(log),
			Self: &api.Instance{Plugin: "demo", Id: id, Version: "1.0.0", StartedUnixNano: started}})
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
	n.r = mk("r", 5)
	n.a = mk("a", 10)
	for _, c := range []*Coordinator{n.r, n.a} {
		if role, err := c.Claim(context.Background()); role != api.Role_ROLE_OWNER {
			tb.Fatalf("setup: %s claims: %v %v", c.self.Id, role, err)
		}
	}
	return n
}

func (n *fuzzNode) close() {
	n.a.Close()
	n.r.Close()
	n.a.cfg.Dir.Close() // shared by both
	os.RemoveAll(n.root)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// owners returns the coordinators that own the plugin and are not
// superseded (the owner name leads to them).
func (n *fuzzNode) owners() []string {
	var ids []string
	for _, c := range []*Coordinator{n.a, n.r} {
		if c.Status().Role == api.Role_ROLE_OWNER && !c.superseded() {
			ids = append(ids, c.self.Id)
		}
	}
	return ids
}

// waitOwner waits, on a's change notifications, until a owns the plugin.
func (n *fuzzNode) waitOwner(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		ch := n.a.Changed()
		if st := n.a.Status(); st.Role == api.Role_ROLE_OWNER {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

var (
	fuzzNodeMu sync.Mutex
	fuzzNodeV  *fuzzNode
)

// FuzzHandoverMessages sends arbitrary bytes as a Status, Yield or Watch
// request to a live coordinator — the owner, or its retired predecessor —
// over a real ttrpc connection. The bytes go on the wire as they are; the
// expectations come from decoding them with proto.Unmarshal. Whatever they
// are, the service never panics, bytes that do not decode are refused,
// Status and Watch change nothing, a Yield is accepted only by the owner
// and only for a taker of this plugin with an instance id of its own, and
// there is never more than one owner: after a yield to a taker that never
// claims, the old owner takes ownership back.
func FuzzHandoverMessages(f *testing.F) {
	taker := &api.Instance{Plugin: "demo", Id: "t", Version: "2.0.0", StartedUnixNano: 20}
	for _, seed := range []struct {
		target, method uint8
		msg            proto.Message
	}{
		{0, 0, &api.StatusRequest{}},
		{0, 1, &api.YieldRequest{Taker: taker}},
		{0, 1, &api.YieldRequest{Taker: &api.Instance{Plugin: "demo", Version: "2.0.0", StartedUnixNano: 20}}},
		{0, 1, &api.YieldRequest{Taker: &api.Instance{Plugin: "other", Id: "t", StartedUnixNano: 20}}},
		{0, 1, &api.YieldRequest{Taker: &api.Instance{Plugin: "demo", Id: "a", StartedUnixNano: 20}}},
		{1, 1, &api.YieldRequest{Taker: taker, OwnerLeaving: true}},
		{0, 2, &api.WatchRequest{Watcher: taker, Epoch: 2, WatcherRole: api.Role_ROLE_STANDBY}},
		{1, 2, &api.WatchRequest{Watcher: taker, Epoch: 1, WatcherRole: api.Role_ROLE_RETIRED}},
	} {
		b, err := proto.Marshal(seed.msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seed.target, seed.method, b)
	}
	f.Add(uint8(0), uint8(1), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Cleanup(func() {
		fuzzNodeMu.Lock()
		defer fuzzNodeMu.Unlock()
		if fuzzNodeV != nil {
			fuzzNodeV.close()
			fuzzNodeV = nil
		}
	})
	f.Fuzz(func(t *testing.T, target, method uint8, data []byte) {
		fuzzNodeMu.Lock()
		defer fuzzNodeMu.Unlock()
		if fuzzNodeV == nil {
			fuzzNodeV = newFuzzNode(t)
		}
		n := fuzzNodeV
		rebuild := func() {
			n.close()
			fuzzNodeV = nil
		}
		c := n.a
		if target%2 == 1 {
			c = n.r
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl, err := Dial(ctx, c.cfg.Dir.InstanceSocket(c.self.Id))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		before := c.Status()

		switch method % 3 {
		case 0:
			var req api.StatusRequest
			perr := proto.Unmarshal(data, &req)
			raw := &api.StatusRequest{}
			raw.ProtoReflect().SetUnknown(protoreflect.RawFields(data))
			st, err := cl.Status(ctx, raw)
			switch {
			case perr != nil && err == nil:
				t.Fatalf("Status with undecodable bytes answered: %v", st)
			case perr == nil && err != nil:
				t.Fatalf("Status: %v", err)
			case perr == nil && (st.Instance.GetId() != c.self.Id || st.Role != before.Role):
				t.Fatalf("Status answered %v, want %s as %v", st, c.self.Id, before.Role)
			}
		case 1:
			var req api.YieldRequest
			perr := proto.Unmarshal(data, &req)
			raw := &api.YieldRequest{}
			raw.ProtoReflect().SetUnknown(protoreflect.RawFields(data))
			sent := time.Now()
			resp, err := cl.Yield(ctx, raw)
			switch {
			case perr != nil && err == nil:
				t.Fatalf("Yield with undecodable bytes answered: %v", resp)
			case perr == nil && err != nil:
				t.Fatalf("Yield: %v", err)
			case perr != nil:
				return
			}
			tk := req.GetTaker()
			if !resp.Accepted {
				if st := c.Status(); st.Role != before.Role || st.Epoch != before.Epoch {
					t.Fatalf("a refused Yield changed %s: %v -> %v", c.self.Id, before, st)
				}
				break
			}
			switch {
			case tk.GetPlugin() != "demo" || tk.GetId() == "" || tk.GetId() == c.self.Id:
				t.Fatalf("%s yielded to a taker without this plugin or an id of its own: %v", c.self.Id, tk)
			case before.Role != api.Role_ROLE_OWNER:
				t.Fatalf("%s, %v, yielded", c.self.Id, before.Role)
			case resp.Epoch != before.Epoch+1 || resp.Owner.GetId() != c.self.Id:
				t.Fatalf("yield answer %v after epoch %d", resp, before.Epoch)
			}
			if stamp.ValidateInstance(tk.Id) != nil {
				t.Fatalf("%s yielded to a taker whose id %q is no instance id", c.self.Id, tk.Id)
			}
			if d := req.GetClaimDeadlineUnixNano(); d != 0 && d <= sent.UnixNano() {
				t.Fatalf("%s yielded to a taker whose claim deadline had passed when it asked (%v)", c.self.Id,
					sent.Sub(time.Unix(0, d)))
			}
			// The taker never claims: its id leads to no socket, or to a
			// live instance that did not ask (the retired r: B6). Either way
			// the old owner takes ownership back, at once.
			if !n.waitOwner(2 * time.Second) {
				t.Fatalf("no owner after a yield to %v, which never claimed: a is %v", tk, n.a.Status())
			}
			if tk.Id == n.r.self.Id {
				// r took the yield for a stale one and stopped watching a:
				// start the next input from a fresh node.
				if owners := n.owners(); len(owners) != 1 || owners[0] != "a" {
					t.Fatalf("owners %v after a yield to r, want exactly a", owners)
				}
				rebuild()
				return
			}
		case 2:
			var req api.WatchRequest
			perr := proto.Unmarshal(data, &req)
			raw := &api.WatchRequest{}
			raw.ProtoReflect().SetUnknown(protoreflect.RawFields(data))
			// Only a watch of the owner's current epoch waits (for a change);
			// any other, and one until_settled, answers at once.
			waits := perr == nil && req.Epoch == before.Epoch && before.Role == api.Role_ROLE_OWNER && !req.UntilSettled
			wait := 5 * time.Second
			if waits {
				wait = 20 * time.Millisecond
			}
			wctx, wcancel := context.WithTimeout(ctx, wait)
			resp, err := cl.Watch(wctx, raw)
			expired := err != nil && timedOut(wctx, err) // before wcancel, which ends wctx too
			wcancel()
			switch {
			case perr != nil && err == nil:
				t.Fatalf("Watch with undecodable bytes answered: %v", resp)
			case perr == nil && err != nil && !(waits && expired):
				t.Fatalf("Watch of epoch %d: %v (%s is %v at epoch %d)", req.Epoch, err, c.self.Id, before.Role, before.Epoch)
			case perr == nil && err == nil && (waits || resp.Epoch != before.Epoch || resp.Role != before.Role):
				t.Fatalf("Watch of epoch %d answered %v, %s is %v at epoch %d", req.Epoch, resp, c.self.Id, before.Role, before.Epoch)
			}
			if st := c.Status(); st.Role != before.Role || st.Epoch != before.Epoch {
				t.Fatalf("Watch changed %s: %v -> %v", c.self.Id, before, st)
			}
		}
		if owners := n.owners(); len(owners) != 1 || owners[0] != "a" {
			t.Fatalf("owners %v, want exactly a", owners)
		}
	})
}

// TestYieldTakerIDValidated: a taker's id is used as a file name (the
// yielded owner watches <dir>/instances/<id>.sock to take ownership back if
// the taker never makes it). A taker id that is no instance id (a path
// leading back to the owner's own socket) is refused. A taker named like a
// live instance that did not ask (here the retired predecessor r) is
// accepted, but that instance settles as no owner of the granted epoch, so
// the yielded owner takes ownership back at once (this was B6: it took the
// retired instance for a successor that had handed on, and nobody owned
// the plugin any more). Only a peer of the same user can send such a
// request.
func TestYieldTakerIDValidated(t *testing.T) {
	for _, id := range []string{"../owner", "./a", "r"} {
		n := newFuzzNode(t)
		cl, err := Dial(context.Background(), n.a.cfg.Dir.InstanceSocket("a"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Yield(context.Background(), &api.YieldRequest{
			Taker: &api.Instance{Plugin: "demo", Id: id, Version: "9.0.0", StartedUnixNano: 99}})
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case stamp.ValidateInstance(id) != nil && resp.Accepted:
			t.Errorf("taker id %q, no instance id, accepted", id)
		case resp.Accepted && !n.waitOwner(300*time.Millisecond):
			t.Errorf("taker id %q accepted, no owner since (a: %s; r: %s)", id, n.a.Status().Reason, n.r.Status().Reason)
		case resp.Accepted && n.a.Status().Role != api.Role_ROLE_OWNER:
			t.Errorf("taker id %q accepted; the owner is not a but %v", id, n.owners())
		}
		n.close()
	}
}
