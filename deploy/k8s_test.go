//go:build k8s

package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

const (
	pluginNS = "nri-handover"
	auditDS  = "nri-audit"
	auditEnv = audit.EnvVar
	// loadRate is the workload's pods created per second as asked; every
	// rollout under the workload must see at least minLoadRate created
	// (issue 11: at least 2 pods/s during every rollout). The margin
	// covers the ticks a 2-core node makes the workload skip when its CRI
	// calls stall (maxInFlight pods in flight).
	loadRate    = 2.5
	minLoadRate = 2.0
	loadLife    = 2 * time.Second
	rolloutMax  = 4 * time.Minute
)

// suite is the state the k8s tests share, in the order they run.
type suite struct {
	c         *cluster
	w         *watcher
	mon       *ownerMonitor
	load      *loadGen
	ledgerOff int64
	minReady  time.Duration
	rollouts  []rolloutResult
	baseline  []time.Duration // pod start latencies with no rollout going on
	during    []time.Duration // ... while a rollout went on
	windows   [][2]time.Time  // the rollouts' time spans
	criBase   criWindow       // the kubelet's CRI calls with no rollout going on
	criDuring criWindow       // ... while a rollout under the workload went on
	loadSum   *loadSummary    // what the workload achieved, once it stopped
}

// TestKubernetesNode runs the shipped DaemonSet and chart on a real node:
// the DaemonSet controller rolls the plugin out through the API while the
// kubelet creates and deletes workload pods, and the seeds' two failures
// are replayed. The subtests build on each other and run in order.
func TestKubernetesNode(t *testing.T) {
	c := node
	w, err := c.watchPods()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	// The owner of the audit plugin, watched from the first step to the
	// last (a selection of steps, K8S_RUN, runs with it too).
	s := &suite{c: c, w: w, mon: startOwnerMonitor("audit"), criBase: criWindow{}, criDuring: criWindow{}}
	defer func() {
		if s.load != nil {
			s.load.stop()
		}
		if s.mon != nil {
			s.mon.close()
		}
	}()
	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"ShippedManifest", s.shippedManifest},
		{"RolloutsUnderLoad", s.rolloutsUnderLoad},
		{"Seed000FinalizerOnOldPod", s.seed000},
		{"Seed002DuplicateDaemonSet", s.seed002},
		{"EveryEventOnce", s.everyEventOnce},
		{"ChartMetrics", s.chartMetrics},
		{"ChartNewestVersion", s.chartNewestVersion},
		{"ChartVersioned", s.chartVersioned},
		{"ConfigurationError", s.configurationError},
		{"RuntimeRestart", s.runtimeRestart},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.f) {
			t.Fatalf("%s failed: the later steps build on it", st.name)
		}
	}
	s.report(t)
}

// --- objects -------------------------------------------------------------

func (s *suite) ctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// apply creates the objects (or updates what exists), the DaemonSets with
// their plugin container's image replaced by image if it is not empty.
func (s *suite) apply(t *testing.T, objs *objects, image string) []*appsv1.DaemonSet {
	t.Helper()
	ctx := s.ctx(t, 30*time.Second)
	cs := s.c.cs
	for _, ns := range objs.namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create namespace %s: %v", ns.Name, err)
		}
	}
	for _, sa := range objs.serviceAccounts {
		if _, err := cs.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, &sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create service account %s: %v", sa.Name, err)
		}
	}
	var out []*appsv1.DaemonSet
	for _, ds := range objs.daemonSets {
		ds := ds.DeepCopy()
		if image != "" {
			ds.Spec.Template.Spec.Containers[0].Image = image
		}
		got, err := cs.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create DaemonSet %s: %v", ds.Name, err)
		}
		out = append(out, got)
	}
	return out
}

// setImage changes the DaemonSet's plugin image, as `kubectl set image` does.
func (s *suite) setImage(t *testing.T, name, image string) {
	t.Helper()
	ctx := s.ctx(t, 30*time.Second)
	dss := s.c.cs.AppsV1().DaemonSets(pluginNS)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := dss.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.Containers[0].Image = image
		_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("set image of %s to %s: %v", name, image, err)
	}
}

