package test

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
	"github.com/nri-handover/nri-handover/stamp"
)

// node is one simulated node: the in-process runtime, a handover directory
// and a ledger of who acted on what.
type node struct {
	t      *testing.T
	rt     *sim.Runtime
	root   string
	ledger *sim.Ledger
	log    *logrus.Logger
}

func newNode(t *testing.T) *node {
	t.Helper()
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	root, err := os.MkdirTemp("", "nho-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	log := logrus.New()
	log.SetOutput(io.Discard)
	if testing.Verbose() {
		log.SetOutput(os.Stderr)
	}
	return &node{t: t, rt: rt, root: root, ledger: sim.NewLedger(), log: log}
}

// running is one started harness instance.
type running struct {
	p      *plugin.Plugin
	author interface{}
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, with its error in err
	err    error
}

// stop cancels the instance (as SIGTERM would) and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.done
	if r.err != nil {
		t.Errorf("%s: Run returned %v", r.p.Instance().Id, r.err)
	}
}

// reconciler is the audit plugin plus a Reconcile hook that records what it
// was given and asks the runtime to update those containers.
type reconciler struct {
	*audit.Plugin
	got chan []string
}

func (r *reconciler) Reconcile(_ context.Context, p *plugin.Plugin, older []*plugin.StampedContainer) error {
	var ids []string
	var updates []*api.ContainerUpdate
	for _, c := range older {
		ids = append(ids, c.Container.Id)
		u := &api.ContainerUpdate{ContainerId: c.Container.Id}
		u.SetLinuxCPUShares(2048)
		updates = append(updates, u)
	}
	sort.Strings(ids)
	if len(updates) > 0 {
		if _, err := p.UpdateContainers(updates); err != nil {
			return err
		}
	}
	r.got <- ids
	return nil
}

// start runs an audit plugin instance of version ver.
func (n *node) start(id, ver string, opts ...plugin.Option) *running {
	n.t.Helper()
	author := &reconciler{
		Plugin: &audit.Plugin{Version: ver, Recorder: &recorder{n.ledger, id, ver}},
		got:    make(chan []string, 4),
	}
	p, err := plugin.New(author, append([]plugin.Option{
		plugin.WithVersion(ver),
		plugin.WithPluginName("audit"),
		plugin.WithPluginIdx("10"),
		plugin.WithSocketPath(n.rt.SocketPath()),
		plugin.WithHandoverDir(n.root),
		plugin.WithInstanceID(id),
		plugin.WithLeaveTimeout(5 * time.Second),
		plugin.WithLogger(logrus.NewEntry(n.log)),
	}, opts...)...)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{p: p, author: author, cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = p.Run(ctx)
		close(r.done)
	}()
	n.t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// waitRole waits on change notifications until r has role.
func waitRole(t *testing.T, r *running, role plugin.Role) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		ch := r.p.RoleChanged()
		if r.p.Role() == role {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_, why := r.p.Ready()
			t.Fatalf("%s: waiting for role %v: %s", r.p.Instance().Id, role, why)
		}
	}
}

// lifecycles runs n pod lifecycles with two containers each.
func (n *node) lifecycles(count int) {
	n.t.Helper()
	for i := 0; i < count; i++ {
		if err := n.rt.Lifecycle(context.Background(), fmt.Sprintf("p%d", i), 2); err != nil {
			n.t.Fatal(err)
		}
	}
}

// check compares the ledger with the issued events and the runtime's stats.
func (n *node) check() sim.Report {
	n.t.Helper()
	rep := n.ledger.Compare(n.rt.Issued(), nil)
	if !rep.OK() {
		n.t.Errorf("ledger: %v", rep)
	}
	st := n.rt.Stats()
	if st.FailedCreates != 0 {
		n.t.Errorf("%d creations failed: %v", st.FailedCreates, st.CreateErrors)
	}
	for p, n2 := range st.Timeouts {
		if n2 != 0 {
			n.t.Errorf("instance %s dropped: %d timeouts", p, n2)
		}
	}
	return rep
}

type recorder struct {
	l            *sim.Ledger
	instance, vv string
}

func (r *recorder) Record(event, id string) error {
	r.l.Record(sim.Event(event), id, r.instance, r.vv)
	return nil
}

