package test

// Helpers of the in-process tests: a node (the in-process runtime, a
// handover root and a ledger) on which harness instances run in the test
// process, and the checks and probes the tests share. The plugin processes'
// node is in procnode_test.go.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
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
	// instances are stopped after the runtime when the test ends; only
	// the test's goroutine appends to it.
	instances []*running
}

// newNode starts a node whose instances log to stderr with -v only.
//
// When the test ends, the runtime stops first and the instances after it,
// all at once: an owner asked to stop waits for a successor up to its leave
// timeout (a second, unless the test sets another).
func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, ledger: sim.NewLedger()}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, r := range n.instances {
			wg.Add(1)
			go func() { defer wg.Done(); _ = r.run.Stop() }()
		}
		wg.Wait()
	})
	n.rt = testutil.StartRuntime(t, sim.Options{})
	n.root = testutil.ShortTempDir(t, "nho-")
	n.log = logrus.New()
	n.log.SetOutput(io.Discard)
	if testing.Verbose() {
		n.log.SetOutput(os.Stderr)
	}
	return n
}

// running is one started harness instance.
type running struct {
	p      *plugin.Plugin
	author interface{}
	run    *testutil.Running
}

// stop cancels the instance (as SIGTERM would), waits for Run to return
// and fails the test if Run returned an error.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if err := r.run.Stop(); err != nil {
		t.Errorf("%s: Run returned %v", r.p.Instance().ID, err)
	}
}

// recorder records the audit plugin's acts in a ledger, as instance
// instance of version vv.
type recorder struct {
	l            *sim.Ledger
	instance, vv string
}

func (r *recorder) Record(event, id string) error {
	r.l.Record(sim.Event(event), id, r.instance, r.vv)
	return nil
}

// auditPlugin is the audit sample plugin of version ver, recording its acts in
// the node's ledger as instance id.
func (n *node) auditPlugin(id, ver string) *audit.Plugin {
	return &audit.Plugin{Version: ver, Recorder: &recorder{n.ledger, id, ver}}
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

// syncAuthor is the audit plugin with a Synchronize handler that reports
// which containers it was handed.
type syncAuthor struct {
	*audit.Plugin
	synced chan []string
}

func (a *syncAuthor) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	ids := []string{}
	for _, c := range ctrs {
		ids = append(ids, c.Id)
	}
	sort.Strings(ids)
	a.synced <- ids
	return nil, nil
}

// newSyncAuthor is a syncAuthor recording in the node's ledger as instance
// id of version ver.
func newSyncAuthor(n *node, id, ver string) *syncAuthor {
	return &syncAuthor{Plugin: n.auditPlugin(id, ver), synced: make(chan []string, 8)}
}

// start runs an audit plugin instance of version ver, with a reconciler as
// its author.
func (n *node) start(id, ver string, opts ...plugin.Option) *running {
	n.t.Helper()
	return n.startAuthor(id, ver, &reconciler{Plugin: n.auditPlugin(id, ver), got: make(chan []string, 4)}, opts...)
}

// startAuthor runs an instance of the audit plugin, version ver, with the
// given author, on the node's runtime and handover root; opts come after
// the node's own. The instance is stopped when the test ends (what Run
// returned is only checked by stop).
func (n *node) startAuthor(id, ver string, author interface{}, opts ...plugin.Option) *running {
	n.t.Helper()
	p, err := plugin.New(author, append(append(testutil.AuditOptions(n.rt, n.root, id, ver),
		plugin.WithLeaveTimeout(time.Second),
		plugin.WithLogger(logrus.NewEntry(n.log)),
	), opts...)...)
	if err != nil {
		n.t.Fatal(err)
	}
	r := &running{p: p, author: author, run: testutil.Run(p)}
	n.instances = append(n.instances, r)
	return r
}

