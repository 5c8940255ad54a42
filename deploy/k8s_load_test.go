//go:build k8s

package deploy_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	loadNamespace = "nri-load"
	// maxInFlight bounds the workload's pods that exist at once (created
	// and not yet gone from the API). By Little's law the rate it allows is
	// maxInFlight over a pod's time from create to gone (start, loadLife,
	// stop), but the node's CPU sets the rate first: on 2 cores the node
	// completes about 0.4 to 0.6 pods/s whatever the bound (each pod costs
	// two runc runs, a shim, cgroups in every v1 hierarchy and their
	// removal; 44 % of the CPU went to the kernel). More pods in flight only
	// make each one slower: at 100 in flight the load average reached 45,
	// a pod took minutes from create to gone, and a rollout's old pod more
	// than 4 minutes to stop. 24 (with 2 s pods) keeps the node busy and
	// responsive: 1.68 pods/s on an idle 2-core machine (2026-12-02). At
	// 2.5 pods/s asked (2026-12-04, 2 cores) a pod took p50 3.5 s, p90
	// 8.7 s from create to gone; 13 or fewer were in flight during the
	// rollouts (no tick skipped), 40 only while seed 002's deleted owner
	// stopped (the node's CRI calls stall then, containerd issue 14083).
	maxInFlight = 40
	// startMax bounds a workload pod's time from create to running.
	startMax = 4 * time.Minute
)

// loadPod is one pod of the workload and what the suite saw of it.
type loadPod struct {
	name      string
	uid       string
	createdAt time.Time
	runningAt time.Time
	failure   string // why it did not run, or ""
	ctrID     string
	sandboxID string
	spec      *ctrSpec
	specErr   error
	deleteAt  time.Time // the API delete call
	goneAt    time.Time // gone from the API, seen by watch
	deleted   bool
}

// loadGen creates hostNetwork pods through the API at a steady rate; each
// runs its container for a while and is deleted through the API. The
// kubelet drives every container through its whole life cycle (create,
// start, stop, remove) on the node's containerd, so every NRI event the
// plugin sees comes from the real kubelet.
type loadGen struct {
	c        *cluster
	w        *watcher
	interval time.Duration
	life     time.Duration

	mu       sync.Mutex
	pods     []*loadPod
	inFlight int // pods created and not yet gone
	peak     int // the most pods in flight at once
	skipped  int // ticks skipped because maxInFlight pods were in flight
	started  time.Time
	stopped  time.Time
	seq      atomic.Int64
	stopC    chan struct{}
	wg       sync.WaitGroup
}

