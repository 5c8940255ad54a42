package protocol

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// testRoot returns a short private directory (unix socket paths are short).
func testRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "nho-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	return root
}

var startClock = time.Now().UnixNano()

type testInstance struct {
	*Coordinator
	resync   chan string
	promoted chan uint64
}

// newInstance starts a coordinator; order fixes its start time so that a
// higher order is a newer instance.
func newInstance(t *testing.T, root, id, ver string, order int64, policy Policy) *testInstance {
	t.Helper()
	return newInstanceOn(t, root, id, ver, order, policy, nil)
}

// newInstanceOn is newInstance with the deadlines on clock (nil: real time).
func newInstanceOn(t *testing.T, root, id, ver string, order int64, policy Policy, clock Clock) *testInstance {
	t.Helper()
	dir, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	ti := &testInstance{resync: make(chan string, 16), promoted: make(chan uint64, 16)}
	ti.Coordinator, err = New(Config{
		Dir:      dir,
		Self:     &api.Instance{Plugin: "demo", Id: id, Version: ver, StartedUnixNano: startClock + order},
		Policy:   policy,
		Clock:    clock,
		OnResync: func(r string) { ti.resync <- r },
		OnPromoted: func(e uint64) {
			ti.promoted <- e
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ti.Close)
	return ti
}

func claim(t *testing.T, c *testInstance) api.Role {
	t.Helper()
	role, err := c.Claim(context.Background())
	if err != nil {
		t.Logf("claim %s: %v", c.self.Id, err)
	}
	return role
}

// waitRole waits, without polling, until c has the role.
func waitRole(t *testing.T, c *Coordinator, role api.Role) {
	t.Helper()
	waitFor(t, c, "role "+RoleName(role), func(st *api.StatusResponse) bool { return st.Role == role })
}

// waitFor waits on c's change notifications until cond holds (10 s at most).
func waitFor(t *testing.T, c *Coordinator, what string, cond func(*api.StatusResponse) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ch := c.Changed()
		if cond(c.Status()) {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: timed out waiting for %s; status %v", c.self.Id, what, c.Status())
		}
	}
}

func ownerID(t *testing.T, root string) string {
	t.Helper()
	cl, err := Dial(context.Background(), filepath.Join(root, "demo", ownerSocketName))
	if err != nil {
		t.Fatalf("owner socket: %v", err)
	}
	defer cl.Close()
	st, err := cl.Status(context.Background(), &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.Instance.Id
}

func TestFirstInstanceOwnsAndNewcomerTakesOver(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	if role := claim(t, a); role != api.Role_ROLE_OWNER {
		t.Fatalf("first instance: role %v, want owner", role)
	}
	if got := ownerID(t, root); got != "a" {
		t.Fatalf("owner socket leads to %q, want a", got)
	}
	b := newInstance(t, root, "b", "2.0.0", 2, nil)
	if role := claim(t, b); role != api.Role_ROLE_OWNER {
		t.Fatalf("newcomer: role %v, want owner", role)
	}
	if a.Status().Role != api.Role_ROLE_RETIRED {
		t.Fatalf("old owner: role %v, want retired", a.Status().Role)
	}
	if got := ownerID(t, root); got != "b" {
		t.Fatalf("owner socket leads to %q, want b", got)
	}
	if a.Status().Epoch != 2 || b.Status().Epoch != 2 {
		t.Fatalf("epochs a=%d b=%d, want 2", a.Status().Epoch, b.Status().Epoch)
	}
	lh := b.Status().LastHandover
	if lh.GetFromId() != "a" || lh.GetToId() != "b" || lh.GetDurationNano() <= 0 {
		t.Fatalf("last handover %+v", lh)
	}
	// a yielded to b, which owns: a is b's live fallback, and ready.
	if ok, reason := a.Ready(); !ok || reason != FallbackReason("b") {
		t.Fatalf("retired ready=%v reason %q, want a live fallback for b", ok, reason)
	}
	if st := a.Status(); !strings.Contains(st.Reason, "yielded to b") {
		t.Fatalf("retired reason %q", st.Reason)
	}

	// The retired instance exits: the new owner's socket must survive it.
	a.Close()
	if got := ownerID(t, root); got != "b" {
		t.Fatalf("after the old owner exited the owner socket leads to %q, want b", got)
	}
	// A third instance hands over from the new owner.
	c := newInstance(t, root, "c", "3.0.0", 3, nil)
	if role := claim(t, c); role != api.Role_ROLE_OWNER {
		t.Fatalf("third: role %v", role)
	}
	if b.Status().Role != api.Role_ROLE_RETIRED || c.Status().Epoch != 3 {
		t.Fatalf("b role %v, c epoch %d", b.Status().Role, c.Status().Epoch)
	}
	if ok, reason := b.Ready(); !ok || reason != FallbackReason("c") {
		t.Fatalf("b after yielding to c: ready=%v reason %q", ok, reason)
	}
	// Once c stops, b takes back or not; either way it is no fallback of c.
	c.Close()
	if ok, reason := b.Ready(); ok && reason == FallbackReason("c") {
		t.Fatalf("b still a fallback of the closed c: %q", reason)
	}
}

func TestPolicies(t *testing.T) {
	t.Run("newest-version refuses a downgrade", func(t *testing.T) {
		root := testRoot(t)
		a := newInstance(t, root, "a", "2.0.0", 1, NewestVersion{})
		claim(t, a)
		b := newInstance(t, root, "b", "1.0.0", 2, NewestVersion{})
		if role := claim(t, b); role != api.Role_ROLE_STANDBY {
			t.Fatalf("downgrade: role %v, want standby", role)
		}
		ok, reason := b.Ready()
		if ok || !strings.Contains(reason, "older than the owner's 2.0.0") {
			t.Fatalf("standby ready=%v reason %q", ok, reason)
		}
		if a.Status().Role != api.Role_ROLE_OWNER {
			t.Fatal("owner lost its role to a refused downgrade")
		}
	})
	t.Run("newest-instance allows a rollback", func(t *testing.T) {
		root := testRoot(t)
		a := newInstance(t, root, "a", "2.0.0", 1, nil)
		claim(t, a)
		b := newInstance(t, root, "b", "1.0.0", 2, nil)
		if role := claim(t, b); role != api.Role_ROLE_OWNER {
			t.Fatalf("rollback: role %v, want owner", role)
		}
	})
	t.Run("an older instance does not take over", func(t *testing.T) {
		root := testRoot(t)
		old := newInstance(t, root, "old", "1.0.0", 1, nil)
		young := newInstance(t, root, "young", "1.0.0", 2, nil)
		claim(t, young)
		if role := claim(t, old); role != api.Role_ROLE_STANDBY {
			t.Fatalf("older instance: role %v, want standby", role)
		}
	})
	t.Run("unknown policy name", func(t *testing.T) {
		if _, err := ParsePolicy("oldest"); err == nil || !strings.Contains(err.Error(), "oldest") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestConcurrentNewcomersLeaveOneOwner(t *testing.T) {
	for round := 0; round < 10; round++ {
		root := testRoot(t)
		a := newInstance(t, root, "a", "1.0.0", 1, nil)
		claim(t, a)
		b := newInstance(t, root, "b", "2.0.0", 2, nil)
		c := newInstance(t, root, "c", "2.0.0", 3, nil)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, x := range []*testInstance{b, c} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				x.Claim(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		owners := 0
		for _, x := range []*testInstance{a, b, c} {
			if x.Status().Role == api.Role_ROLE_OWNER {
				owners++
			}
		}
		if owners != 1 {
			t.Fatalf("round %d: %d owners", round, owners)
		}
		// The newest instance wins whatever the order of the claims.
		if c.Status().Role != api.Role_ROLE_OWNER || ownerID(t, root) != "c" {
			t.Fatalf("round %d: c role %v, owner socket %s", round, c.Status().Role, ownerID(t, root))
		}
	}
}

func TestStaleOwnerSocket(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	claim(t, a)
	a.Close() // exits without handing over: owner.sock is left stale
	if _, err := os.Stat(filepath.Join(root, "demo", ownerSocketName)); err != nil {
		t.Fatalf("owner socket should be left in place: %v", err)
	}
	b := newInstance(t, root, "b", "1.0.0", 2, nil)
	if role := claim(t, b); role != api.Role_ROLE_OWNER {
		t.Fatalf("role %v, want owner", role)
	}
	if b.Status().Epoch != 2 {
		t.Fatalf("epoch %d, want 2 (carried in the directory)", b.Status().Epoch)
	}
}

func TestLeavingOwnerHandsToStandby(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "2.0.0", 1, NewestVersion{})
	claim(t, a)
	b := newInstance(t, root, "b", "1.0.0", 2, NewestVersion{})
	if role := claim(t, b); role != api.Role_ROLE_STANDBY {
		t.Fatalf("role %v", role)
	}
	// Wait until b watches a, so a knows it has a standby.
	waitFor(t, a.Coordinator, "standby watches the owner", func(st *api.StatusResponse) bool { return len(st.Watchers) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan bool)
	go func() { done <- a.Leave(ctx) }()
	select {
	case <-b.resync:
	case <-ctx.Done():
		t.Fatal("standby was not asked to claim")
	}
	// The harness would reconnect to the runtime and claim in Synchronize.
	if role := claim(t, b); role != api.Role_ROLE_OWNER {
		t.Fatalf("standby claim on a leaving owner: %v", role)
	}
	if handed := <-done; !handed {
		t.Fatal("Leave reported no handover")
	}
}

func TestStandbyPromotedWhenOwnerDies(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "2.0.0", 1, NewestVersion{})
	claim(t, a)
	b := newInstance(t, root, "b", "1.0.0", 2, NewestVersion{})
	claim(t, b)
	waitFor(t, a.Coordinator, "standby watches the owner", func(st *api.StatusResponse) bool { return len(st.Watchers) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.Close() // as if killed: the connection breaks, nothing is handed over
	select {
	case <-b.promoted:
	case <-ctx.Done():
		t.Fatal("standby not promoted")
	}
	waitRole(t, b.Coordinator, api.Role_ROLE_OWNER)
	if ownerID(t, root) != "b" {
		t.Fatal("owner socket not republished")
	}
}

func TestRetiredTakesBackWhenSuccessorDies(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	claim(t, a)
	b := newInstance(t, root, "b", "2.0.0", 2, nil)
	claim(t, b)
	b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-a.promoted:
	case <-ctx.Done():
		t.Fatal("retired instance did not take back")
	}
	waitRole(t, a.Coordinator, api.Role_ROLE_OWNER)
	if a.Status().Epoch != 3 {
		t.Fatalf("epoch %d, want 3", a.Status().Epoch)
	}
}

func TestDirectoryChecks(t *testing.T) {
	root := testRoot(t)
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(root, "demo"); err == nil || !strings.Contains(err.Error(), "other users write") {
		t.Fatalf("world-writable root: err %v", err)
	}
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := OpenDir(root, bad); err == nil {
			t.Fatalf("plugin name %q accepted", bad)
		}
	}
	d, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(d.Path())
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("plugin dir mode %v err %v", info.Mode().Perm(), err)
	}
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	info, err = os.Stat(d.InstanceSocket("a"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("instance socket mode %v err %v", info.Mode().Perm(), err)
	}
	// A second instance with the same id is refused while the first runs.
	if _, err := New(Config{Dir: d, Self: &api.Instance{Plugin: "demo", Id: "a", Version: "1", StartedUnixNano: 1}}); err == nil ||
		!strings.Contains(err.Error(), "already in use") {
		t.Fatalf("duplicate id: err %v", err)
	}
	_ = a
}

func TestClaimLockBounded(t *testing.T) {
	root := testRoot(t)
	d, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := d.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	a.cfg.ClaimTimeout = 20 * time.Millisecond
	role, err := a.Claim(context.Background())
	if err == nil || role == api.Role_ROLE_OWNER || !strings.Contains(err.Error(), "another handover is in progress") {
		t.Fatalf("role %v err %v", role, err)
	}
}

// TestUnresponsiveOwnerIsSupersededAndFenced: an owner that does not answer
// (hung, stopped, stuck terminating) is taken over by force, and when it
// wakes up its next event finds the owner name changed: it retires instead
// of acting.
func TestUnresponsiveOwnerIsSupersededAndFenced(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	claim(t, a)
	a.cfg.ClaimTimeout = 200 * time.Millisecond
	if role := a.Enter(); role != api.Role_ROLE_OWNER { // a hangs in the middle of an event
		t.Fatalf("role %v", role)
	}
	b := newInstance(t, root, "b", "2.0.0", 2, nil)
	b.cfg.ClaimTimeout = 200 * time.Millisecond
	if role := claim(t, b); role != api.Role_ROLE_OWNER {
		t.Fatalf("newcomer facing a hung owner: role %v", role)
	}
	if _, why := b.Ready(); !strings.Contains(why, "owner since epoch 2") {
		t.Fatalf("ready reason %q", why)
	}
	a.Exit() // a wakes up
	role := a.Enter()
	a.Exit()
	if role != api.Role_ROLE_RETIRED {
		t.Fatalf("woken owner acts as %v, want retired", role)
	}
	if ownerID(t, root) != "b" {
		t.Fatal("owner name does not lead to b")
	}
	// The instance that took over by force dies: the superseded one watches
	// it as a successor and takes ownership back.
	b.Close()
	waitTookBack(t, a, root, "superseded instance did not take back after its successor died")
}

// TestRetiredTakesBackWhileKilledSuccessorStillAccepts: a SIGKILLed
// process's listener can accept a connection for a moment while the kernel
// closes its files, so Status fails with a broken connection rather than a
// refused one. That is an instance going away, not a slow one: the retired
// predecessor must still take ownership back.
func TestRetiredTakesBackWhileKilledSuccessorStillAccepts(t *testing.T) {
	root := testRoot(t)
	a := newInstance(t, root, "a", "1.0.0", 1, nil)
	claim(t, a)
	b := newInstance(t, root, "b", "2.0.0", 2, nil)
	claim(t, b)

	// A dying listener under the owner name: accepts, then hangs up.
	dying := filepath.Join(root, "dying.sock")
	l, err := net.Listen("unix", dying)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	if err := os.Rename(dying, filepath.Join(root, "demo", ownerSocketName)); err != nil {
		t.Fatal(err)
	}
	b.Close() // the successor is gone

	waitTookBack(t, a, root, "retired instance did not take back")
}

// waitTookBack waits (10 s at most) until a reports a promotion, and checks
// that the owner name then leads to it; what says what failed otherwise.
func waitTookBack(t *testing.T, a *testInstance, root, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-a.promoted:
	case <-ctx.Done():
		t.Fatalf("%s; status %v", what, a.Status())
	}
	if ownerID(t, root) != "a" {
		t.Fatal("owner name does not lead to a")
	}
}
