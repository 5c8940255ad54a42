package test

// A rollout as Kubernetes plays it, with real processes: the in-process
// runtime (internal/sim, a real NRI unix socket) in the test process, the
// nri-audit sample plugin as separate processes that connect to it, and the
// nri-handover binary as the kubelet's exec probe. The test plays the
// DaemonSet controller (maxSurge: start the new pod, wait until its
// readiness probe passes, delete the old pod) and the kubelet (probes every
// probePeriod, SIGTERM, SIGKILL after the grace period), and checks the
// plugins' shared ledger file against the events the runtime delivered.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/internal/sim"
)

const (
	// probePeriod is the kubelet's periodSeconds, scaled down from its 1 s
	// minimum to keep the test short: probes run at once and then every
	// period, as the kubelet runs them.
	probePeriod = 200 * time.Millisecond
	// probeExecTimeout is the probe's timeoutSeconds: the kubelet gives up
	// on an exec probe that runs longer.
	probeExecTimeout = 2 * time.Second
	// probeAnswerTimeout is what the probe command gives the instance
	// (its --timeout), below probeExecTimeout.
	probeAnswerTimeout = "500ms"
	// gracePeriod is the pod's terminationGracePeriodSeconds, scaled down.
	gracePeriod = time.Second
	// scenarioTimeout bounds each scenario.
	scenarioTimeout = 45 * time.Second
)

// binaries are the commands under test, built once per test run.
type binaries struct{ audit, handover string }

// buildBinaries builds nri-audit and nri-handover into a temporary
// directory, with the race detector if this test binary has it (so the
// build reuses the packages go test compiled, and the plugin processes are
// checked for races too).
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	modRoot, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled() {
		args = append(args, "-race")
	}
	args = append(args, "./sample-plugins/audit/cmd/nri-audit", "./cmd/nri-handover")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = modRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built nri-audit and nri-handover (race %v) in %v", raceEnabled(), time.Since(start).Round(time.Millisecond))
	return binaries{audit: filepath.Join(dir, "nri-audit"), handover: filepath.Join(dir, "nri-handover")}
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// procNode is one node: the runtime, the handover root shared by the
// plugin processes and their ledger file.
type procNode struct {
	t      *testing.T
	bins   binaries
	rt     *sim.Runtime
	root   string
	ledger string
	logs   string

	mu    sync.Mutex
	procs []*proc
}

func newProcNode(t *testing.T, bins binaries, opts sim.Options) *procNode {
	t.Helper()
	rt, err := sim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	if opts.RequestTimeout != 0 {
		// The timeout is process-wide and outlives the runtime.
		t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	}
	// A short path: unix socket paths are limited to 108 bytes.
	root, err := os.MkdirTemp("", "nhp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	tmp := t.TempDir()
	n := &procNode{t: t, bins: bins, rt: rt, root: root, ledger: filepath.Join(tmp, "ledger"), logs: tmp}
	// Registered before any process is started, so it runs after they
	// have all been killed: their logs are complete.
	t.Cleanup(n.dumpLogsOnFailure)
	return n
}

// proc is one plugin process (one pod of the DaemonSet).
type proc struct {
	id, version string
	cmd         *exec.Cmd
	log         string
	done        chan struct{} // closed when the process has exited
	state       *os.ProcessState
}

// startPlugin starts an nri-audit process, as the kubelet starts a pod.
func (n *procNode) startPlugin(id, ver string, extra ...string) *proc {
	n.t.Helper()
	args := append([]string{
		"-name", "audit", "-idx", "10", "-nri-socket", n.rt.SocketPath(), "-handover-dir", n.root,
		"-instance", id, "-version", ver, "-ledger", n.ledger,
	}, extra...)
	p := &proc{id: id, version: ver, log: filepath.Join(n.logs, id+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		n.t.Fatal(err)
	}
	p.cmd = exec.Command(n.bins.audit, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = childEnv()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		n.t.Fatalf("start %s: %v", id, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		logf.Close()
		close(p.done)
	}()
	n.mu.Lock()
	n.procs = append(n.procs, p)
	n.mu.Unlock()
	n.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill() // also ends a stopped process
			<-p.done
		}
	})
	return p
}