// ensureNamespace creates a namespace (if it does not exist) and waits for
// its default ServiceAccount, which its pods need.
func (c *cluster) ensureNamespace(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return c.waitFor("ServiceAccount default in "+name, nil, 30*time.Second, func() error {
		_, err := c.cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *cluster) startLoad(w *watcher, perSecond float64, life time.Duration) (*loadGen, error) {
	if err := c.ensureNamespace(loadNamespace); err != nil {
		return nil, err
	}
	l := &loadGen{c: c, w: w, interval: time.Duration(float64(time.Second) / perSecond), life: life,
		stopC: make(chan struct{}), started: time.Now()}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

func (l *loadGen) run() {
	defer l.wg.Done()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	report := time.NewTicker(30 * time.Second)
	defer report.Stop()
	var lastN, lastSkipped int
	for {
		select {
		case <-l.stopC:
			return
		case <-report.C:
			l.mu.Lock()
			n, skipped, inFlight := len(l.pods), l.skipped, l.inFlight
			l.mu.Unlock()
			l.c.progress("workload: %d pods created (%.2f pods/s in the last 30 s), %d in flight, %d ticks skipped", n,
				float64(n-lastN)/30, inFlight, skipped-lastSkipped)
			lastN, lastSkipped = n, skipped
			continue
		case <-t.C:
		}
		l.mu.Lock()
		if l.inFlight >= maxInFlight {
			// The node is behind: skip this tick rather than pile up pods
			// (the kubelet takes at most 110). The rate achieved is reported.
			l.skipped++
			l.mu.Unlock()
			continue
		}
		l.inFlight++
		l.peak = max(l.peak, l.inFlight)
		n := l.seq.Add(1)
		p := &loadPod{name: fmt.Sprintf("load-%05d", n)}
		l.pods = append(l.pods, p)
		l.mu.Unlock()
		l.wg.Add(1)
		go l.lifecycle(p)
	}
}

func loadPodSpec(name string) *corev1.Pod {
	grace := int64(5)
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: loadNamespace, Labels: map[string]string{"app": "nri-load"}},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			EnableServiceLinks:            &no,
			AutomountServiceAccountToken:  &no,
			Containers: []corev1.Container{{
				Name: "c", Image: sleepImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// lifecycle creates one pod, waits for its container to run, reads its
// spec from containerd, keeps it for the pod's life and deletes it.
func (l *loadGen) lifecycle(p *loadPod) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
	}()
	cs := l.c.cs.CoreV1().Pods(loadNamespace)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	p.createdAt = time.Now()
	created, err := cs.Create(ctx, loadPodSpec(p.name), metav1.CreateOptions{})
	if err != nil {
		l.fail(p, "create: "+err.Error())
		return
	}
	p.uid = string(created.UID)
	var rec *podRecord
	// Generous: under a load average of 50 from other jobs a pod took more
	// than 90 s to start (and started: slow is not failed).
	ok := l.w.waitUntil(startMax, func() bool {
		rec = l.w.pods[p.uid]
		if rec == nil {
			return false
		}
		return !rec.runningAt.IsZero() || rec.phase == corev1.PodFailed || len(rec.terminated) > 0 ||
			len(rec.waiting) > 0 || !rec.goneAt.IsZero()
	})
	l.w.mu.Lock()
	var snap podRecord
	if rec != nil {
		snap = *rec
		snap.waiting = map[string]string{}
		for k, v := range rec.waiting {
			snap.waiting[k] = v
		}
	}
	l.w.mu.Unlock()
	switch {
	case !ok:
		l.fail(p, fmt.Sprintf("not running after %v", startMax))
	case snap.runningAt.IsZero():
		l.fail(p, fmt.Sprintf("did not run: phase %s, waiting %v, terminated %v", snap.phase, snap.waiting, snap.terminated))
	default:
		l.mu.Lock()
		p.runningAt, p.ctrID = snap.runningAt, snap.containerID
		l.mu.Unlock()
		sp, err := l.c.spec(snap.containerID)
		l.mu.Lock()
		p.spec, p.specErr = sp, err
		if sp != nil {
			p.sandboxID = sp.Annotations["io.kubernetes.cri.sandbox-id"]
		}
		l.mu.Unlock()
		// The pod's life: the workload keeps it this long, then deletes it.
		select {
		case <-time.After(l.life):
		case <-l.stopC:
		}
	}
	l.mu.Lock()
	p.deleteAt = time.Now()
	l.mu.Unlock()
	if err := cs.Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		l.fail(p, "delete: "+err.Error())
		return
	}
	var gone time.Time
	l.w.waitUntil(2*time.Minute, func() bool {
		r := l.w.pods[p.uid]
		if r != nil && !r.goneAt.IsZero() {
			gone = r.goneAt
		}
		return r == nil || !r.goneAt.IsZero()
	})
	l.mu.Lock()
	p.deleted, p.goneAt = true, gone
	l.mu.Unlock()
}

func (l *loadGen) fail(p *loadPod, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.failure == "" {
		p.failure = why
	}
}

// stop ends the workload: no more pods, the running ones deleted, and
// waits until the API has none left.
func (l *loadGen) stop() {
	l.mu.Lock()
	l.stopped = time.Now()
	l.mu.Unlock()
	close(l.stopC)
	l.wg.Wait()
}

// loadSummary is what the workload achieved and where its pods' time went.
type loadSummary struct {
	pods, skipped, peak     int
	rate                    float64 // pods created per second, first create to stop
	start, life, stop, full []time.Duration
}

func (l *loadGen) summary() loadSummary {
	pods := l.snapshot()
	l.mu.Lock()
	s := loadSummary{pods: len(pods), skipped: l.skipped, peak: l.peak}
	end := l.stopped
	l.mu.Unlock()
	if end.IsZero() {
		end = time.Now()
	}
	if len(pods) > 0 {
		s.rate = rate(pods, pods[0].createdAt, end)
	}
	for _, p := range pods {
		if p.runningAt.IsZero() || p.goneAt.IsZero() {
			continue
		}
		s.start = append(s.start, p.runningAt.Sub(p.createdAt))
		s.life = append(s.life, p.deleteAt.Sub(p.runningAt))
		s.stop = append(s.stop, p.goneAt.Sub(p.deleteAt))
		s.full = append(s.full, p.goneAt.Sub(p.createdAt))
	}
	return s
}

func (s loadSummary) String() string {
	p50 := func(ds []time.Duration) string { return ms(percentile(ds, 50)) }
	p90 := func(ds []time.Duration) string { return ms(percentile(ds, 90)) }
	return fmt.Sprintf("%d pods at %.2f pods/s (%d ticks skipped, at most %d of %d in flight); per pod p50/p90: create -> running %s/%s, running -> delete %s/%s, delete -> gone %s/%s, create -> gone %s/%s",
		s.pods, s.rate, s.skipped, s.peak, maxInFlight, p50(s.start), p90(s.start), p50(s.life), p90(s.life),
		p50(s.stop), p90(s.stop), p50(s.full), p90(s.full))
}

// snapshot returns copies of the pods so far.
func (l *loadGen) snapshot() []loadPod {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]loadPod, len(l.pods))
	for i, p := range l.pods {
		out[i] = *p
	}
	return out
}

