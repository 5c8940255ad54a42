//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/stamp"
)

const (
	pluginName = "audit"
	pluginIdx  = "10"
	auditEnv   = "NRI_AUDIT_VERSION" // audit.EnvVar
)

// node is what one test works in: its own handover directory and ledger on
// the shared containerd, so tests do not see each other's state.
type node struct {
	t       *testing.T
	e       *env
	dir     string // the test's directory under the run directory
	hoRoot  string // handover root shared by the test's instances
	ledger  string // the audit ledger shared by the test's instances
	logMark int64  // size of containerd's log when the test began
	seq     atomic.Int64
}

var nodeSeq atomic.Int64

func newNode(t *testing.T) *node {
	t.Helper()
	e := theEnv(t)
	dir := filepath.Join(e.root, "tests", fmt.Sprintf("%02d-%s", nodeSeq.Add(1), sanitize(t.Name())))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, e: e, dir: dir, hoRoot: filepath.Join(dir, "ho"), ledger: filepath.Join(dir, "ledger")}
	if fi, err := os.Stat(e.ctrdLog); err == nil {
		n.logMark = fi.Size()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if !e.containerdRunning() {
			if err := e.startContainerd(); err != nil {
				t.Errorf("restart containerd for clean-up: %v", err)
				return
			}
		}
		if _, err := e.cri.removeAllPods(ctx); err != nil {
			t.Errorf("clean-up: remove pods: %v", err)
		}
		if t.Failed() {
			t.Logf("containerd's NRI, warning and error lines since the test began:\n%s", tail(relevantLines(n.containerdLog()), 60))
			t.Logf("files of this test are in %s (kept with NRI_HANDOVER_E2E_KEEP=1)", dir)
		}
	})
	return n
}

func sanitize(s string) string {
	return regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(s, "_")
}

// markLog makes containerdLog and the functions reading it start from now.
func (n *node) markLog() {
	if fi, err := os.Stat(n.e.ctrdLog); err == nil {
		n.logMark = fi.Size()
	}
}

// containerdLog returns what containerd logged since the test began.
func (n *node) containerdLog() string {
	b := readFile(n.e.ctrdLog)
	if int64(len(b)) < n.logMark {
		return b
	}
	return b[n.logMark:]
}

// relevantLines keeps the lines of containerd's log about NRI plugins, and
// warnings and errors.
func relevantLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		low := strings.ToLower(l)
		if strings.Contains(low, "plugin") || strings.Contains(low, "nri") ||
			strings.Contains(l, "level=error") || strings.Contains(l, "level=warn") || strings.HasPrefix(l, "====") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// closedPlugins returns containerd's log lines saying it closed a plugin
// connection: for a timeout (the instance was too slow: dropped) and for
// any other reason (mostly: the instance had gone, "ttrpc: closed").
func (n *node) closedPlugins() (timeouts, other []string) {
	for _, l := range strings.Split(n.containerdLog(), "\n") {
		switch {
		case !strings.Contains(l, "closing plugin"):
		case strings.Contains(l, "deadline exceeded"):
			timeouts = append(timeouts, l)
		default:
			other = append(other, l)
		}
	}
	return timeouts, other
}

// connectedPlugins counts containerd's log lines saying a plugin connected
// and synchronized.
func (n *node) connectedPlugins() int {
	return strings.Count(n.containerdLog(), "connected and synchronized")
}

// instance is one plugin process.
type instance struct {
	n       *node
	id      string
	version string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	log     string
	sock    string // its handover socket
	started time.Time
}

type instanceOpts struct {
	binary  string // default nri-audit
	version string
	policy  string
	extra   []string
	noRace  bool // run the plain build, not the one with the race detector
}

// start runs one plugin instance of the test's plugin.
func (n *node) start(o instanceOpts) *instance {
	n.t.Helper()
	if o.binary == "" {
		o.binary = "nri-audit"
	}
	id := fmt.Sprintf("%s-v%s-%d", pluginName, o.version, n.seq.Add(1))
	in := &instance{
		n: n, id: id, version: o.version, done: make(chan struct{}),
		log:  filepath.Join(n.dir, id+".log"),
		sock: filepath.Join(n.hoRoot, pluginName, "instances", id+".sock"),
	}
	args := []string{"-name", pluginName, "-idx", pluginIdx, "-nri-socket", n.e.nriSock,
		"-handover-dir", n.hoRoot, "-instance", id, "-version", o.version, "-ledger", n.ledger}
	if o.policy != "" {
		args = append(args, "-policy", o.policy)
	}
	args = append(args, o.extra...)
	dir := n.e.raceBin
	if o.noRace {
		dir = n.e.bin
	}
	in.cmd = n.e.startProc(n.t, filepath.Join(dir, o.binary), args, in.log)
	in.started = time.Now()
	go func() { in.exitErr = in.cmd.Wait(); n.e.untrackProc(in.cmd); close(in.done) }()
	n.t.Cleanup(func() {
		in.kill()
		if log := in.logText(); strings.Contains(log, "WARNING: DATA RACE") {
			i := strings.Index(log, "WARNING: DATA RACE")
			n.t.Errorf("%s: the race detector reported a data race:\n%s", id, log[i:min(len(log), i+6000)])
		}
		if n.t.Failed() {
			n.t.Logf("log of %s:\n%s", id, tail(readFile(in.log), 40))
		}
	})
	return in
}