// childEnv is the test's environment without the variables the plugins
// and the probe would read instead of their flags. A race-enabled binary
// sleeps 1 s at exit by default (GORACE atexit_sleep_ms), which would add
// a second to every probe and every pod stop; 50 ms is enough here.
func childEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=50"
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NRI_HANDOVER_") || strings.HasPrefix(kv, "NRI_PLUGIN_") {
			continue
		}
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			gorace = strings.TrimSpace(v + " " + gorace)
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GORACE="+gorace)
}

func (n *procNode) dumpLogsOnFailure() {
	if !n.t.Failed() && os.Getenv("NHP_LOGS") == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.procs {
		b, _ := os.ReadFile(p.log)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 80 {
			lines = append([]string{"..."}, lines[len(lines)-80:]...)
		}
		n.t.Logf("log of %s (%s):\n%s", p.id, p.version, strings.Join(lines, "\n"))
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.id, sig, err)
	}
}

// wait waits for the process to exit and returns how it ended.
func (p *proc) wait(ctx context.Context, t *testing.T) *os.ProcessState {
	t.Helper()
	select {
	case <-p.done:
		return p.state
	case <-ctx.Done():
		t.Fatalf("%s did not exit: %v", p.id, ctx.Err())
		return nil
	}
}

// waitStopped blocks until the kernel has stopped the process (SIGSTOP
// took effect), without reaping anything.
func (p *proc) waitStopped(ctx context.Context, t *testing.T) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		var info unix.Siginfo
		errc <- unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("%s: waiting for it to stop: %v", p.id, err)
		}
	case <-ctx.Done():
		t.Fatalf("%s did not stop: %v", p.id, ctx.Err())
	}
}

// run runs the nri-handover binary with args, bounded as a kubelet exec
// probe is, and returns its exit code and output.
func (n *procNode) run(ctx context.Context, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, probeExecTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bins.handover, args...)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case ctx.Err() != nil:
		return -1, fmt.Sprintf("timed out after %v: %s", probeExecTimeout, out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	n.t.Fatalf("nri-handover %v: %v", args, err)
	return -1, ""
}

// probe runs `nri-handover probe kind` for an instance, as the pod's exec
// probe does.
func (n *procNode) probe(ctx context.Context, kind, id string) (int, string) {
	code, out := n.run(ctx, "probe", kind, "--dir", n.root, "--plugin", "audit", "--instance", id,
		"--timeout", probeAnswerTimeout)
	return code, strings.TrimSpace(out)
}

// waitProbe runs the probe every probePeriod, as the kubelet does, until
// it succeeds; it fails the test if the process exits first.
func (n *procNode) waitProbe(ctx context.Context, kind string, p *proc) string {
	n.t.Helper()
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	var last string
	for {
		code, line := n.probe(ctx, kind, p.id)
		if code == 0 {
			return line
		}
		last = line
		select {
		case <-tick.C:
		case <-p.done:
			n.t.Fatalf("%s exited (%v) while waiting for its %s probe; last: %s", p.id, p.state, kind, last)
		case <-ctx.Done():
			n.t.Fatalf("%s: %s probe never passed: %s", p.id, kind, last)
		}
	}
}

// stream runs pod lifecycles (two containers each) until finished.
type stream struct {
	rt       *sim.Runtime
	stop     atomic.Bool
	wg       sync.WaitGroup
	progress chan struct{}
	mu       sync.Mutex
	errs     []string
}