// rate returns the pods created per second between from and to: those
// whose create call, made in that time, the API accepted.
func rate(pods []loadPod, from, to time.Time) float64 {
	n := 0
	for _, p := range pods {
		if p.uid != "" && !p.createdAt.Before(from) && p.createdAt.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// deleteRate returns the pods deleted (the API delete call) per second
// between from and to.
func deleteRate(pods []loadPod, from, to time.Time) float64 {
	n := 0
	for _, p := range pods {
		if !p.deleteAt.Before(from) && p.deleteAt.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// skippedTicks returns the ticks skipped so far with maxInFlight pods in
// flight.
func (l *loadGen) skippedTicks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skipped
}

// startLatencies returns, for the pods created within [from, to), the time
// from the API create call to the watch seeing the container running.
func startLatencies(pods []loadPod, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, p := range pods {
		if !p.createdAt.Before(from) && p.createdAt.Before(to) && !p.runningAt.IsZero() {
			out = append(out, p.runningAt.Sub(p.createdAt))
		}
	}
	return out
}

func latencySummary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no pods"
	}
	return fmt.Sprintf("%d pods, p50 %s, p90 %s, p99 %s, max %s", len(ds), ms(percentile(ds, 50)),
		ms(percentile(ds, 90)), ms(percentile(ds, 99)), ms(percentile(ds, 100)))
}

// containerEvents are the NRI events the kubelet's handling of one
// container causes on containerd v2.2, and those of one pod sandbox.
var (
	containerEvents = []string{"CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
		"StopContainer", "RemoveContainer"}
	sandboxEvents = []string{"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"}
)

// expected returns "<event> <id>" for every event the workload's pods
// must have caused.
func expectedEvents(pods []loadPod) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		if p.ctrID == "" {
			continue
		}
		for _, ev := range containerEvents {
			out[ev+" "+p.ctrID] = true
		}
		if p.sandboxID != "" {
			for _, ev := range sandboxEvents {
				out[ev+" "+p.sandboxID] = true
			}
		}
	}
	return out
}

// ledgerCheck compares the ledger with the workload: every expected event
// once, and no event of any object (plugin pods' too) twice.
type ledgerCheck struct {
	expected, recorded    int
	missing, duplicates   []string
	byVersion, byInstance map[string]int
}

func checkLedger(ledger []ledgerEntry, expected map[string]bool) ledgerCheck {
	r := ledgerCheck{expected: len(expected), recorded: len(ledger), byVersion: map[string]int{}, byInstance: map[string]int{}}
	got := map[string]int{}
	for _, e := range ledger {
		got[e.event+" "+e.object]++
		r.byVersion[e.version]++
		r.byInstance[e.instance]++
	}
	for k := range expected {
		if got[k] == 0 {
			r.missing = append(r.missing, k)
		}
	}
	for k, n := range got {
		if n > 1 {
			r.duplicates = append(r.duplicates, fmt.Sprintf("%s x%d", k, n))
		}
	}
	sort.Strings(r.missing)
	sort.Strings(r.duplicates)
	return r
}

func (r ledgerCheck) String() string {
	var vs []string
	for v, n := range r.byVersion {
		vs = append(vs, fmt.Sprintf("%s:%d", v, n))
	}
	sort.Strings(vs)
	return fmt.Sprintf("%d workload events expected, ledger has %d lines (by version %s) from %d instances; %d missing, %d duplicated",
		r.expected, r.recorded, strings.Join(vs, " "), len(r.byInstance), len(r.missing), len(r.duplicates))
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}