func TestInvalidConfigurationFailsAtStart(t *testing.T) {
	root := t.TempDir()
	base := []plugin.Option{plugin.WithPluginName("audit"), plugin.WithPluginIdx("10"), plugin.WithHandoverDir(root)}
	p := &audit.Plugin{Version: "x", Recorder: &recorder{l: sim.NewLedger()}}
	cases := []struct {
		name string
		opts []plugin.Option
		want string
	}{
		{"no version", nil, "plugin version not set"},
		{"bad version", []plugin.Option{plugin.WithVersion("v1..2")}, `invalid plugin version "v1..2"`},
		{"bad index", []plugin.Option{plugin.WithVersion("1.0.0"), plugin.WithPluginIdx("7")}, `invalid plugin index "7"`},
		{"bad name", []plugin.Option{plugin.WithVersion("1.0.0"), plugin.WithPluginName("a/b")}, "plugin name"},
		{"bad claim timeout", []plugin.Option{plugin.WithVersion("1.0.0"), plugin.WithClaimTimeout(-1)}, "claim timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plugin.New(p, append(append([]plugin.Option{}, base...), tc.opts...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := plugin.New(struct{}{}, append(base, plugin.WithVersion("1.0.0"))...); err == nil ||
		!strings.Contains(err.Error(), "implements no NRI handler") {
		t.Fatalf("plugin without handlers: err %v", err)
	}
}

// TestReconcileSeesExactlyOlderStamps: v2 taking over from v1 is given the
// containers v1 stamped; a second v2 instance is not given v2's own.
func TestReconcileSeesExactlyOlderStamps(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	v1 := n.start("a-v1", "1.0.0")
	waitRole(t, v1, plugin.RoleOwner)
	if got := <-v1.author.(*reconciler).got; len(got) != 0 {
		t.Fatalf("first owner reconciled %v, want nothing", got)
	}
	pod, err := n.rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var byV1 []string
	for i := 0; i < 3; i++ {
		c, err := n.rt.CreateContainer(ctx, pod.Id, fmt.Sprintf("c%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		byV1 = append(byV1, c.Id)
	}
	sort.Strings(byV1)

	v2 := n.start("b-v2", "2.0.0")
	waitRole(t, v2, plugin.RoleOwner)
	if got := <-v2.author.(*reconciler).got; fmt.Sprint(got) != fmt.Sprint(byV1) {
		t.Fatalf("v2 reconciled %v, want %v", got, byV1)
	}
	if n.rt.Stats().Updates != len(byV1) {
		t.Fatalf("runtime got %d updates from Reconcile, want %d", n.rt.Stats().Updates, len(byV1))
	}
	c, err := n.rt.CreateContainer(ctx, pod.Id, "by-v2", nil)
	if err != nil {
		t.Fatal(err)
	}
	v2.stop(t)

	v2b := n.start("c-v2", "2.0.0")
	waitRole(t, v2b, plugin.RoleOwner)
	got := <-v2b.author.(*reconciler).got
	if fmt.Sprint(got) != fmt.Sprint(byV1) {
		t.Fatalf("second v2 reconciled %v, want only v1's %v (not %s)", got, byV1, c.Id)
	}
	n.check()
}

// TestForgedStampDoesNotMakeThePluginSkip: a user annotation with the
// stamp's key must not let a container escape the plugin.
func TestForgedStampDoesNotMakeThePluginSkip(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	a := n.start("a", "1.0.0")
	waitRole(t, a, plugin.RoleOwner)
	key, _ := stamp.AnnotationKey("audit")
	pod, err := n.rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]string{key: "v1;9.9.9;someone;AAAAAAAAAAAAAAAAAAAAAA"}
	c, err := n.rt.CreateContainer(ctx, pod.Id, "c", forged)
	if err != nil {
		t.Fatal(err)
	}
	if acted := n.ledger.Acted(sim.EventCreateContainer, c.Id); len(acted) != 1 {
		t.Fatalf("container with forged stamp acted on by %v, want once", acted)
	}
	if c.Annotations[key] == forged[key] {
		t.Fatal("forged stamp was left in place")
	}
	if st := a.p.Stats(); st.BadStamps != 1 || st.SkippedStamped != 0 {
		t.Fatalf("stats %+v, want 1 bad stamp and no skip", st)
	}
	n.check()
}

// TestDowngradePolicy: newest-version keeps an older newcomer standby (not
// ready, with the reason); newest-instance lets it take over (rollback).
func TestDowngradePolicy(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		n := newNode(t)
		pol := plugin.WithPolicy(handover.NewestVersion{})
		v2 := n.start("a-v2", "2.0.0", pol)
		waitRole(t, v2, plugin.RoleOwner)
		v1 := n.start("b-v1", "1.0.0", pol)
		waitRole(t, v1, plugin.RoleStandby)
		ready, why := v1.p.Ready()
		if ready || !strings.Contains(why, "older than the owner's 2.0.0") {
			t.Fatalf("standby ready=%v reason %q", ready, why)
		}
		n.lifecycles(5)
		rep := n.check()
		if rep.ByVersion["1.0.0"] != 0 || rep.ByVersion["2.0.0"] == 0 {
			t.Fatalf("acted by version %v: the standby acted", rep.ByVersion)
		}
		if v1.p.Stats().Skipped == 0 {
			t.Fatal("standby saw no events: it is not connected")
		}
	})
	t.Run("allowed", func(t *testing.T) {
		n := newNode(t)
		v2 := n.start("a-v2", "2.0.0")
		waitRole(t, v2, plugin.RoleOwner)
		v1 := n.start("b-v1", "1.0.0")
		waitRole(t, v1, plugin.RoleOwner)
		waitRole(t, v2, plugin.RoleRetired)
		n.lifecycles(5)
		rep := n.check()
		if rep.ByVersion["2.0.0"] != 0 {
			t.Fatalf("retired v2 acted: %v", rep.ByVersion)
		}
	})
}

// TestTwoNewcomersAtOnce: two instances start together under load; one
// handover at a time, the newest instance ends up owner, nothing is lost.
func TestTwoNewcomersAtOnce(t *testing.T) {
	for round := 0; round < 3; round++ {
		n := newNode(t)
		a := n.start(fmt.Sprintf("a%d", round), "1.0.0")
		waitRole(t, a, plugin.RoleOwner)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); n.lifecycles(30) }()
		b := n.start(fmt.Sprintf("b%d", round), "2.0.0")
		c := n.start(fmt.Sprintf("c%d", round), "2.0.0") // started last: newest
		waitRole(t, c, plugin.RoleOwner)
		wg.Wait()
		if b.p.Role() == plugin.RoleOwner || a.p.Role() == plugin.RoleOwner {
			t.Fatalf("round %d: roles a=%v b=%v c=%v", round, a.p.Role(), b.p.Role(), c.p.Role())
		}
		n.check()
	}
}