func (n *procNode) startStream(ctx context.Context, workers int) *stream {
	s := &stream{rt: n.rt, progress: make(chan struct{}, 1)}
	for w := 0; w < workers; w++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for i := 0; !s.stop.Load() && ctx.Err() == nil; i++ {
				if err := n.rt.Lifecycle(ctx, fmt.Sprintf("w%d-%d", w, i), 2); err != nil {
					s.mu.Lock()
					if len(s.errs) < 20 {
						s.errs = append(s.errs, err.Error())
					}
					s.mu.Unlock()
				}
				select {
				case s.progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	n.t.Cleanup(s.finish)
	return s
}

// waitEvents waits, on the workers' progress, until the runtime has
// delivered at least count events.
func (s *stream) waitEvents(ctx context.Context, t *testing.T, count int) {
	t.Helper()
	for s.rt.Stats().Events < count {
		select {
		case <-s.progress:
		case <-ctx.Done():
			t.Fatalf("waiting for %d events (have %d): %v", count, s.rt.Stats().Events, ctx.Err())
		}
	}
}

// finish stops the workers after their current lifecycle and returns the
// lifecycle errors.
func (s *stream) finish() {
	s.stop.Store(true)
	s.wg.Wait()
}

func (s *stream) errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// actor is one act recorded in the ledger file.
type actor struct{ instance, version string }

// readLedger parses the plugins' ledger file: "<event> <object> <instance>
// <version>" per acted event.
func (n *procNode) readLedger(t *testing.T) (map[sim.EventKey][]actor, *sim.Ledger) {
	t.Helper()
	f, err := os.Open(n.ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acts := map[sim.EventKey][]actor{}
	l := sim.NewLedger()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			t.Fatalf("malformed ledger line %q", sc.Text())
		}
		k := sim.EventKey{Event: sim.Event(fs[0]), ID: fs[1]}
		acts[k] = append(acts[k], actor{fs[2], fs[3]})
		l.Record(k.Event, k.ID, fs[2], fs[3])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return acts, l
}

// attribution is who acted on each delivered event, in delivery order.
type attribution struct {
	log    []sim.EventKey
	actors [][]actor
}

// attribute pairs the runtime's delivery log with the ledger. Every event
// of the workload is delivered once per object, so an act belongs to
// exactly one delivery.
func (n *procNode) attribute(t *testing.T) attribution {
	t.Helper()
	acts, ledger := n.readLedger(t)
	a := attribution{log: n.rt.IssuedLog()}
	for _, k := range a.log {
		if k.N != 1 {
			t.Fatalf("%v delivered more than once: the checks below assume one delivery per event and object", k)
		}
		a.actors = append(a.actors, acts[sim.EventKey{Event: k.Event, ID: k.ID}])
	}
	// Acts on events the runtime never delivered count as duplicates.
	if rep := ledger.Compare(n.rt.Issued(), nil); rep.Duplicates != 0 {
		t.Errorf("ledger: %v", rep)
	}
	return a
}

// checkRuntime checks what every scenario must keep: no lifecycle error,
// no failed creation, and the given request timeouts (none, unless a
// plugin was frozen).
func checkRuntime(t *testing.T, n *procNode, s *stream, timeouts map[string]int) {
	t.Helper()
	if errs := s.errors(); len(errs) != 0 {
		t.Errorf("lifecycle errors: %v", errs)
	}
	st := n.rt.Stats()
	if st.FailedCreates != 0 {
		t.Errorf("%d container creations failed: %v", st.FailedCreates, st.CreateErrors)
	}
	got := map[string]int{}
	for p, c := range st.Timeouts {
		if c != 0 {
			got[p] = c
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(timeouts) {
		t.Errorf("request timeouts %v, want %v (plugin errors: %v)", got, timeouts, st.PluginErrorTexts)
	}
}

// checkHandover checks that every delivered event was acted on exactly
// once, by old up to one point of the stream and by new from there on.
func checkHandover(t *testing.T, a attribution, old, new *proc) {
	t.Helper()
	switched := -1
	for i, k := range a.log {
		acts := a.actors[i]
		if len(acts) != 1 {
			t.Errorf("event #%d %v acted on %d times: %v", i, k, len(acts), acts)
			continue
		}
		want := old
		if switched >= 0 || acts[0].instance == new.id {
			want = new
			if switched < 0 {
				switched = i
			}
		}
		if acts[0] != (actor{want.id, want.version}) {
			t.Errorf("event #%d %v acted on by %v, want %s (%s); the switch was at #%d",
				i, k, acts[0], want.id, want.version, switched)
		}
	}
	if switched <= 0 {
		t.Errorf("no switch from %s to %s in %d events (at #%d)", old.id, new.id, len(a.log), switched)
	}
	t.Logf("%d events, each acted on once: #0-#%d by %s, #%d-#%d by %s",
		len(a.log), switched-1, old.id, switched, len(a.log)-1, new.id)
}

// regexpLine reports whether a line of out starts (after indentation)
// with a match of pattern.
func regexpLine(out, pattern string) bool {
	return regexp.MustCompile(`(?m)^\s*` + pattern).MatchString(out)
}

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

// ownerIs checks that the new pod is still ready and owner.sock leads to it.
func ownerIs(ctx context.Context, t *testing.T, n *procNode, p *proc) {
	t.Helper()
	if code, line := n.probe(ctx, "ready", p.id); code != 0 {
		t.Errorf("%s: readiness probe: exit %d: %s", p.id, code, line)
	}
	owner := filepath.Join(n.root, "audit", "owner.sock")
	if !sameFile(t, owner, filepath.Join(n.root, "audit", "instances", p.id+".sock")) {
		t.Errorf("owner.sock does not lead to %s", p.id)
	}
}

// stopPod sends SIGTERM, as the kubelet does when the pod is deleted, and
// expects a clean exit.
func stopPod(ctx context.Context, t *testing.T, p *proc) time.Duration {
	t.Helper()
	start := time.Now()
	p.signal(t, syscall.SIGTERM)
	st := p.wait(ctx, t)
	if !st.Success() {
		t.Errorf("%s: exit after SIGTERM: %v", p.id, st)
	}
	return time.Since(start)
}

func TestProcessRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs plugin processes")
	}
	bins := buildBinaries(t)

	// The DaemonSet's maxSurge rollout: the new pod starts next to the old
	// one, takes over inside its Synchronize, passes its readiness probe,
	// and only then is the old pod deleted (SIGTERM). Every event is acted
	// on exactly once, by the old version up to one point and by the new
	// one afterwards; nothing fails, nothing times out.
	t.Run("maxSurge rollout", func(t *testing.T) {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		defer cancel()
		n := newProcNode(t, bins, sim.Options{})
		old := n.startPlugin("audit-old", "1.0.0")
		if line := n.waitProbe(ctx, "ready", old); line != "ready: owner since epoch 1" {
			t.Fatalf("old pod ready: %q", line)
		}
		s := n.startStream(ctx, 2)
		s.waitEvents(ctx, t, 300)

		started := time.Now()
		newp := n.startPlugin("audit-new", "2.0.0")
		if line := n.waitProbe(ctx, "ready", newp); line != "ready: owner since epoch 2" {
			t.Fatalf("new pod ready: %q", line)
		}
		t.Logf("new pod ready %v after its start", time.Since(started).Round(time.Millisecond))
		// The old pod is not ready any more, but live: its liveness probe
		// must not restart it while the controller deletes it.
		if code, line := n.probe(ctx, "ready", old.id); code != 1 || line != "not ready: retired: yielded to audit-new (2.0.0)" {
			t.Errorf("old pod readiness: exit %d: %s", code, line)
		}
		if code, line := n.probe(ctx, "live", old.id); code != 0 || line != "live: retired: yielded to audit-new (2.0.0)" {
			t.Errorf("old pod liveness: exit %d: %s", code, line)
		}

		took := stopPod(ctx, t, old)
		t.Logf("old pod exited %v after SIGTERM", took.Round(time.Millisecond))
		s.waitEvents(ctx, t, n.rt.Stats().Events+300)
		ownerIs(ctx, t, n, newp)
		code, out := n.run(ctx, "status", "--dir", n.root, "audit")
		if code != 0 || !strings.Contains(out, "owner          audit-new, version 2.0.0, epoch 2") ||
			!strings.Contains(out, "last handover  audit-old (1.0.0) -> audit-new (2.0.0)") {
			t.Errorf("status: exit %d:\n%s", code, out)
		}
		s.finish()
		stopPod(ctx, t, newp)

		checkRuntime(t, n, s, map[string]int{})
		checkHandover(t, n.attribute(t), old, newp)
		t.Logf("scenario took %v", time.Since(begin).Round(time.Millisecond))
	})

	// Trident's seed scenario, a pod stuck terminating: the old owner is
	// frozen (SIGSTOP) while events flow, then the new pod starts. The
	// runtime drops the frozen instance after one request timeout; the
	// newcomer's Yield gets no answer within half its claim budget and it
	// takes over by force inside its Synchronize. Thawed, the old process
	// finds the owner name changed and acts on nothing.
	//
	// What may be missed, exactly: the events delivered from the freeze up
	// to the newcomer's Synchronize. The first of them is sent to the
	// frozen owner and times out (500 ms here), the rest find no instance
	// connected. The old process may still have acted on at most two of
	// them: one that completed between the test's snapshot and the signal,
	// and the one it was handling when it stopped (recorded, never
	// answered). Everything before the freeze is acted on once by the old
	// version, everything from the newcomer's Synchronize on once by the
	// new one, nothing twice. (In practice the window is small: the
	// newcomer's Synchronize waits, on the runtime's sync lock, for the CRI
	// operation stuck on the frozen owner, so what is missed is the event
	// that timed out and the rest of its operation, e.g. CreateContainer
	// and PostCreateContainer. The assertions hold for any window.)
	t.Run("old owner frozen", func(t *testing.T) {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		defer cancel()
		n := newProcNode(t, bins, sim.Options{RequestTimeout: 500 * time.Millisecond})
		old := n.startPlugin("audit-old", "1.0.0")
		n.waitProbe(ctx, "ready", old)
		s := n.startStream(ctx, 2)
		s.waitEvents(ctx, t, 300)

		frozenAt := len(n.rt.IssuedLog())
		old.signal(t, syscall.SIGSTOP)
		old.waitStopped(ctx, t)
		startedAt := len(n.rt.IssuedLog())
		started := time.Now()
		newp := n.startPlugin("audit-new", "2.0.0")
		n.waitProbe(ctx, "ready", newp)
		readyAt := len(n.rt.IssuedLog())
		t.Logf("new pod ready %v after its start, the old one frozen", time.Since(started).Round(time.Millisecond))

		// The kubelet's liveness probe of the frozen pod fails: it would
		// restart it after failureThreshold periods.
		if code, line := n.probe(ctx, "live", old.id); code != 1 ||
			!strings.HasPrefix(line, "not live: instance audit-old does not answer") {
			t.Errorf("liveness of the frozen pod: exit %d: %s", code, line)
		}
		code, out := n.run(ctx, "status", "--dir", n.root, "--timeout", probeAnswerTimeout)
		if code != 0 || !strings.Contains(out, "owner          audit-new") ||
			!regexpLine(out, `audit-old\s+not answering`) || !strings.Contains(out, "owner unresponsive") {
			t.Errorf("status with the old pod frozen: exit %d:\n%s", code, out)
		}

		// The runtime has dropped the frozen instance (one request timeout).
		if err := n.rt.WaitPlugins(ctx, 1); err != nil {
			t.Fatal(err)
		}

		// Thaw the old process: it reconnects, synchronizes and stays out
		// of the way.
		old.signal(t, syscall.SIGCONT)
		if err := n.rt.WaitPlugins(ctx, 2); err != nil {
			t.Fatalf("the thawed instance did not reconnect: %v", err)
		}
		if code, line := n.probe(ctx, "ready", old.id); code != 1 || !strings.HasPrefix(line, "not ready: ") {
			t.Errorf("thawed old pod readiness: exit %d: %s", code, line)
		}
		_, out = n.run(ctx, "status", "--dir", n.root)
		t.Logf("status after the thaw:\n%s", out)
		s.waitEvents(ctx, t, n.rt.Stats().Events+400) // delivered to both
		ownerIs(ctx, t, n, newp)
		took := stopPod(ctx, t, old)
		t.Logf("thawed old pod exited %v after SIGTERM", took.Round(time.Millisecond))
		s.waitEvents(ctx, t, n.rt.Stats().Events+100)
		ownerIs(ctx, t, n, newp)
		s.finish()
		stopPod(ctx, t, newp)

		checkRuntime(t, n, s, map[string]int{"10-audit": 1})
		a := n.attribute(t)
		firstNew, missed, oldInWindow := -1, 0, 0
		for i, k := range a.log {
			acts := a.actors[i]
			by := ""
			if len(acts) == 1 {
				by = acts[0].instance
			}
			switch {
			case len(acts) > 1:
				t.Errorf("event #%d %v acted on %d times: %v", i, k, len(acts), acts)
			case i < frozenAt:
				if len(acts) != 1 || acts[0] != (actor{old.id, old.version}) {
					t.Errorf("event #%d %v before the freeze acted on by %v, want %s once", i, k, acts, old.id)
				}
			case by == newp.id:
				if acts[0].version != newp.version {
					t.Errorf("event #%d %v: version %s", i, k, acts[0].version)
				}
				if i < startedAt {
					t.Errorf("event #%d %v acted on by %s before it started (#%d)", i, k, by, startedAt)
				}
				if firstNew < 0 {
					firstNew = i
				}
			case firstNew >= 0 || i >= readyAt:
				t.Errorf("event #%d %v acted on by %v after the newcomer's Synchronize (#%d, ready at #%d), want %s once",
					i, k, acts, firstNew, readyAt, newp.id)
			case by == old.id:
				oldInWindow++
			default:
				missed++
			}
		}
		if firstNew < startedAt || firstNew > readyAt {
			t.Errorf("newcomer's first act at #%d, want it between its start (#%d) and its readiness (#%d)",
				firstNew, startedAt, readyAt)
		}
		if oldInWindow > 2 {
			t.Errorf("the frozen owner acted on %d events after the freeze, want at most 2", oldInWindow)
		}
		t.Logf("%d events: #0-#%d acted on by %s; frozen at #%d; %d events missed and %d acted on by the frozen owner "+
			"in #%d-#%d (new pod started at #%d); #%d-#%d acted on by %s",
			len(a.log), frozenAt-1, old.id, frozenAt, missed, oldInWindow, frozenAt, firstNew-1, startedAt,
			firstNew, len(a.log)-1, newp.id)
		t.Logf("scenario took %v", time.Since(begin).Round(time.Millisecond))
	})

	// The old pod ignores SIGTERM: the kubelet kills it after the grace
	// period. It was retired by the handover before it was deleted, so it
	// acts on nothing while it lingers; killed, it leaves its socket file,
	// which status shows as gone. Exactly once, no timeouts.
	t.Run("old pod ignores SIGTERM", func(t *testing.T) {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		defer cancel()
		n := newProcNode(t, bins, sim.Options{})
		old := n.startPlugin("audit-old", "1.0.0", "-ignore-sigterm")
		n.waitProbe(ctx, "ready", old)
		s := n.startStream(ctx, 2)
		s.waitEvents(ctx, t, 300)
		newp := n.startPlugin("audit-new", "2.0.0")
		n.waitProbe(ctx, "ready", newp)

		old.signal(t, syscall.SIGTERM)
		grace := time.NewTimer(gracePeriod) // the kubelet's grace period, not a stand-in for a condition
		select {
		case <-old.done:
			t.Fatalf("%s exited on SIGTERM (%v) though it ignores it", old.id, old.state)
		case <-grace.C:
		}
		if code, line := n.probe(ctx, "live", old.id); code != 0 {
			t.Errorf("old pod in its grace period: liveness exit %d: %s", code, line)
		}
		old.signal(t, syscall.SIGKILL)
		if st := old.wait(ctx, t); st.Success() || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("%s: %v, want killed", old.id, st)
		}
		s.waitEvents(ctx, t, n.rt.Stats().Events+300)
		ownerIs(ctx, t, n, newp)
		code, out := n.run(ctx, "status", "--dir", n.root)
		if code != 0 || !strings.Contains(out, "owner          audit-new") || !regexpLine(out, `audit-old\s+gone`) {
			t.Errorf("status after the kill: exit %d:\n%s", code, out)
		}
		if code, line := n.probe(ctx, "live", old.id); code != 1 || !strings.HasPrefix(line, "not live: instance audit-old is gone") {
			t.Errorf("liveness of the killed pod: exit %d: %s", code, line)
		}
		s.finish()
		stopPod(ctx, t, newp)

		checkRuntime(t, n, s, map[string]int{})
		checkHandover(t, n.attribute(t), old, newp)
		t.Logf("scenario took %v", time.Since(begin).Round(time.Millisecond))
	})
}
