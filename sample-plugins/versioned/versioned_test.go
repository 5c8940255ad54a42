package versioned_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/hashicorp/go-version"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/versioned"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		logrus.SetOutput(io.Discard) // the NRI library and the harness
	}
	os.Exit(m.Run())
}

func TestProfileFor(t *testing.T) {
	for v, want := range map[string]versioned.Profile{
		"0.9.0":      {Tier: "v1", CPUQuota: 50000},
		"1.0.0":      {Tier: "v1", CPUQuota: 50000},
		"1.9.3-rc.1": {Tier: "v1", CPUQuota: 50000},
		"2.0.0":      {Tier: "v2", CPUQuota: 100000},
		"v2.1":       {Tier: "v2", CPUQuota: 100000},
		"3.0.0":      {Tier: "v2", CPUQuota: 100000},
	} {
		if got := versioned.ProfileFor(version.Must(version.NewVersion(v))); got != want {
			t.Errorf("ProfileFor(%s) = %+v, want %+v", v, got, want)
		}
	}
	if _, err := versioned.New("not-a-version"); err == nil {
		t.Error("New accepted an invalid version")
	}
}

type running struct {
	author     *versioned.Plugin
	p          *plugin.Plugin
	reconciled chan []string
	cancel     context.CancelFunc
	done       chan struct{}
}

