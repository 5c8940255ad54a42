package test

// The node of the process tests (process_test.go, faults_test.go): the
// in-process runtime (internal/sim, a real NRI unix socket) in the test
// process, and the nri-audit sample plugin run as separate processes that
// connect to it and share a handover root and a ledger file; the binaries
// they run; a stream of pod lifecycles; and the checks of the ledger file
// against the events the runtime delivered.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
)

// ownerPoll is how often a test looks at a plugin process's role from
// outside (its handover socket); only used where a process must be
// observed, to time a takeover to a few milliseconds.
const ownerPoll = 2 * time.Millisecond

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
	// The fault tests make the plugin kill or stop itself at a step of the
	// protocol (internal/failpoint): only a build with this tag obeys them.
	args := []string{"build", "-tags", "failpoints", "-o", dir + string(filepath.Separator)}
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

// raceEnabled reports whether this test binary was built with -race.
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

// newProcNode starts a node: a runtime with opts, a handover root and a
// ledger file for the plugin processes, whose logs are shown if the test
// fails (or NHP_LOGS is set).
func newProcNode(t *testing.T, bins binaries, opts sim.Options) *procNode {
	t.Helper()
	rt := testutil.StartRuntime(t, opts) // a request timeout in opts is reset at the end
	root := testutil.ShortTempDir(t, "nhp-")
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
	return n.startProcEnv(id, ver, nil, extra...)
}

// startProcEnv starts an nri-audit process as startPlugin does, with env
// added to its environment (e.g. a failpoint). The process is killed when
// the test ends, if it has not exited by then.
func (n *procNode) startProcEnv(id, ver string, env []string, extra ...string) *proc {
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
	p.cmd.Env = append(childEnv(), env...)
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
	// A stopping owner waits for a successor up to its leave timeout; the
	// scenarios stop their last owner with none to come.
	return append(env, "GORACE="+gorace, "NRI_HANDOVER_LEAVE_TIMEOUT=1s")
}

// dumpLogsOnFailure logs the end of every plugin process's log if the test
// failed or NHP_LOGS is set.
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

// signal sends sig to the process.
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

// stream runs pod lifecycles (two containers each) until finished.
type stream struct {
	rt       *sim.Runtime
	stop     atomic.Bool
	wg       sync.WaitGroup
	progress chan struct{}
	mu       sync.Mutex
	errs     []string
}

// startStream starts workers workers running pod lifecycles on the node's
// runtime, until finish or the end of the test.
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

// finish stops the workers after their current lifecycle and waits for
// them; it may be called again.
func (s *stream) finish() {
	s.stop.Store(true)
	s.wg.Wait()
}

// errors returns the first lifecycle errors of the workers (20 at most).
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

// statusOf asks an instance for its status over its handover socket.
func (n *procNode) statusOf(ctx context.Context, id string) (*hapi.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	cl, err := protocol.Dial(ctx, instanceSocket(n.root, id))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Status(ctx, &hapi.StatusRequest{})
}

// owns reports whether the instance says it owns the plugin and the owner
// name leads to its socket.
func (n *procNode) owns(ctx context.Context, id string) bool {
	st, err := n.statusOf(ctx, id)
	if err != nil || st.Role != hapi.Role_ROLE_OWNER {
		return false
	}
	return ownerNameLeadsTo(n.root, id)
}

// waitOwns watches the process from outside until it owns the plugin and
// returns when that was first seen. It fails if the process exits first.
func (n *procNode) waitOwns(ctx context.Context, t *testing.T, p *proc) time.Time {
	t.Helper()
	tick := time.NewTicker(ownerPoll)
	defer tick.Stop()
	for {
		if n.owns(ctx, p.id) {
			return time.Now()
		}
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("%s exited (%v) before it owned the plugin", p.id, p.state)
		case <-ctx.Done():
			st, err := n.statusOf(context.Background(), p.id)
			t.Fatalf("%s never owned the plugin: %v %v", p.id, st, err)
		}
	}
}