// runBriefly runs an instance whose runtime socket may not exist, with a
// context that is already cancelled: Run returns at once and closes it.
func runBriefly(t *testing.T, p *plugin.Plugin) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// waitRole waits on change notifications until r has role.
func waitRole(t *testing.T, r *running, role handover.Role) {
	t.Helper()
	testutil.WaitStatus(t, r.p, "role "+role.String(), func(st handover.Status) bool { return st.Role == role })
}

// waitReady waits on change notifications until r is ready: it owns the
// plugin and its claim has settled (the author's Synchronize returned).
func waitReady(t *testing.T, r *running) {
	t.Helper()
	testutil.WaitStatus(t, r.p, "ready", func(handover.Status) bool { ok, _ := r.p.Ready(); return ok })
}

// refusedStandby starts a node with an owner, a-v2 (2.0.0), and a newcomer
// of an older version, b-v1 (1.0.0), both under policy newest-version, and
// waits until the owner owns and the newcomer, refused, is standby.
func refusedStandby(t *testing.T) (n *node, owner, standby *running) {
	t.Helper()
	n = newNode(t)
	pol := plugin.WithPolicy(handover.NewestVersion{})
	owner = n.start("a-v2", "2.0.0", pol)
	waitRole(t, owner, handover.RoleOwner)
	standby = n.start("b-v1", "1.0.0", pol)
	waitRole(t, standby, handover.RoleStandby)
	return n, owner, standby
}

// lifecycles runs count pod lifecycles with two containers each.
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
	return n.checkSince(nil)
}

// checkSince checks the ledger as check does, leaving out the events issued
// in before (delivered while no instance was connected).
func (n *node) checkSince(before map[sim.EventKey]int) sim.Report {
	n.t.Helper()
	issued := n.rt.Issued()
	for k, c := range before {
		issued[k] -= c
		if issued[k] == 0 {
			delete(issued, k)
		}
	}
	rep := n.ledger.Compare(issued, nil)
	if !rep.OK() {
		n.t.Errorf("ledger: %v", rep)
	}
	st := n.rt.Stats()
	if st.FailedCreates != 0 {
		n.t.Errorf("%d creations failed: %v", st.FailedCreates, st.CreateErrors)
	}
	for p, c := range st.Timeouts {
		if c != 0 {
			n.t.Errorf("instance %s dropped: %d timeouts", p, c)
		}
	}
	return rep
}

// owns reports whether an in-process instance owns the plugin and the owner
// name leads to it.
func (n *node) owns(r *running) bool {
	return r.p.Role() == handover.RoleOwner && ownerNameLeadsTo(n.root, r.p.Instance().ID)
}

// signer is the stamp signer of the node's audit plugin, with the key in
// its handover directory (created if there is none yet).
func (n *node) signer() *stamp.Signer {
	n.t.Helper()
	key, err := stamp.LoadOrCreateKey(filepath.Join(n.root, "audit", "stamp.key"))
	if err != nil {
		n.t.Fatal(err)
	}
	signer, err := stamp.NewSigner("audit", key)
	if err != nil {
		n.t.Fatal(err)
	}
	return signer
}

// ownerSocket is the owner name of the audit plugin in a handover root.
func ownerSocket(root string) string { return filepath.Join(root, "audit", "owner.sock") }

// instanceSocket is the handover socket of instance id of the audit plugin
// in a handover root.
func instanceSocket(root, id string) string {
	return filepath.Join(root, "audit", "instances", id+".sock")
}

// ownerNameLeadsTo reports whether the owner name of the audit plugin in a
// handover root leads to instance id's socket (both exist and are the same
// file).
func ownerNameLeadsTo(root, id string) bool {
	a, err1 := os.Stat(ownerSocket(root))
	b, err2 := os.Stat(instanceSocket(root, id))
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// sameFile reports whether paths a and b are the same file; it fails the
// test if either does not exist.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	ia, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(ia, ib)
}

// scrape fetches and parses an instance's /metrics over HTTP.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// value returns the value of the metric in family name whose labels include
// all of want (0 if absent).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return 0
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}