func start(t *testing.T, rt *sim.Runtime, root, id, ver string) *running {
	t.Helper()
	author, err := versioned.New(ver)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{author: author, reconciled: make(chan []string, 4), done: make(chan struct{})}
	author.OnReconcile = func(updated []string, err error) {
		if err != nil {
			t.Errorf("%s: reconcile: %v", id, err)
		}
		r.reconciled <- updated
	}
	author.SetLogf(func(format string, args ...any) { t.Logf(id+": "+format, args...) })
	r.p, err = plugin.New(author,
		plugin.WithVersion(ver),
		plugin.WithPluginName("versioned"),
		plugin.WithPluginIdx("20"),
		plugin.WithSocketPath(rt.SocketPath()),
		plugin.WithHandoverDir(root),
		plugin.WithInstanceID(id),
		plugin.WithLeaveTimeout(2*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := r.p.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// takeOver waits until r owns the plugin, the runtime has finished its
// Synchronize (applied its updates and counts plugins instances in all) and
// its Reconcile has run, and returns the containers Reconcile updated.
func (r *running) takeOver(t *testing.T, rt *sim.Runtime, plugins int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.WaitPlugins(ctx, plugins); err != nil {
		t.Fatal(err)
	}
	for {
		ch := r.p.RoleChanged()
		if r.p.Role() == handover.RoleOwner {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_, why := r.p.Ready()
			t.Fatalf("%s never became owner: %s", r.p.Instance().ID, why)
		}
	}
	select {
	case ids := <-r.reconciled:
		return ids
	case <-ctx.Done():
		t.Fatalf("%s: Reconcile never ran", r.p.Instance().ID)
		return nil
	}
}

func container(t *testing.T, rt *sim.Runtime, id string) *api.Container {
	t.Helper()
	c := rt.Container(id)
	if c == nil {
		t.Fatalf("container %s not found", id)
	}
	return c
}

func wantContainer(t *testing.T, rt *sim.Runtime, id, tier string, quota int64) {
	t.Helper()
	c := container(t, rt, id)
	if got := versioned.Tier(c); got != tier {
		t.Errorf("container %s: %s=%q, want %q", id, versioned.EnvVar, got, tier)
	}
	if got := versioned.CPUQuota(c); got != quota {
		t.Errorf("container %s: cpu quota %d, want %d", id, got, quota)
	}
	if got := versioned.CPUPeriod(c); got != versioned.Period {
		t.Errorf("container %s: cpu period %d, want %d", id, got, versioned.Period)
	}
}

// TestUpgradeReconcilesExactlyV1Containers: v1 owns the plugin and creates
// containers; v2 takes over and its Reconcile updates exactly the running
// containers v1 created (the runtime's unsolicited updates say so), not the
// one v1 created and that has stopped, not the one that predates the plugin
// (Synchronize handles that one), and not v2's own. A second v2 instance
// finds nothing to do.
func TestUpgradeReconcilesExactlyV1Containers(t *testing.T) {
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	root, err := os.MkdirTemp("", "nhv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	ctx := context.Background()

	pod, err := rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	pre, err := rt.CreateContainer(ctx, pod.Id, "pre", nil) // before any instance of the plugin
	if err != nil {
		t.Fatal(err)
	}

	v1 := start(t, rt, root, "a-v1", "1.0.0")
	if ids := v1.takeOver(t, rt, 1); len(ids) != 0 {
		t.Fatalf("first owner reconciled %v, want nothing", ids)
	}
	if got := v1.author.Synchronized(); fmt.Sprint(got) != fmt.Sprint([]string{pre.Id}) {
		t.Fatalf("v1 synchronized %v, want [%s]", got, pre.Id)
	}
	wantContainer(t, rt, pre.Id, "", 50000)

	var byV1 []string
	for i := 0; i < 3; i++ {
		c, err := rt.CreateContainer(ctx, pod.Id, fmt.Sprintf("c%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		wantContainer(t, rt, c.Id, "v1", 50000)
		byV1 = append(byV1, c.Id)
	}
	stopped := byV1[2]
	if err := rt.StopContainer(ctx, stopped); err != nil { // not running: not reconciled
		t.Fatal(err)
	}
	live := byV1[:2]
	sort.Strings(live)
	if n := rt.Stats().Updates; n != 0 {
		t.Fatalf("%d unsolicited updates before the upgrade", n)
	}

	// v1 synchronized the container that existed before the plugin: to v2
	// it is one of v1's, like those v1 stamped.
	live = append(live, pre.Id)
	sort.Strings(live)
	v2 := start(t, rt, root, "b-v2", "2.0.0")
	ids := v2.takeOver(t, rt, 2)
	if fmt.Sprint(ids) != fmt.Sprint(live) {
		t.Fatalf("v2 reconciled %v, want v1's running containers %v", ids, live)
	}
	// The runtime saw exactly those updates, with v2's quota.
	var updated []string
	for _, u := range rt.Updates() {
		updated = append(updated, u.GetContainerId())
		if got := u.GetLinux().GetResources().GetCpu().GetQuota().GetValue(); got != 100000 {
			t.Errorf("update of %s: cpu quota %d, want 100000", u.GetContainerId(), got)
		}
	}
	sort.Strings(updated)
	if fmt.Sprint(updated) != fmt.Sprint(live) {
		t.Fatalf("runtime received updates for %v, want exactly %v", updated, live)
	}
	for _, id := range live {
		env := "v1" // the environment stays what the container started with
		if id == pre.Id {
			env = ""
		}
		wantContainer(t, rt, id, env, 100000)
	}
	wantContainer(t, rt, stopped, "v1", 50000)
	if got := v2.author.Synchronized(); len(got) != 0 {
		t.Fatalf("v2 synchronized %v, want nothing (v1 synchronized %s)", got, pre.Id)
	}
	wantContainer(t, rt, pre.Id, "", 100000)

	c, err := rt.CreateContainer(ctx, pod.Id, "by-v2", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantContainer(t, rt, c.Id, "v2", 100000)

	// Another v2 instance (a restart of v2) is given v1's containers again
	// (their stamps still say v1) and finds them up to date.
	v2b := start(t, rt, root, "c-v2", "2.0.0")
	if ids := v2b.takeOver(t, rt, 3); len(ids) != 0 {
		t.Fatalf("second v2 instance reconciled %v, want nothing", ids)
	}
	if n := len(rt.Updates()); n != len(live) {
		t.Fatalf("%d unsolicited updates after the second v2 instance, want %d", n, len(live))
	}

	// A rollback to v1 is given no container (Reconcile sees only older
	// stamps): v2's containers keep v2's limit. See README.md.
	v1b := start(t, rt, root, "d-v1", "1.0.0")
	if ids := v1b.takeOver(t, rt, 4); len(ids) != 0 {
		t.Fatalf("rollback to v1 reconciled %v, want nothing", ids)
	}
	wantContainer(t, rt, c.Id, "v2", 100000)

	st := rt.Stats()
	if st.FailedCreates != 0 || len(st.Timeouts) != 0 {
		t.Fatalf("failed creations %d (%v), timeouts %v", st.FailedCreates, st.CreateErrors, st.Timeouts)
	}
	for _, r := range []*running{v1, v2, v2b} {
		if r.p.Role() == handover.RoleOwner {
			t.Errorf("%s still owner after the rollback", r.p.Instance().ID)
		}
	}
	if st := v1.p.Status(); !strings.HasPrefix(st.Reason, "yielded to b-v2") {
		t.Errorf("v1 retired with reason %q", st.Reason)
	}
}

// TestKubeletLimitKept: a container the kubelet gave a CPU limit (its
// quota, with the kubelet's 100 ms period) keeps it: no version sets or
// updates its quota. One with an older version's quota is updated.
func TestKubeletLimitKept(t *testing.T) {
	p, err := versioned.New("2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	withQuota := func(id string, quota int64, period uint64) *api.Container {
		return &api.Container{Id: id, Linux: &api.LinuxContainer{Resources: &api.LinuxResources{
			Cpu: &api.LinuxCPU{Quota: api.Int64(quota), Period: api.UInt64(period)}}}}
	}
	limited := withQuota("limited", 150000, 100000)
	adj, _, err := p.CreateContainer(context.Background(), nil, limited)
	if err != nil {
		t.Fatal(err)
	}
	if cpu := adj.GetLinux().GetResources().GetCpu(); cpu.GetQuota() != nil || cpu.GetPeriod() != nil {
		t.Errorf("CreateContainer changed the kubelet's CPU limit: %v", cpu)
	}
	older := withQuota("older", 50000, versioned.Period)
	current := withQuota("current", 100000, versioned.Period)
	ups, err := p.Synchronize(context.Background(), nil, []*api.Container{limited, older, current})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].GetContainerId() != "older" || ups[0].GetLinux().GetResources().GetCpu().GetQuota().GetValue() != 100000 {
		t.Errorf("updates %v, want only older's quota raised to 100000", ups)
	}
}