// ownerUnderLoad starts the test's first instance with o, waits until it
// owns the plugin (within ownerWithin), and starts a load of workers
// workers. The load is stopped when the test ends, if the test has not
// stopped it by then.
func (n *node) ownerUnderLoad(o instanceOpts, workers int) (*instance, *loadGen) {
	n.t.Helper()
	in := n.start(o)
	in.mustOwn(n.t, ownerWithin)
	load := newLoad(n.e, workers)
	load.start()
	n.t.Cleanup(load.stop)
	return in, load
}

// startProc starts a helper process in its own process group, logging to
// logPath, killed if the test process dies.
func (e *env) startProc(t *testing.T, bin string, args []string, logPath string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	// A race-detector build otherwise sleeps 1 s before exiting, which
	// would distort how fast a retired instance leaves on SIGTERM.
	// A stopping owner waits for a successor up to its leave timeout: the
	// tests stop their last owner with none to come.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NRI_HANDOVER_LEAVE_TIMEOUT=2s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	e.trackProc(cmd)
	return cmd
}

func (in *instance) running() bool {
	select {
	case <-in.done:
		return false
	default:
		return true
	}
}

func (in *instance) signal(sig syscall.Signal) {
	if in.running() {
		_ = in.cmd.Process.Signal(sig)
	}
}

func (in *instance) kill() {
	if in.running() {
		_ = in.cmd.Process.Kill()
		<-in.done
	}
}

// stop sends SIGTERM, as the kubelet does when a DaemonSet pod is deleted,
// and waits for a clean exit.
func (in *instance) stop(timeout time.Duration) error {
	in.signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v of SIGTERM", in.id, timeout)
	}
	if in.exitErr != nil {
		return fmt.Errorf("%s exited with %v", in.id, in.exitErr)
	}
	return nil
}

// status asks the instance over its handover socket.
func (in *instance) status(ctx context.Context) (*hapi.StatusResponse, error) {
	cl, err := protocol.Dial(ctx, in.sock)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Status(ctx, &hapi.StatusRequest{})
}

func (in *instance) role() hapi.Role {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err := in.status(ctx)
	if err != nil {
		return hapi.Role_ROLE_JOINING
	}
	return st.GetRole()
}

