//go:build k8s

package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/stamp"
)

// podRecord is what the API said about one pod over time, with the local
// time at which the watch delivered each change (the API's own timestamps
// have one-second resolution).
type podRecord struct {
	ns, name, uid string
	owner         string // the controller's name (the DaemonSet)
	labels        map[string]string
	image         string
	node          string
	firstSeen     time.Time
	readyAt       time.Time // first time Ready=True
	readySince    time.Time // the API's lastTransitionTime of that Ready=True (whole seconds)
	unreadyAt     time.Time // first time Ready went back to False after readyAt
	deletingAt    time.Time // deletionTimestamp first seen
	goneAt        time.Time
	runningAt     time.Time // container running first seen
	containerID   string    // without the runtime prefix
	restarts      int32
	waiting       map[string]string // container waiting reasons seen -> message
	terminated    map[string]string // container termination reasons seen -> message
	phase         corev1.PodPhase
	finalizers    []string
}

// watcher records every pod's transitions as the API reports them.
type watcher struct {
	mu   sync.Mutex
	pods map[string]*podRecord // by uid
	stop chan struct{}
	cond *sync.Cond
}

func (c *cluster) watchPods() (*watcher, error) {
	w := &watcher{pods: map[string]*podRecord{}, stop: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	f := informers.NewSharedInformerFactory(c.cs, 0)
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.update(o.(*corev1.Pod), false) },
		UpdateFunc: func(_, o any) { w.update(o.(*corev1.Pod), false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				w.update(p, true)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	f.Start(w.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync")
	}
	return w, nil
}

func (w *watcher) close() { close(w.stop) }

func (w *watcher) update(p *corev1.Pod, gone bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.cond.Broadcast()
	r := w.pods[string(p.UID)]
	if r == nil {
		r = &podRecord{ns: p.Namespace, name: p.Name, uid: string(p.UID), labels: p.Labels, firstSeen: now,
			waiting: map[string]string{}, terminated: map[string]string{}}
		if len(p.Spec.Containers) > 0 {
			r.image = p.Spec.Containers[0].Image
		}
		w.pods[r.uid] = r
	}
	r.node = p.Spec.NodeName
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			r.owner = o.Name
		}
	}
	r.phase = p.Status.Phase
	r.finalizers = p.Finalizers
	if gone && r.goneAt.IsZero() {
		r.goneAt = now
	}
	if p.DeletionTimestamp != nil && r.deletingAt.IsZero() {
		r.deletingAt = now
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type != corev1.PodReady {
			continue
		}
		switch {
		case cond.Status == corev1.ConditionTrue && r.readyAt.IsZero():
			r.readyAt, r.readySince = now, cond.LastTransitionTime.Time
		case cond.Status != corev1.ConditionTrue && !r.readyAt.IsZero() && r.unreadyAt.IsZero():
			r.unreadyAt = now
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		r.restarts = cs.RestartCount
		if id := cs.ContainerID; id != "" {
			if i := strings.Index(id, "://"); i >= 0 {
				id = id[i+3:]
			}
			if r.containerID == "" {
				r.containerID = id
			}
		}
		if cs.State.Running != nil && r.runningAt.IsZero() {
			r.runningAt = now
		}
		if s := cs.State.Waiting; s != nil && s.Reason != "" && s.Reason != "ContainerCreating" {
			r.waiting[s.Reason] = s.Message
		}
		if s := cs.State.Terminated; s != nil {
			r.terminated[s.Reason] = s.Message
		}
		if s := cs.LastTerminationState.Terminated; s != nil {
			r.terminated[s.Reason] = s.Message
		}
	}
}

// snapshot returns copies of the records of one namespace, oldest first.
func (w *watcher) snapshot(ns string) []podRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []podRecord
	for _, r := range w.pods {
		if r.ns == ns {
			c := *r
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].firstSeen.Before(out[j].firstSeen) })
	return out
}

func (w *watcher) byName(ns, name string) *podRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	last := w.byNameLocked(ns, name)
	if last == nil {
		return nil
	}
	c := *last
	return &c
}

// byNameLocked returns the newest record of that name; call with mu held.
func (w *watcher) byNameLocked(ns, name string) *podRecord {
	var last *podRecord
	for _, r := range w.pods {
		if r.ns == ns && r.name == name && (last == nil || r.firstSeen.After(last.firstSeen)) {
			last = r
		}
	}
	return last
}

// waitUntil waits until cond holds on the records (called with the lock
// held) or timeout.
func (w *watcher) waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		w.cond.Wait()
	}
	return true
}

