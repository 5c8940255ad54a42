package test

import (
	"context"
	"fmt"
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
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
	"github.com/nri-handover/nri-handover/stamp"
)

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
	waitRole(t, v1, handover.RoleOwner)
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
	waitRole(t, v2, handover.RoleOwner)
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
	waitRole(t, v2b, handover.RoleOwner)
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
	waitRole(t, a, handover.RoleOwner)
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
		n, _, v1 := refusedStandby(t)
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
		waitRole(t, v2, handover.RoleOwner)
		v1 := n.start("b-v1", "1.0.0")
		// Ready: v1 acts (the old owner acts until the runtime has v1 in
		// its chain, which an event or the idle rule shows).
		waitReady(t, v1)
		waitRole(t, v2, handover.RoleRetired)
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
		waitRole(t, a, handover.RoleOwner)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); n.lifecycles(30) }()
		b := n.start(fmt.Sprintf("b%d", round), "2.0.0")
		c := n.start(fmt.Sprintf("c%d", round), "2.0.0") // started last: newest
		waitRole(t, c, handover.RoleOwner)
		wg.Wait()
		if b.p.Role() == handover.RoleOwner || a.p.Role() == handover.RoleOwner {
			t.Fatalf("round %d: roles a=%v b=%v c=%v", round, a.p.Role(), b.p.Role(), c.p.Role())
		}
		n.check()
	}
}

// TestStandbyTakesOverWhenOwnerStops: a standby (refused by policy) takes
// over when the owner is stopped, under load, without losing an event.
func TestStandbyTakesOverWhenOwnerStops(t *testing.T) {
	n, v2, v1 := refusedStandby(t)
	// Wait until the owner knows its standby, as the standby's watch says.
	testutil.WaitStatus(t, v2.p, "the standby to watch the owner", func(st handover.Status) bool {
		return len(st.Watchers) != 0
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.lifecycles(40) }()
	v2.stop(t)
	waitRole(t, v1, handover.RoleOwner)
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
	waitRole(t, a, handover.RoleOwner)

	signer := n.signer()
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

// TestIdentityFromNRIEnvironment: a plugin given its name and index only
// by $NRI_PLUGIN_NAME and $NRI_PLUGIN_IDX (as the shipped DaemonSet does,
// and as NRI does for the plugins it starts) registers under them and
// owns; the same values given again by option are no conflict; an option
// that contradicts the environment's index is refused at New, and so is a
// stub option that contradicts it.
func TestIdentityFromNRIEnvironment(t *testing.T) {
	t.Setenv(api.PluginNameEnvVar, "audit")
	t.Setenv(api.PluginIdxEnvVar, "10")
	n := newNode(t)
	p, err := plugin.New(n.auditPlugin("env-only", "1.0.0"), plugin.WithVersion("1.0.0"),
		plugin.WithSocketPath(n.rt.SocketPath()), plugin.WithHandoverDir(n.root),
		plugin.WithInstanceID("env-only"), plugin.WithLogger(logrus.NewEntry(n.log)),
		plugin.WithLeaveTimeout(time.Millisecond)) // no successor to wait for
	if err != nil {
		t.Fatal(err)
	}
	r := &running{p: p, run: testutil.Run(p)}
	t.Cleanup(func() { _ = r.run.Stop() })
	waitRole(t, r, handover.RoleOwner)
	if p.Name() != "audit" || p.Idx() != "10" {
		t.Fatalf("identity %s/%s, want audit/10", p.Name(), p.Idx())
	}
	r.stop(t)

	same := n.start("same-again", "1.0.0", plugin.WithLeaveTimeout(time.Millisecond)) // WithPluginName("audit"), WithPluginIdx("10") as well
	waitRole(t, same, handover.RoleOwner)
	same.stop(t)

	_, err = plugin.New(n.auditPlugin("x", "1.0.0"), plugin.WithVersion("1.0.0"), plugin.WithPluginIdx("20"),
		plugin.WithHandoverDir(n.root))
	if err == nil || !strings.Contains(err.Error(), `conflicts with $NRI_PLUGIN_IDX="10"`) {
		t.Fatalf("conflicting index: err %v", err)
	}

	// A stub option that contradicts the plugin's identity is refused at
	// New, named, instead of failing every connection.
	_, err = plugin.New(n.auditPlugin("bad", "1.0.0"), plugin.WithVersion("1.0.0"),
		plugin.WithSocketPath(n.rt.SocketPath()), plugin.WithHandoverDir(n.root), plugin.WithInstanceID("bad"),
		plugin.WithLogger(logrus.NewEntry(n.log)),
		plugin.WithStubOptions(stub.WithPluginIdx("30")))
	if err == nil || !strings.Contains(err.Error(), "stub.WithPluginIdx") {
		t.Fatalf("New with a stub index that conflicts: %v, want an error naming stub.WithPluginIdx", err)
	}
}