// waitOwner waits until the instance reports that it owns the plugin, as a
// readiness probe would, and returns how long after its start that was.
func (in *instance) waitOwner(timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if !in.running() {
			return 0, fmt.Errorf("%s exited (%v) before owning", in.id, in.exitErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		st, err := in.status(ctx)
		cancel()
		if err == nil && st.GetRole() == hapi.Role_ROLE_OWNER {
			return time.Since(in.started), nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = protocol.RoleName(st.GetRole()) + ": " + st.GetReason()
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s not owner after %v (last: %s)", in.id, timeout, last)
}

func (in *instance) mustOwn(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	d, err := in.waitOwner(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// logText is the instance's log so far.
func (in *instance) logText() string { return readFile(in.log) }

// ledgerEntry is one line of the audit ledger.
type ledgerEntry struct {
	event, object, instance, version string
}

func (n *node) readLedger() []ledgerEntry {
	n.t.Helper()
	var out []ledgerEntry
	for _, l := range strings.Split(readFile(n.ledger), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			n.t.Errorf("malformed ledger line %q", l)
			continue
		}
		out = append(out, ledgerEntry{f[0], f[1], f[2], f[3]})
	}
	return out
}

// key is the plugin's stamp key, read (never created) from the handover
// directory.
func (n *node) signer() *stamp.Signer {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.hoRoot, pluginName, "stamp.key"))
	if err != nil {
		n.t.Fatalf("stamp key: %v", err)
	}
	var k stamp.Key
	if len(b) != len(k) {
		n.t.Fatalf("stamp key has %d bytes", len(b))
	}
	copy(k[:], b)
	s, err := stamp.NewSigner(pluginName, k)
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

// stampCheck is what a container's spec says about the plugin's work.
type stampCheck struct {
	stamp   stamp.Stamp
	err     error    // stamp missing or invalid
	envVals []string // values of NRI_AUDIT_VERSION
}

func checkSpec(s *stamp.Signer, id string, sp *runtimeSpec) stampCheck {
	st, err := s.Verify(id, sp.Annotations)
	return stampCheck{stamp: st, err: err, envVals: sp.env(auditEnv)}
}

// problem describes what is wrong with one container's stamp and env, or "".
func (c stampCheck) problem() string {
	switch {
	case c.err != nil:
		return "no valid stamp: " + c.err.Error()
	case len(c.envVals) != 1:
		return fmt.Sprintf("%s set %d times (%v)", auditEnv, len(c.envVals), c.envVals)
	case c.envVals[0] != c.stamp.Version.Original():
		return fmt.Sprintf("stamped by version %s but %s=%s", c.stamp.Version.Original(), auditEnv, c.envVals[0])
	}
	return ""
}

// ledgerReport compares the ledger with the events the client's calls
// should have caused.
type ledgerReport struct {
	expected, recorded int
	duplicates, missed []string
	unexpected         []string
	byVersion          map[string]int
}

func (r ledgerReport) String() string {
	var vs []string
	for v, c := range r.byVersion {
		vs = append(vs, fmt.Sprintf("%s:%d", v, c))
	}
	sort.Strings(vs)
	return fmt.Sprintf("expected %d events, ledger has %d (by version %s); %d duplicated, %d missed, %d unexpected",
		r.expected, r.recorded, strings.Join(vs, " "), len(r.duplicates), len(r.missed), len(r.unexpected))
}

// compareLedger checks that every expected event is in the ledger exactly
// as often as expected (an event in optional may also be absent, never
// more), and nothing else is.
func compareLedger(expected map[string]int, optional map[string]bool, ledger []ledgerEntry) ledgerReport {
	r := ledgerReport{byVersion: map[string]int{}}
	got := map[string]int{}
	for _, l := range ledger {
		got[l.event+" "+l.object]++
		r.byVersion[l.version]++
	}
	r.recorded = len(ledger)
	for k, want := range expected {
		r.expected += want
		switch g := got[k]; {
		case g > want:
			r.duplicates = append(r.duplicates, fmt.Sprintf("%s x%d", k, g))
		case g < want && !optional[k]:
			r.missed = append(r.missed, k)
		}
	}
	for k, g := range got {
		if _, ok := expected[k]; !ok {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s x%d", k, g))
		}
	}
	sort.Strings(r.duplicates)
	sort.Strings(r.missed)
	sort.Strings(r.unexpected)
	return r
}

// first returns at most n items of s, for error messages.
func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

// checkCreated checks every inspected container's stamp and env var and
// returns the count of containers per stamping version.
func checkCreated(t *testing.T, signer *stamp.Signer, ctrs []*created) string {
	t.Helper()
	byVersion := map[string]int{}
	bad := 0
	for _, c := range ctrs {
		if c.specErr != nil {
			t.Errorf("container %s: cannot read its spec: %v", c.id, c.specErr)
			continue
		}
		sc := checkSpec(signer, c.id, c.spec)
		if pr := sc.problem(); pr != "" {
			if bad++; bad <= 10 {
				t.Errorf("container %s: %s", c.id, pr)
			}
			continue
		}
		byVersion[sc.stamp.Version.Original()]++
	}
	if bad > 10 {
		t.Errorf("... %d containers in all without exactly one valid stamp", bad)
	}
	var parts []string
	for v, c := range byVersion {
		parts = append(parts, fmt.Sprintf("%s: %d", v, c))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d containers (%s)", len(ctrs), strings.Join(parts, ", "))
}

// checkNoFailures fails the test if any CRI call of the load failed.
func (l *loadGen) checkNoFailures(t *testing.T) {
	t.Helper()
	if f := l.failures(); len(f) > 0 {
		t.Errorf("failed CRI calls:\n%s", summarizeFailures(f))
	}
}

// checkExactlyOnce checks what exactly once means under load: every
// container the load created carries exactly one valid stamp and env var
// (the count by stamping version is logged), and the ledger has every event
// the load's calls caused exactly as often as expected (one in optional may
// also be absent) and nothing else. It returns the ledger.
func (n *node) checkExactlyOnce(t *testing.T, load *loadGen, optional map[string]bool) []ledgerEntry {
	t.Helper()
	t.Logf("containers stamped by version: %s", checkCreated(t, n.signer(), load.ctrs))
	ledger := n.readLedger()
	rep := compareLedger(load.expected(), optional, ledger)
	t.Logf("ledger: %s", rep)
	if len(rep.duplicates)+len(rep.missed)+len(rep.unexpected) > 0 {
		t.Errorf("ledger does not match the calls:\n duplicated %v\n missed %v\n unexpected %v",
			first(rep.duplicates, 10), first(rep.missed, 10), first(rep.unexpected, 10))
	}
	return ledger
}

// checkNoTimeouts fails the test if containerd dropped a plugin instance
// for slowness (a request timeout), and returns its other log lines saying
// it closed a plugin connection.
func (n *node) checkNoTimeouts(t *testing.T) (closed []string) {
	t.Helper()
	timeouts, closed := n.closedPlugins()
	if len(timeouts) > 0 {
		t.Errorf("containerd dropped an instance for slowness:\n%s", strings.Join(timeouts, "\n"))
	}
	return closed
}

// instanceRuns lists the instances that wrote the ledger, one entry per
// run of consecutive lines by the same instance. The ledger is in event
// order (containerd serializes events, each line is written before the
// event returns), so one run per owner means no two instances ever acted
// in turn on the same stretch of events.
func instanceRuns(ledger []ledgerEntry) []string {
	var runs []string
	for _, l := range ledger {
		if len(runs) == 0 || runs[len(runs)-1] != l.instance {
			runs = append(runs, l.instance)
		}
	}
	return runs
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