// TestStandbyTakesOverWhenOwnerStops: a standby (refused by policy) takes
// over when the owner is stopped, under load, without losing an event.
func TestStandbyTakesOverWhenOwnerStops(t *testing.T) {
	n := newNode(t)
	pol := plugin.WithPolicy(handover.NewestVersion{})
	v2 := n.start("a-v2", "2.0.0", pol)
	waitRole(t, v2, plugin.RoleOwner)
	v1 := n.start("b-v1", "1.0.0", pol)
	waitRole(t, v1, plugin.RoleStandby)
	// Wait until the owner knows its standby, as the standby's watch says.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(v2.p.Status().Watchers) == 0 {
		select {
		case <-v2.p.RoleChanged():
		case <-ctx.Done():
			t.Fatal("the standby never watched the owner")
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.lifecycles(40) }()
	v2.stop(t)
	waitRole(t, v1, plugin.RoleOwner)
	wg.Wait()
	rep := n.check()
	if rep.ByVersion["1.0.0"] == 0 {
		t.Fatalf("the standby never acted: %v", rep.ByVersion)
	}
}

// intruder is a bare NRI stub plugin that stamps containers with the
// plugin's real key before the harness sees them, as another instance that
// got there first would.
type intruder struct{ signer *stamp.Signer }

func (i *intruder) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	v, _ := stamp.ParseVersion("1.0.0")
	value, err := i.signer.Sign(c.Id, v, "intruder")
	if err != nil {
		return nil, nil, err
	}
	adj := &api.ContainerAdjustment{}
	adj.AddAnnotation(i.signer.Key(), value)
	return adj, nil, nil
}

// TestContainerStampedByAnotherInstanceIsSkipped: a container that already
// carries a valid stamp when it reaches the owner is not handed to the
// author and not stamped again (a second claim would fail the container).
func TestContainerStampedByAnotherInstanceIsSkipped(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	a := n.start("a", "2.0.0")
	waitRole(t, a, plugin.RoleOwner)

	key, err := stamp.LoadOrCreateKey(n.root + "/audit/stamp.key")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := stamp.NewSigner("audit", key)
	if err != nil {
		t.Fatal(err)
	}
	s, err := stub.New(&intruder{signer: signer}, stub.WithPluginName("audit"), stub.WithPluginIdx("09"),
		stub.WithSocketPath(n.rt.SocketPath()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.Run(sctx)
	if err := n.rt.WaitPlugins(ctx, 2); err != nil {
		t.Fatal(err)
	}
	pod, err := n.rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.rt.CreateContainer(ctx, pod.Id, "c", nil)
	if err != nil {
		t.Fatalf("creation failed: %v", err)
	}
	if acted := n.ledger.Acted(sim.EventCreateContainer, c.Id); len(acted) != 0 {
		t.Fatalf("author saw a container another instance stamped: %v", acted)
	}
	if st := a.p.Stats(); st.SkippedStamped != 1 || st.Stamped != 0 {
		t.Fatalf("stats %+v, want 1 skipped as stamped, 0 stamped", st)
	}
	if got, _ := signer.Verify(c.Id, c.Annotations); got.Instance != "intruder" {
		t.Fatalf("stamp is %+v, want the first instance's", got)
	}
}
