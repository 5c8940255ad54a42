//go:build k8s

package deploy_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// renderDS renders the chart for release with a ci values file and extra
// values on top (as `helm install -f ci/<file> --set ...`) and returns its
// DaemonSet, decoded strictly.
func (s *suite) renderDS(t *testing.T, release, valuesFile string, set map[string]any) *appsv1.DaemonSet {
	t.Helper()
	vals := chartValues(t, valuesFile)
	for k, v := range set {
		m := vals
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = v
	}
	objs, _, err := renderObjects(loadChart(t), release, pluginNS, vals)
	if err != nil {
		t.Fatalf("render %s with %q %v: %v", release, valuesFile, set, err)
	}
	if len(objs.daemonSets) != 1 {
		t.Fatalf("rendering has %d DaemonSets", len(objs.daemonSets))
	}
	if err := s.c.ensureNamespace(pluginNS); err != nil {
		t.Fatal(err)
	}
	for _, sa := range objs.serviceAccounts {
		if _, err := s.c.cs.CoreV1().ServiceAccounts(pluginNS).Create(context.Background(), &sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return &objs.daemonSets[0]
}

// install creates the rendered DaemonSet, as `helm install` does.
func (s *suite) install(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	if _, err := s.c.cs.AppsV1().DaemonSets(pluginNS).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create DaemonSet %s: %v", ds.Name, err)
	}
}

// upgrade replaces the DaemonSet's spec with a new rendering, as `helm
// upgrade` does.
func (s *suite) upgrade(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	dss := s.c.cs.AppsV1().DaemonSets(pluginNS)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := dss.Get(context.Background(), ds.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec = ds.Spec
		cur.Labels = ds.Labels
		_, err = dss.Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("upgrade %s: %v", ds.Name, err)
	}
}

// uninstall deletes a DaemonSet and waits until its pods are gone.
func (s *suite) uninstall(t *testing.T, name string) {
	t.Helper()
	err := s.c.cs.AppsV1().DaemonSets(pluginNS).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if !s.w.waitUntil(2*time.Minute, func() bool {
		for _, r := range s.w.pods {
			if r.ns == pluginNS && r.owner == name && r.goneAt.IsZero() {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("pods of %s not gone", name)
	}
}

// chartMetrics: ci/metrics-values.yaml (audit 2.0.0, metrics on 9102,
// -debug) installs, serves /metrics on the pod's address, and upgrades
// to 1.0.0 and back like the manifests.
func (s *suite) chartMetrics(t *testing.T) {
	s.uninstall(t, auditDS)
	ds := s.renderDS(t, "nri-audit", "ci/metrics-values.yaml", nil)
	s.install(t, ds)
	pod := s.waitDaemonSet(t, ds.Name, auditImage("2.0.0"), 3*time.Minute)
	p, err := s.c.cs.CoreV1().Pods(pluginNS).Get(context.Background(), pod.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Served by the time the pod is Ready; a loaded node may answer one
	// request late (the client gives each 2 s), so ask for up to 30 s.
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, err = httpGet(fmt.Sprintf("http://%s:9102/metrics", p.Status.PodIP))
		if err == nil && strings.Contains(body, "nri_handover_") || time.Now().After(deadline) {
			break
		}
		<-time.After(200 * time.Millisecond) // poll interval
	}
	if err != nil || !strings.Contains(body, "nri_handover_") {
		t.Errorf("metrics on %s:9102: %v\n%s", p.Status.PodIP, err, tail(body, 5))
	}
	for i, v := range []string{"1.0.0", "2.0.0"} {
		name := fmt.Sprintf("chart rollout %d", i+1)
		up := s.renderDS(t, "nri-audit", "ci/metrics-values.yaml", map[string]any{"image.tag": v, "plugin.version": v})
		s.rolloutWith(t, name, ds.Name, auditImage(v), func() { s.upgrade(t, up) })
	}
	s.checkProbeEvents(t)
	s.uninstall(t, ds.Name)
}

// chartNewestVersion: ci/newest-version-values.yaml at 2.0.0, then an
// upgrade to 1.0.0: the new pod stays a standby, not Ready, with the
// reason in its events and conditions; the old pod keeps owning and is
// not deleted. Rolling forward again replaces the standby.
func (s *suite) chartNewestVersion(t *testing.T) {
	v2 := s.renderDS(t, "nri-audit", "ci/newest-version-values.yaml", map[string]any{"image.tag": "2.0.0"})
	s.install(t, v2)
	owner := s.waitDaemonSet(t, v2.Name, auditImage("2.0.0"), 3*time.Minute)
	if !s.w.waitUntil(30*time.Second, func() bool { return s.mon.current() == owner.name }) {
		t.Fatalf("owner %q, want %s", s.mon.current(), owner.name)
	}
	downgradeAt := time.Now()
	s.upgrade(t, s.renderDS(t, "nri-audit", "ci/newest-version-values.yaml", map[string]any{"image.tag": "1.0.0"}))
	var standby podRecord
	if !s.w.waitUntil(3*time.Minute, func() bool {
		for _, r := range s.w.pods {
			// Earlier steps ran 1.0.0 pods of the same name: only a new one.
			if r.owner == v2.Name && r.image == auditImage("1.0.0") && !r.runningAt.IsZero() &&
				r.goneAt.IsZero() && r.firstSeen.After(downgradeAt) {
				standby = *r
				return true
			}
		}
		return false
	}) {
		t.Fatal("no 1.0.0 pod running")
	}
	want := "Readiness probe failed: not ready: standby: version 1.0.0 is older than the owner's 2.0.0 (policy newest-version)"
	var got string
	deadline := time.Now().Add(time.Minute)
	for got == "" && time.Now().Before(deadline) {
		evs, err := s.c.cs.CoreV1().Events(pluginNS).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + standby.name})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == "Unhealthy" && e.Message == want && e.Count >= 2 {
				got = e.Message
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got == "" {
		s.logEvents(t)
		t.Fatalf("no repeated event %q on the standby pod %s", want, standby.name)
	}
	p, err := s.c.cs.CoreV1().Pods(pluginNS).Get(context.Background(), standby.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionFalse {
			t.Errorf("standby pod condition Ready=%s", c.Status)
		}
	}
	if p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("standby restarted %d times (its liveness probe must pass)", p.Status.ContainerStatuses[0].RestartCount)
	}
	if r := s.w.byName(pluginNS, owner.name); !r.deletingAt.IsZero() || !r.unreadyAt.IsZero() {
		t.Errorf("the 2.0.0 owner pod %s was deleted or turned unready under a refused downgrade", owner.name)
	}
	if cur := s.mon.current(); cur != owner.name {
		t.Errorf("owner %q under a refused downgrade, want %s", cur, owner.name)
	}
	t.Logf("newest-version: standby %s not Ready, event %q x>=2; owner %s kept", standby.name, got, owner.name)
	// Roll forward: the standby pod goes, the owner stays.
	s.upgrade(t, v2)
	if !s.w.waitUntil(3*time.Minute, func() bool { r := s.w.pods[standby.uid]; return r != nil && !r.goneAt.IsZero() }) {
		t.Fatal("standby pod not replaced after rolling forward")
	}
	if kept := s.waitDaemonSet(t, v2.Name, auditImage("2.0.0"), 3*time.Minute); kept.name != owner.name {
		t.Errorf("after rolling forward the pod is %s, want the owner %s", kept.name, owner.name)
	}
	s.checkProbeEvents(t)
	s.uninstall(t, v2.Name)
}

// cpuCgroup is the cgroup v1 hierarchy of the cpu controller (the
// kubelet's cgroupfs driver, cgroup v1 on this machine kind).
const cpuCgroup = "/sys/fs/cgroup/cpu"

// chartVersioned: ci/versioned-values.yaml at 1.0.0 creates workload
// containers with tier v1 and CPU quota 50000/50000; after the upgrade to
// 2.0.0 the new pod's Reconcile raises their quota to 100000: its log,
// read through the API, names exactly the containers the API lists, and
// their cgroups on the node say 100000.
func (s *suite) chartVersioned(t *testing.T) {
	v1 := s.renderDS(t, "nri-versioned", "ci/versioned-values.yaml", map[string]any{"image.tag": "1.0.0"})
	s.install(t, v1)
	s.waitDaemonSet(t, v1.Name, versionedImage("1.0.0"), 3*time.Minute)
	var ids []string
	if err := s.c.ensureNamespace(loadNamespace); err != nil {
		t.Fatal(err)
	}
	pods := s.c.cs.CoreV1().Pods(loadNamespace)
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("tier-%d", i)
		if _, err := pods.Create(context.Background(), loadPodSpec(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pods.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("tier-%d", i)
		if !s.w.waitUntil(3*time.Minute, func() bool {
			r := s.w.byNameLocked(loadNamespace, name)
			return r != nil && !r.runningAt.IsZero()
		}) {
			t.Fatalf("pod %s not running", name)
		}
		id := s.w.byName(loadNamespace, name).containerID
		sp, err := s.c.spec(id)
		if err != nil {
			t.Fatal(err)
		}
		if tier := sp.env("VERSIONED_TIER"); len(tier) != 1 || tier[0] != "v1" || sp.Linux.Resources.CPU == nil ||
			sp.Linux.Resources.CPU.Quota != 50000 || sp.Linux.Resources.CPU.Period != 50000 {
			t.Fatalf("container %s of %s: tier %v, cpu %+v; want v1 and quota 50000 per 50000", id, name, tier, sp.Linux.Resources.CPU)
		}
		if got := strings.TrimSpace(readFile(cpuCgroup + sp.Linux.CgroupsPath + "/cpu.cfs_quota_us")); got != "50000" {
			t.Fatalf("container %s: cpu.cfs_quota_us %q on the node, want 50000", id, got)
		}
		ids = append(ids, id)
	}
	v2 := s.renderDS(t, "nri-versioned", "ci/versioned-values.yaml", map[string]any{"image.tag": "2.0.0"})
	newPod := s.rolloutWith(t, "versioned 1.0.0 -> 2.0.0", v1.Name, versionedImage("2.0.0"), func() { s.upgrade(t, v2) }).newPod
	re := regexp.MustCompile(`reconcile: cpu quota 100000 on (\d+) containers of older versions: \[([^\]]*)\]`)
	var logged []string
	deadline := time.Now().Add(30 * time.Second)
	for logged == nil && time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(s.podLog(newPod, false)); m != nil {
			logged = strings.Fields(m[2])
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Besides the workload's, v1 created the new plugin pod's container.
	pluginCtrs := map[string]bool{}
	for _, r := range s.w.snapshot(pluginNS) {
		if r.owner == v1.Name && r.containerID != "" {
			pluginCtrs[r.containerID] = true
		}
	}
	got := map[string]bool{}
	for _, id := range logged {
		got[id] = true
		if !pluginCtrs[id] && !strings.Contains(strings.Join(ids, " "), id) {
			t.Errorf("the new pod's Reconcile updated %s, which is neither a workload container nor a plugin pod's", id)
		}
	}
	for _, id := range ids {
		if !got[id] {
			t.Errorf("the new pod's Reconcile did not update v1's container %s (logged %v)\nlog:\n%s", id, logged, tail(s.podLog(newPod, false), 20))
		}
	}
	for _, id := range ids {
		sp, err := s.c.spec(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(readFile(cpuCgroup + sp.Linux.CgroupsPath + "/cpu.cfs_quota_us")); got != "100000" {
			t.Errorf("container %s: cpu.cfs_quota_us %q on the node after Reconcile, want 100000", id, got)
		}
		if cpu := sp.Linux.Resources.CPU; cpu == nil || cpu.Quota != 100000 || cpu.Period != 50000 {
			t.Errorf("container %s: containerd's spec has cpu %+v after Reconcile, want quota 100000 per 50000", id, cpu)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("versioned: v2's Reconcile raised the CPU quota of v1's containers %v to 100000 (cgroup and spec)", ids)
	s.uninstall(t, v1.Name)
}

// configurationError: a DaemonSet whose plugin cannot start as
// configured (-idx contradicts $NRI_PLUGIN_IDX) crash-loops, and its log
// says why, instead of staying Running and never Ready.
func (s *suite) configurationError(t *testing.T) {
	ds := s.renderDS(t, "broken", "", map[string]any{"plugin.name": "broken", "extraArgs": []any{"-idx=20"}})
	s.install(t, ds)
	var rec podRecord
	if !s.w.waitUntil(2*time.Minute, func() bool {
		for _, r := range s.w.pods {
			if r.owner == ds.Name && r.restarts >= 1 && r.waiting["CrashLoopBackOff"] != "" {
				rec = *r
				return true
			}
		}
		return false
	}) {
		s.dumpPlugins(t)
		t.Fatal("the misconfigured pod does not crash-loop")
	}
	log := s.podLog(rec.name, true)
	if !strings.Contains(log, `conflicts with $NRI_PLUGIN_IDX="10"`) {
		t.Errorf("log of the crash-looping pod does not say why:\n%s", log)
	}
	t.Logf("configuration error: pod %s in CrashLoopBackOff after %d restarts; log: %s", rec.name, rec.restarts, strings.TrimSpace(tail(log, 1)))
	s.uninstall(t, ds.Name)
}

// runtimeRestart: containerd goes away for a moment under a running
// plugin pod; the plugin reconnects, owns again, and is not restarted.
func (s *suite) runtimeRestart(t *testing.T) {
	ds := s.renderDS(t, "nri-audit", "", nil)
	s.install(t, ds)
	pod := s.waitDaemonSet(t, ds.Name, auditImage("1.0.0"), 3*time.Minute)
	t0 := time.Now()
	if err := s.c.restartContainerd(); err != nil {
		t.Fatal(err)
	}
	if !s.w.waitUntil(3*time.Minute, func() bool { return s.mon.current() == pod.name }) {
		t.Fatalf("owner %q after containerd restarted, want %s\n%s", s.mon.current(), pod.name, tail(s.podLog(pod.name, false), 20))
	}
	if r := s.w.byName(pluginNS, pod.name); r.restarts != 0 || !r.deletingAt.IsZero() {
		t.Errorf("plugin pod restarted (%d) or deleted across a containerd restart", r.restarts)
	}
	t.Logf("containerd restarted: %s owned again after %v", pod.name, time.Since(t0).Round(time.Millisecond))
	s.uninstall(t, ds.Name)
}