// ownerMonitor asks a plugin's owner name on the node, every few
// milliseconds, who answers as owner: the gaps are the times the node had
// no owner.
type ownerMonitor struct {
	plugin string
	mu     sync.Mutex
	owner  string // current owner id, "" for none
	since  time.Time
	gaps   []ownerGap
	owners []string // owners in turn
	stop   chan struct{}
	done   chan struct{}
}

type ownerGap struct {
	start time.Time
	dur   time.Duration
}

func startOwnerMonitor(plugin string) *ownerMonitor {
	m := &ownerMonitor{plugin: plugin, since: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *ownerMonitor) run() {
	defer close(m.done)
	sock := filepath.Join(hostHandoverDir, m.plugin, "owner.sock")
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		id := askOwner(sock)
		now := time.Now()
		m.mu.Lock()
		if id != m.owner {
			if m.owner == "" && len(m.owners) > 0 {
				m.gaps = append(m.gaps, ownerGap{m.since, now.Sub(m.since)})
			}
			if id != "" {
				m.owners = append(m.owners, id)
			}
			m.owner, m.since = id, now
		}
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// askOwner returns the id of the instance that answers on sock as owner.
func askOwner(sock string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl, err := protocol.Dial(ctx, sock)
	if err != nil {
		return ""
	}
	defer cl.Close()
	st, err := cl.Status(ctx, &hapi.StatusRequest{})
	if err != nil || st.GetRole() != hapi.Role_ROLE_OWNER {
		return ""
	}
	return st.GetInstance().GetId()
}

// gapsBetween returns the longest ownerless time within [from, to] and
// the current owner.
func (m *ownerMonitor) longestGap(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var longest time.Duration
	gaps := append([]ownerGap(nil), m.gaps...)
	if m.owner == "" && len(m.owners) > 0 {
		gaps = append(gaps, ownerGap{m.since, time.Since(m.since)})
	}
	for _, g := range gaps {
		if g.start.Add(g.dur).After(from) && g.start.Before(to) {
			longest = max(longest, g.dur)
		}
	}
	return longest
}

func (m *ownerMonitor) current() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owner
}

func (m *ownerMonitor) close() {
	close(m.stop)
	<-m.done
}

// ledgerEntry is one line of the audit ledger.
type ledgerEntry struct {
	event, object, instance, version string
}

// readLedger returns the ledger's lines from byte offset on.
func readLedger(offset int64) ([]ledgerEntry, error) {
	b, err := os.ReadFile(filepath.Join(hostLedgerDir, "ledger.log"))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) < offset {
		return nil, fmt.Errorf("ledger shrank below offset %d", offset)
	}
	var out []ledgerEntry
	for _, l := range strings.Split(string(b[offset:]), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("malformed ledger line %q", l)
		}
		out = append(out, ledgerEntry{f[0], f[1], f[2], f[3]})
	}
	return out, nil
}

func ledgerSize() int64 {
	fi, err := os.Stat(filepath.Join(hostLedgerDir, "ledger.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ctrSpec is what the suite reads of a container's OCI spec.
type ctrSpec struct {
	Annotations map[string]string `json:"annotations"`
	Process     struct {
		Env []string `json:"env"`
	} `json:"process"`
	Linux struct {
		CgroupsPath string `json:"cgroupsPath"`
		Resources   struct {
			CPU *struct {
				Quota  int64  `json:"quota"`
				Period uint64 `json:"period"`
			} `json:"cpu"`
		} `json:"resources"`
	} `json:"linux"`
}

func (s *ctrSpec) env(name string) []string {
	var vals []string
	for _, kv := range s.Process.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			vals = append(vals, v)
		}
	}
	return vals
}

// spec reads a container's OCI spec from containerd.
func (c *cluster) spec(id string) (*ctrSpec, error) {
	out, err := c.ctr("containers", "info", id)
	if err != nil {
		return nil, err
	}
	var info struct {
		Spec ctrSpec `json:"Spec"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return nil, fmt.Errorf("container %s info: %w", id, err)
	}
	return &info.Spec, nil
}

// signer verifies the stamps of a plugin with the key in the node's
// handover directory (read, never created).
func signer(plugin string) (*stamp.Signer, error) {
	b, err := os.ReadFile(filepath.Join(hostHandoverDir, plugin, "stamp.key"))
	if err != nil {
		return nil, fmt.Errorf("stamp key: %w", err)
	}
	var k stamp.Key
	if len(b) != len(k) {
		return nil, fmt.Errorf("stamp key has %d bytes", len(b))
	}
	copy(k[:], b)
	return stamp.NewSigner(plugin, k)
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