// livePods returns the pods of a DaemonSet that are not being deleted.
func (s *suite) livePods(ds string) []podRecord {
	var out []podRecord
	for _, r := range s.w.snapshot(pluginNS) {
		if r.owner == ds && r.deletingAt.IsZero() && r.goneAt.IsZero() {
			out = append(out, r)
		}
	}
	return out
}

// waitDaemonSet waits until the DaemonSet's controller reports the node
// up to date and available, and it has exactly one pod, of image, Ready.
func (s *suite) waitDaemonSet(t *testing.T, name, image string, timeout time.Duration) podRecord {
	t.Helper()
	var pod podRecord
	deadline := time.Now().Add(timeout)
	for {
		ds, err := s.c.cs.AppsV1().DaemonSets(pluginNS).Get(context.Background(), name, metav1.GetOptions{})
		var why string
		switch {
		case err != nil:
			why = err.Error()
		case ds.Status.ObservedGeneration < ds.Generation:
			why = "generation not observed yet"
		case ds.Status.DesiredNumberScheduled != 1 || ds.Status.UpdatedNumberScheduled != 1 || ds.Status.NumberAvailable != 1:
			why = fmt.Sprintf("desired %d, updated %d, available %d", ds.Status.DesiredNumberScheduled,
				ds.Status.UpdatedNumberScheduled, ds.Status.NumberAvailable)
		default:
			var all []podRecord
			for _, r := range s.w.snapshot(pluginNS) {
				if r.owner == name && r.goneAt.IsZero() && r.deletingAt.IsZero() {
					all = append(all, r)
				}
			}
			switch {
			case len(all) != 1:
				why = fmt.Sprintf("%d pods", len(all))
			case all[0].image != image:
				why = "pod runs " + all[0].image
			case all[0].readyAt.IsZero() || !all[0].unreadyAt.IsZero():
				why = "pod not ready"
			default:
				return all[0]
			}
		}
		if time.Now().After(deadline) {
			s.dumpPlugins(t)
			t.Fatalf("DaemonSet %s not rolled out to %s after %v: %s", name, image, timeout, why)
			return pod
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podLog returns a pod's log through the API (the current container, or
// the previous one).
func (s *suite) podLog(name string, previous bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s.c.cs.CoreV1().Pods(pluginNS).GetLogs(name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
	if err != nil {
		return "(log: " + err.Error() + ")"
	}
	return string(b)
}

func (s *suite) dumpPlugins(t *testing.T) {
	t.Helper()
	for _, r := range s.w.snapshot(pluginNS) {
		if !r.goneAt.IsZero() {
			continue
		}
		t.Logf("pod %s (%s): ready %v unready %v deleting %v restarts %d waiting %v terminated %v\nlog:\n%s",
			r.name, r.image, !r.readyAt.IsZero(), !r.unreadyAt.IsZero(), !r.deletingAt.IsZero(), r.restarts,
			r.waiting, r.terminated, tail(s.podLog(r.name, false), 30))
	}
	s.logEvents(t)
}

func (s *suite) logEvents(t *testing.T) {
	t.Helper()
	evs, err := s.c.cs.CoreV1().Events(pluginNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning {
			t.Logf("event %s %s x%d: %s", e.InvolvedObject.Name, e.Reason, e.Count, strings.TrimSpace(e.Message))
		}
	}
}

// status runs `nri-handover status` on the node for the plugin and returns
// its output and whether it reported an answering owner.
func (s *suite) status(plugin string) (string, bool) {
	out, err := exec.Command(filepath.Join(s.c.bin, pluginVersions[0], "nri-handover"), "status", "--dir", hostHandoverDir, plugin).CombinedOutput()
	return string(out), err == nil
}

// --- steps -----------------------------------------------------------------

// shippedManifest applies deploy/manifests/audit.yaml exactly as shipped
// (its image is the one the suite built and imported): the plugin pod
// becomes Ready, owns the plugin, and its log has none of the
// configuration warnings a user would see.
func (s *suite) shippedManifest(t *testing.T) {
	objs := loadManifest(t, filepath.Join(manifestsDir, "audit.yaml"))
	if len(objs.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets in audit.yaml", len(objs.daemonSets))
	}
	s.minReady = time.Duration(objs.daemonSets[0].Spec.MinReadySeconds) * time.Second
	s.ledgerOff = ledgerSize()
	start := time.Now()
	s.apply(t, objs, "")
	pod := s.waitDaemonSet(t, auditDS, auditImage("1.0.0"), 3*time.Minute)
	t.Logf("shipped DaemonSet: pod %s Ready %v after create", pod.name, pod.readyAt.Sub(start).Round(time.Millisecond))
	if pod.restarts != 0 {
		t.Errorf("plugin pod restarted %d times", pod.restarts)
	}
	log := s.podLog(pod.name, false)
	for _, bad := range []string{"already set", "overridden", "level=error"} {
		if strings.Contains(log, bad) {
			t.Errorf("plugin log has %q:\n%s", bad, log)
		}
	}
	out, ok := s.status("audit")
	if !ok || !strings.Contains(out, pod.name) {
		t.Errorf("nri-handover status on the node does not show %s as owner (ok %v):\n%s", pod.name, ok, out)
	}
	s.checkProbeEvents(t)
}

// rolloutResult is one rollout as the API and the node saw it.
type rolloutResult struct {
	name                      string
	from, to                  string
	oldPod, newPod            string
	newReady, oldDel, oldGone time.Duration // from the image change
	keptAfterReady            time.Duration // old pod's deletion after the new pod turned Ready
	noOwner                   time.Duration // longest time the node had no owner
	loadRate                  float64       // workload pods created per second meanwhile (0: no workload)
	loadDeleted               float64       // workload pods deleted per second meanwhile
	loadSkipped               int           // workload ticks skipped meanwhile (maxInFlight pods in flight)
}

// rollout changes the DaemonSet's image and waits for the controller to
// finish; it checks what must hold for every rollout.
func (s *suite) rollout(t *testing.T, name, ds, image string) rolloutResult {
	t.Helper()
	return s.rolloutWith(t, name, ds, image, func() { s.setImage(t, ds, image) })
}

// rolloutWith is rollout with another way to change the DaemonSet (a
// chart upgrade).
func (s *suite) rolloutWith(t *testing.T, name, ds, image string, change func()) rolloutResult {
	t.Helper()
	old := s.livePods(ds)
	if len(old) != 1 {
		t.Fatalf("%d live pods of %s before the rollout, want 1", len(old), ds)
	}
	cri0, err := s.c.criSample()
	if err != nil {
		t.Fatal(err)
	}
	skipped0 := 0
	if s.load != nil {
		skipped0 = s.load.skippedTicks()
	}
	t0 := time.Now()
	s.c.progress("%s: %s -> %s", name, shortImage(old[0].image), shortImage(image))
	change()
	newPod := s.waitDaemonSet(t, ds, image, rolloutMax)
	if !s.w.waitUntil(rolloutMax, func() bool { r := s.w.pods[old[0].uid]; return r != nil && !r.goneAt.IsZero() }) {
		t.Fatalf("old pod %s not gone", old[0].name)
	}
	end := time.Now()
	cri1, err := s.c.criSample()
	if err != nil {
		t.Fatal(err)
	}
	var loadRate, loadDeleted float64
	var loadSkipped int
	if s.load != nil {
		s.criDuring.add(cri0, cri1)
		pods := s.load.snapshot()
		loadRate, loadDeleted = rate(pods, t0, end), deleteRate(pods, t0, end)
		loadSkipped = s.load.skippedTicks() - skipped0
		// The workload ran at the asked rate within this rollout's window
		// (image change to old pod gone), not only on average.
		if loadRate < minLoadRate {
			t.Errorf("%s: workload created %.2f pods/s during the rollout (%s), want >= %.1f (%d ticks skipped with %d pods in flight)",
				name, loadRate, ms(end.Sub(t0)), minLoadRate, loadSkipped, maxInFlight)
		}
	}
	oldRec := s.w.byName(pluginNS, old[0].name)
	res := rolloutResult{
		name: name, from: old[0].image, to: image, oldPod: old[0].name, newPod: newPod.name,
		newReady: newPod.readyAt.Sub(t0), oldDel: oldRec.deletingAt.Sub(t0), oldGone: oldRec.goneAt.Sub(t0),
		keptAfterReady: oldRec.deletingAt.Sub(newPod.readySince), loadRate: loadRate, loadDeleted: loadDeleted,
		loadSkipped: loadSkipped,
	}
	if s.mon != nil && s.mon.plugin == pluginOf(ds) {
		res.noOwner = s.mon.longestGap(t0, end)
		if owner := s.mon.current(); owner != newPod.name {
			t.Errorf("%s: owner after the rollout is %q, want the new pod %s", name, owner, newPod.name)
		}
	}
	s.windows = append(s.windows, [2]time.Time{t0, end})
	if !oldRec.deletingAt.After(newPod.readyAt) {
		t.Errorf("%s: old pod %s deleted %v before the new pod %s turned Ready", name, oldRec.name,
			newPod.readyAt.Sub(oldRec.deletingAt), newPod.name)
	}
	// The old pod is the new one's live fallback: it stays Ready until it
	// is deleted, and the controller deletes it only once the new pod has
	// been available for minReadySeconds, counted from the Ready
	// condition's lastTransitionTime as the kubelet reported it (whole
	// seconds, rounded down: the check errs on the strict side). Under load
	// the kubelet's status reaches the API late, so the watch may see the
	// new pod Ready well after that time.
	if !oldRec.unreadyAt.IsZero() && oldRec.unreadyAt.Before(oldRec.deletingAt) {
		t.Errorf("%s: old pod %s turned unready %s before its deletion: no fallback kept", name, oldRec.name,
			ms(oldRec.deletingAt.Sub(oldRec.unreadyAt)))
	}
	if res.keptAfterReady < s.minReady {
		t.Errorf("%s: old pod %s deleted %s after the new pod turned Ready, want >= minReadySeconds (%v)", name,
			oldRec.name, ms(res.keptAfterReady), s.minReady)
	}
	t.Logf("%s: %s -> %s: new pod %s Ready after %s, old pod %s deleted after %s (%s after its Ready transition), gone after %s; longest without owner %s; workload %.2f pods/s created, %.2f deleted, %d ticks skipped",
		name, res.from, res.to, res.newPod, ms(res.newReady), res.oldPod, ms(res.oldDel), ms(res.keptAfterReady),
		ms(res.oldGone), ms(res.noOwner), res.loadRate, res.loadDeleted, res.loadSkipped)
	s.rollouts = append(s.rollouts, res)
	return res
}

// rolloutsUnderLoad starts the workload, measures pod start latency with
// no rollout, then rolls the DaemonSet v1 -> v2 -> v1 -> v2 through the API.
func (s *suite) rolloutsUnderLoad(t *testing.T) {
	var err error
	if s.load, err = s.c.startLoad(s.w, loadRate, loadLife); err != nil {
		t.Fatal(err)
	}
	// The baseline: 40 workload pods running with no rollout going on.
	cri0, err := s.c.criSample()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !s.w.waitUntil(4*time.Minute, func() bool {
		n := 0
		for _, r := range s.w.pods {
			if r.ns == loadNamespace && r.firstSeen.After(start) && !r.runningAt.IsZero() {
				n++
			}
		}
		return n >= 40
	}) {
		t.Fatal("the workload does not run 40 pods in 4 minutes")
	}
	cri1, err := s.c.criSample()
	if err != nil {
		t.Fatal(err)
	}
	s.criBase.add(cri0, cri1)
	s.baseline = startLatencies(s.load.snapshot(), start, time.Now().Add(-10*time.Second))
	for i, v := range []string{"2.0.0", "1.0.0", "2.0.0"} {
		s.rollout(t, fmt.Sprintf("rollout %d", i+1), auditDS, auditImage(v))
	}
	s.checkProbeEvents(t)
	s.checkLoadSeen(t)
}

// checkLoadSeen fails unless the workload's containers were read from
// containerd, with the first reasons why not.
func (s *suite) checkLoadSeen(t *testing.T) {
	t.Helper()
	var withSpec int
	var why []string
	for _, p := range s.load.snapshot() {
		switch {
		case p.spec != nil:
			withSpec++
		case p.failure != "":
			why = append(why, p.name+": "+p.failure)
		case p.specErr != nil:
			why = append(why, p.name+": spec: "+p.specErr.Error())
		}
	}
	if withSpec == 0 {
		t.Fatalf("no workload container read from containerd: %v", first(why, 5))
	}
}

// seed000: a finalizer holds the running plugin pod; the upgrade goes on,
// the new pod owns and serves while the old one stays Terminating for at
// least 60 s; then the finalizer is removed.
func (s *suite) seed000(t *testing.T) {
	old := s.livePods(auditDS)
	if len(old) != 1 {
		t.Fatalf("%d live pods", len(old))
	}
	pods := s.c.cs.CoreV1().Pods(pluginNS)
	ctx := s.ctx(t, 5*time.Minute)
	patch := []byte(`{"metadata":{"finalizers":["example.com/dummy"]}}`)
	if _, err := pods.Patch(ctx, old[0].name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	s.setImage(t, auditDS, auditImage("1.0.0"))
	newPod := s.waitDaemonSet(t, auditDS, auditImage("1.0.0"), rolloutMax)
	if !s.w.waitUntil(rolloutMax, func() bool { r := s.w.pods[old[0].uid]; return r != nil && !r.deletingAt.IsZero() }) {
		t.Fatalf("old pod %s never got its deletion", old[0].name)
	}
	// The old pod stays Terminating: for at least 60 s, and until five
	// workload containers started meanwhile are stamped by the new pod,
	// the new pod must own and the old pod must stay.
	sg, err := signer("audit")
	if err != nil {
		t.Fatal(err)
	}
	holdFrom := time.Now()
	served := 0
	byInstance := map[string]int{}
	for {
		r := s.w.byName(pluginNS, old[0].name)
		if !r.goneAt.IsZero() {
			t.Fatalf("old pod %s gone while its finalizer holds it", old[0].name)
		}
		if owner := s.mon.current(); owner != newPod.name && owner != "" {
			t.Fatalf("owner is %s while the old pod is Terminating, want %s", owner, newPod.name)
		}
		served, byInstance = 0, map[string]int{}
		for _, p := range s.load.snapshot() {
			if p.spec == nil || p.runningAt.Before(holdFrom) {
				continue
			}
			st, err := sg.Verify(p.ctrID, p.spec.Annotations)
			if err != nil {
				byInstance["invalid: "+err.Error()]++
				continue
			}
			byInstance[st.Instance]++
			if st.Instance == newPod.name {
				served++
			}
		}
		if time.Since(holdFrom) >= 60*time.Second && served >= 5 {
			break
		}
		if time.Since(holdFrom) > 4*time.Minute {
			t.Fatalf("after %v: %d workload containers stamped by the new owner %s (stamps by instance %v)",
				time.Since(holdFrom).Round(time.Second), served, newPod.name, byInstance)
		}
		time.Sleep(500 * time.Millisecond)
	}
	terminating := time.Since(s.w.byName(pluginNS, old[0].name).deletingAt)
	// The upgrade ran under the workload too, at the rate every rollout
	// must see.
	now := time.Now()
	created, deleted := rate(s.load.snapshot(), t0, now), deleteRate(s.load.snapshot(), t0, now)
	if created < minLoadRate {
		t.Errorf("seed 000: workload created %.2f pods/s during the upgrade, want >= %.1f", created, minLoadRate)
	}
	t.Logf("seed 000: old pod %s Terminating for %v, new pod %s owner meanwhile; %d workload containers stamped by it; longest without owner %s; workload %.2f pods/s created, %.2f deleted",
		old[0].name, terminating.Round(time.Second), newPod.name, served, ms(s.mon.longestGap(t0, now)), created, deleted)
	if _, err := pods.Patch(ctx, old[0].name, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if !s.w.waitUntil(3*time.Minute, func() bool { r := s.w.pods[old[0].uid]; return r != nil && !r.goneAt.IsZero() }) {
		t.Fatalf("old pod %s not gone after its finalizer was removed", old[0].name)
	}
	if owner := s.mon.current(); owner != newPod.name {
		t.Errorf("owner %q after the old pod went, want %s", owner, newPod.name)
	}
}

// handoverFiles returns what the handover directory holds for the plugin
// that a running instance uses: the owner name, the stamp key, the lock,
// and each live instance's socket, with their inode numbers.
func handoverFiles(plugin string) map[string]uint64 {
	out := map[string]uint64{}
	dir := filepath.Join(hostHandoverDir, plugin)
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out[p] = st.Ino
		}
		return nil
	})
	return out
}

// seed002: the DaemonSet copied under another name runs a second pod on
// the node; deleting the copy (and, the other way round, the original)
// leaves the plugin served, exactly once, and removes nothing from the
// handover directory that the surviving pod uses.
func (s *suite) seed002(t *testing.T) {
	ctx := s.ctx(t, 5*time.Minute)
	dss := s.c.cs.AppsV1().DaemonSets(pluginNS)
	copyDS := func(from, to string) {
		t.Helper()
		orig, err := dss.Get(ctx, from, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cp := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: to, Namespace: pluginNS, Labels: orig.Labels, Annotations: orig.Annotations},
			Spec:       *orig.Spec.DeepCopy(),
		}
		if _, err := dss.Create(ctx, cp, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	image := s.livePods(auditDS)[0].image
	for _, c := range []struct{ survivor, deleted string }{
		{auditDS, "nri-audit-copy"},
		{"nri-audit-copy", auditDS},
	} {
		copyDS(auditDS, "nri-audit-copy")
		// Both pods run on the node; the newest owns.
		s.waitDaemonSet(t, "nri-audit-copy", image, 3*time.Minute)
		if got := s.livePods(auditDS); len(got) != 1 || got[0].runningAt.IsZero() {
			t.Fatalf("original DaemonSet's pod not running beside the copy's: %+v", got)
		}
		survivor := s.livePods(c.survivor)[0]
		victim := s.livePods(c.deleted)[0]
		t0 := time.Now()
		before := handoverFiles("audit")
		s.c.progress("seed 002: deleting DaemonSet %s (pod %s; owner %s)", c.deleted, victim.name, s.mon.current())
		if err := dss.Delete(ctx, c.deleted, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if !s.w.waitUntil(2*time.Minute, func() bool { r := s.w.pods[victim.uid]; return r != nil && !r.goneAt.IsZero() }) {
			t.Fatalf("pod %s of the deleted DaemonSet %s not gone", victim.name, c.deleted)
		}
		// The survivor owns (it took back if it had yielded to the victim).
		if !s.w.waitUntil(30*time.Second, func() bool { return s.mon.current() == survivor.name }) {
			t.Fatalf("owner is %q after %s went, want the survivor %s", s.mon.current(), c.deleted, survivor.name)
		}
		after := handoverFiles("audit")
		if _, err := os.Stat(filepath.Join(hostHandoverDir, "audit", "owner.sock")); err != nil {
			t.Errorf("seed 002 (%s deleted): owner name gone: %v", c.deleted, err)
		}
		for p, ino := range before {
			if strings.Contains(p, victim.name) || filepath.Base(p) == "owner.sock" {
				// The deleted pod's own socket; the owner name, which a
				// take-back publishes anew (it must lead to the survivor,
				// checked above).
				continue
			}
			if after[p] != ino {
				t.Errorf("seed 002 (%s deleted): %s removed or replaced (inode %d -> %d) while %s used it", c.deleted, p, ino, after[p], survivor.name)
			}
		}
		if out, ok := s.status("audit"); !ok || !strings.Contains(out, survivor.name) {
			t.Errorf("status after %s deleted:\n%s", c.deleted, out)
		}
		now := time.Now()
		pods := s.load.snapshot()
		t.Logf("seed 002: %s deleted (pod %s), %s's pod %s owns; longest without owner %s; workload %.2f pods/s created, %.2f deleted in %s",
			c.deleted, victim.name, c.survivor, survivor.name, ms(s.mon.longestGap(t0, now)), rate(pods, t0, now),
			deleteRate(pods, t0, now), ms(now.Sub(t0)))
	}
	// Put the shipped name back: copy the copy to nri-audit, delete the copy.
	copyDS("nri-audit-copy", auditDS)
	s.waitDaemonSet(t, auditDS, image, 3*time.Minute)
	if err := dss.Delete(ctx, "nri-audit-copy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !s.w.waitUntil(2*time.Minute, func() bool {
		for _, r := range s.w.pods {
			if r.ns == pluginNS && r.owner == "nri-audit-copy" && r.goneAt.IsZero() {
				return false
			}
		}
		return true
	}) {
		t.Fatal("copy's pod not gone")
	}
}

// everyEventOnce stops the workload, waits for the kubelet to remove every
// container and sandbox, and checks the ledger and the stamps: every
// workload container stamped exactly once, every event of every workload
// pod acted on exactly once, no pod that failed to start.
func (s *suite) everyEventOnce(t *testing.T) {
	load := s.load
	load.stop()
	pods := load.snapshot()
	s.load = nil
	failed := 0
	for _, p := range pods {
		if p.failure != "" {
			if failed++; failed <= 10 {
				t.Errorf("workload pod %s: %s", p.name, p.failure)
			}
		}
	}
	sg, err := signer("audit")
	if err != nil {
		t.Fatal(err)
	}
	byVersion := map[string]int{}
	bad := 0
	for _, p := range pods {
		if p.failure != "" {
			continue
		}
		var problem string
		switch {
		case p.specErr != nil:
			problem = "cannot read its spec: " + p.specErr.Error()
		default:
			st, err := sg.Verify(p.ctrID, p.spec.Annotations)
			vals := p.spec.env(auditEnv)
			switch {
			case err != nil:
				problem = "no valid stamp: " + err.Error()
			case len(vals) != 1:
				problem = fmt.Sprintf("%s set %d times", auditEnv, len(vals))
			case vals[0] != st.Version.Original():
				problem = fmt.Sprintf("stamped by %s but %s=%s", st.Version.Original(), auditEnv, vals[0])
			default:
				byVersion[st.Version.Original()]++
			}
		}
		if problem != "" {
			if bad++; bad <= 10 {
				t.Errorf("workload container %s (pod %s): %s", p.ctrID, p.name, problem)
			}
		}
	}
	expected := expectedEvents(pods)
	var rep ledgerCheck
	// The kubelet removes dead containers at once and sandboxes of deleted
	// pods in its garbage collection, once a minute.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ledger, err := readLedger(s.ledgerOff)
		if err != nil {
			t.Fatal(err)
		}
		rep = checkLedger(ledger, expected)
		if len(rep.missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	sum := load.summary()
	s.loadSum = &sum
	t.Logf("workload: %s; %d failed; containers stamped by version %v; ledger: %s", sum, failed, byVersion, rep)
	if len(rep.missing) > 0 || len(rep.duplicates) > 0 {
		t.Errorf("ledger: missing %v\nduplicated %v", first(rep.missing, 10), first(rep.duplicates, 10))
		s.explainMissing(t, pods, rep.missing)
	}
	for _, w := range s.windows {
		s.during = append(s.during, startLatencies(pods, w[0], w[1])...)
	}
}

// checkProbeEvents fails for any probe failure the kubelet reported on a
// plugin pod that was neither a standby nor being deleted.
func (s *suite) checkProbeEvents(t *testing.T) {
	t.Helper()
	evs, err := s.c.cs.CoreV1().Events(pluginNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason != "Unhealthy" {
			continue
		}
		msg := strings.TrimSpace(e.Message)
		rec := s.w.byName(pluginNS, e.InvolvedObject.Name)
		retiring := rec != nil && !rec.deletingAt.IsZero() && !e.LastTimestamp.Time.Before(rec.deletingAt.Truncate(time.Second))
		standby := strings.Contains(msg, "standby")
		// A pod that yielded to a newer one and stays, retired, as its
		// fallback (seed 002: the original DaemonSet's pod beside the
		// copy's) is retiring too, though nobody deletes it.
		if strings.Contains(msg, "not ready: retired: yielded to ") {
			retiring = true
		}
		// An owner whose successor has claimed (owner.sock leads to it)
		// still says owner until its next event, at which it retires and
		// turns a Ready fallback; the probe says "superseded" meanwhile.
		// One such failure is below the manifests' failureThreshold (2):
		// that the pod's Ready condition held is what rollout checks (run
		// 2 of 2026-12-04 saw one, on the old pod of a rollout, at load 8).
		if strings.Contains(msg, "not ready: superseded: ") {
			retiring = true
		}
		// A pod being deleted: its instance exits, and the kubelet cancels
		// the probes that run while it kills the container.
		canceled := strings.Contains(msg, "probe errored") && strings.Contains(msg, "context canceled")
		readiness := strings.HasPrefix(msg, "Readiness probe")
		if !(readiness && (standby || retiring) || canceled && retiring) {
			t.Errorf("pod %s: %s x%d: %q (standby %v, retiring %v)", e.InvolvedObject.Name, e.Reason, e.Count, e.Message, standby, retiring)
		}
	}
}

// report prints the figures docs/benchmarks.md and deploy/README.md quote.
func (s *suite) report(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| rollout | image change -> new pod Ready | -> old pod deleted | -> old pod gone | old kept after new Ready | longest without owner | workload pods/s created / deleted |\n|---|---|---|---|---|---|---|\n")
	for _, r := range s.rollouts {
		fmt.Fprintf(&b, "| %s: %s -> %s | %s | %s | %s | %s | %s | %.2f / %.2f |\n", r.name, shortImage(r.from), shortImage(r.to),
			ms(r.newReady), ms(r.oldDel), ms(r.oldGone), ms(r.keptAfterReady), ms(r.noOwner), r.loadRate, r.loadDeleted)
	}
	fmt.Fprintf(&b, "\nworkload pod start (API create -> container running, seen by watch): no rollout %s; during rollouts %s\n",
		latencySummary(s.baseline), latencySummary(s.during))
	if s.loadSum != nil {
		fmt.Fprintf(&b, "workload: %s\n", s.loadSum)
	}
	b.WriteString(criTable(s.criBase, s.criDuring))
	t.Log(b.String())
	if p := os.Getenv("NRI_HANDOVER_K8S_REPORT"); p != "" {
		_ = os.WriteFile(p, []byte(b.String()), 0o644)
	}
}

// pluginOf returns the NRI plugin name a DaemonSet of the suite runs.
func pluginOf(ds string) string {
	if strings.Contains(ds, "versioned") {
		return "versioned"
	}
	return "audit"
}

func shortImage(img string) string {
	if i := strings.LastIndex(img, "/"); i >= 0 {
		return img[i+1:]
	}
	return img
}

// explainMissing logs, for the events no instance acted on, the workload
// pod each belongs to and its times, and the times the node had no owner,
// all as times since the suite started (the "k8s [mm:ss]" of the progress
// lines): which window lost them.
func (s *suite) explainMissing(t *testing.T, pods []loadPod, missing []string) {
	t.Helper()
	at := func(tm time.Time) string {
		if tm.IsZero() {
			return "-"
		}
		d := tm.Sub(s.c.start)
		return fmt.Sprintf("%02d:%06.3f", int(d.Minutes()), d.Seconds()-60*float64(int(d.Minutes())))
	}
	byID := map[string]*loadPod{}
	for i := range pods {
		byID[pods[i].ctrID] = &pods[i]
		if pods[i].sandboxID != "" {
			byID[pods[i].sandboxID] = &pods[i]
		}
	}
	for _, m := range first(missing, 30) {
		ev, id, _ := strings.Cut(m, " ")
		if p := byID[id]; p != nil {
			t.Logf("missing %s of pod %s: created %s, running %s, deleted %s, gone %s", ev, p.name, at(p.createdAt),
				at(p.runningAt), at(p.deleteAt), at(p.goneAt))
		} else {
			t.Logf("missing %s", m)
		}
	}
	if s.mon != nil {
		s.mon.mu.Lock()
		gaps := append([]ownerGap(nil), s.mon.gaps...)
		s.mon.mu.Unlock()
		for _, g := range gaps {
			if g.dur >= 50*time.Millisecond {
				t.Logf("no owner from %s for %s", at(g.start), ms(g.dur))
			}
		}
	}
}
