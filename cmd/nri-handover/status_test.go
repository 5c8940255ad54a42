package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// TestMain silences the NRI library and the harness (both log through
// logrus's standard logger) unless the tests run with -v.
func TestMain(m *testing.M) { testutil.Main(m) }

// testNode is an in-process runtime and a handover root.
type testNode struct {
	rt   *sim.Runtime
	root string
}

// newTestNode starts a runtime and makes a handover root, both gone when
// the test ends.
func newTestNode(t *testing.T) *testNode {
	t.Helper()
	return &testNode{rt: testutil.StartRuntime(t, sim.Options{}), root: testutil.ShortTempDir(t, "nhs-")}
}

// nopRecorder is an audit recorder that keeps nothing.
type nopRecorder struct{}

func (nopRecorder) Record(string, string) error { return nil }

// instance is a harness instance running in the test process.
type instance struct {
	p   *plugin.Plugin
	run *testutil.Running
}

// start runs an audit plugin instance with the given id and version. It is
// stopped when the test ends, which fails if Run returned an error.
func (n *testNode) start(t *testing.T, id, ver string, opts ...plugin.Option) *instance {
	t.Helper()
	p, err := plugin.New(&audit.Plugin{Version: ver, Recorder: nopRecorder{}},
		append(append(testutil.AuditOptions(n.rt, n.root, id, ver), plugin.WithLeaveTimeout(2*time.Second)), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{p: p, run: testutil.Run(p)}
	t.Cleanup(func() {
		if err := in.run.Stop(); err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	})
	return in
}

// stop cancels the instance (as SIGTERM would) and waits for Run to return;
// what it returned is checked when the test ends.
func (in *instance) stop() { _ = in.run.Stop() }

// waitRole waits on the instance's change notifications until it has role.
func waitRole(t *testing.T, in *instance, role handover.Role) {
	t.Helper()
	testutil.WaitStatus(t, in.p, "role "+role.String(), func(st handover.Status) bool { return st.Role == role })
}

// hungSocket is the socket of an instance that accepts connections (the
// kernel does, from the listen backlog) but never answers, like a process
// stopped with SIGSTOP.
func hungSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// run calls a command function and returns its output and exit code.
func run(cmd func([]string, io.Writer) error, args ...string) (string, int, error) {
	var out bytes.Buffer
	err := cmd(args, &out)
	return out.String(), exitCode(err), err
}

// mustContain checks that s, named what in the error, contains every one
// of subs.
func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

// TestStatusAndProbesOnLiveInstances: an owner, a standby refused by
// policy, a retired instance, the stale socket of a dead instance and one
// that does not answer, all in one plugin directory.
func TestStatusAndProbesOnLiveInstances(t *testing.T) {
	n := newTestNode(t)
	pol := plugin.WithPolicy(handover.NewestVersion{})
	a := n.start(t, "a-v2", "2.0.0", pol)
	waitRole(t, a, handover.RoleOwner)
	b := n.start(t, "b-v1", "1.0.0", pol)
	waitRole(t, b, handover.RoleStandby)
	c := n.start(t, "c-v3", "3.0.0", pol)
	waitRole(t, c, handover.RoleOwner)
	waitRole(t, a, handover.RoleRetired)
	// The standby claims again when the owner changes, and is refused again.
	testutil.WaitStatus(t, b.p, "refusal by the new owner", func(st handover.Status) bool {
		return st.Role == handover.RoleStandby && strings.Contains(st.Reason, "owner's 3.0.0")
	})
	inst := filepath.Join(n.root, "audit", "instances")
	testutil.DeadSocket(t, filepath.Join(inst, "d-dead.sock"))
	hungSocket(t, filepath.Join(inst, "e-hung.sock"))

	out, code, err := run(status, "--dir", n.root, "--timeout", "300ms")
	if code != 0 {
		t.Fatalf("status: exit %d (%v)\n%s", code, err, out)
	}
	t.Logf("status:\n%s", out)
	mustContain(t, "status", out,
		"plugin audit ("+filepath.Join(n.root, "audit")+")",
		"owner          c-v3, version 3.0.0, epoch 2, started ",
		"standbys       b-v1\n",
		"retired        a-v2\n",
		"last handover  a-v2 (2.0.0) -> c-v3 (3.0.0) at ",
		"c-v3 *", "took over from a-v2 (2.0.0)",
		"version 1.0.0 is older than the owner's 3.0.0 (policy newest-version)",
		"yielded to c-v3 (3.0.0)",
		"d-dead    gone",
		"e-hung    not answering",
		"no answer within 300ms")

	// The plugin named after the flags, and JSON.
	out, code, err = run(status, "audit", "--json", "--dir", n.root, "--timeout", "300ms")
	if code != 0 {
		t.Fatalf("status --json: exit %d (%v)\n%s", code, err, out)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(rep.Plugins) != 1 {
		t.Fatalf("status --json: %d plugins, want 1", len(rep.Plugins))
	}
	p := rep.Plugins[0]
	if p.Plugin != "audit" || p.Owner != "c-v3" || p.OwnerVersion != "3.0.0" || p.Epoch != 2 ||
		p.OwnerSocket != "answering" || len(p.Problems) != 0 {
		t.Errorf("status --json: %+v", p)
	}
	if strings.Join(p.Standbys, ",") != "b-v1" || strings.Join(p.Retired, ",") != "a-v2" {
		t.Errorf("standbys %v, retired %v", p.Standbys, p.Retired)
	}
	if h := p.LastHandover; h == nil || h.From != "a-v2" || h.To != "c-v3" || h.Epoch != 2 || h.At.IsZero() {
		t.Errorf("last handover %+v", p.LastHandover)
	}
	states := map[string]string{}
	for _, ir := range p.Instances {
		states[ir.ID] = ir.State + "/" + ir.Role
		if ir.Owner != (ir.ID == "c-v3") || ir.HoldsOwnerName != (ir.ID == "c-v3") {
			t.Errorf("instance %s: owner %v, holds owner name %v", ir.ID, ir.Owner, ir.HoldsOwnerName)
		}
	}
	want := map[string]string{"a-v2": "answering/retired", "b-v1": "answering/standby", "c-v3": "answering/owner",
		"d-dead": "gone/", "e-hung": "not answering/"}
	for id, w := range want {
		if states[id] != w {
			t.Errorf("instance %s: %q, want %q", id, states[id], w)
		}
	}

	probes := []struct {
		args []string
		code int
		line string
	}{
		{[]string{"ready", "--instance", "c-v3"}, 0, "ready: owner since epoch 2"},
		{[]string{"live", "--instance", "c-v3"}, 0, "live: owner since epoch 2"},
		{[]string{"ready", "--instance", "b-v1"}, 1,
			"not ready: standby: version 1.0.0 is older than the owner's 3.0.0 (policy newest-version)"},
		{[]string{"live", "--instance", "b-v1"}, 0,
			"live: standby: version 1.0.0 is older than the owner's 3.0.0 (policy newest-version)"},
		// a-v2 yielded to c-v3, which owns: a live fallback, ready.
		{[]string{"ready", "--instance", "a-v2"}, 0, "ready: retired: live fallback for owner c-v3"},
		{[]string{"live", "--instance", "a-v2"}, 0, "live: retired: yielded to c-v3 (3.0.0)"},
		{[]string{"ready", "--instance", "d-dead"}, 1,
			"not ready: instance d-dead is gone: nothing listens on " + filepath.Join(inst, "d-dead.sock")},
		{[]string{"live", "--instance", "d-dead"}, 1, "not live: instance d-dead is gone"},
		{[]string{"live", "--instance", "e-hung"}, 1,
			"not live: instance e-hung does not answer on " + filepath.Join(inst, "e-hung.sock") + ": no answer within 300ms"},
		{[]string{"ready", "--instance", "zz"}, 1, "not ready: instance zz has no socket"},
		{[]string{"started", "--instance", "c-v3"}, 0, "started: owner since epoch 2"},
		{[]string{"started", "--instance", "b-v1"}, 0, "started: standby: version 1.0.0 is older"},
		{[]string{"started", "--instance", "zz"}, 1, "not started: instance zz has no socket"},
	}
	for _, pc := range probes {
		args := append([]string{"--dir", n.root, "--plugin", "audit", "--timeout", "300ms"}, pc.args...)
		out, code, err := run(probe, args...)
		if code != pc.code || !strings.HasPrefix(out, pc.line) || strings.Contains(out, "\n") {
			t.Errorf("probe %v: exit %d (%v), output %q; want exit %d and one line without newline starting %q",
				pc.args, code, err, out, pc.code, pc.line)
		}
	}

	// The instance id from the environment, as the DaemonSet sets it.
	t.Setenv(plugin.EnvInstance, "c-v3")
	if out, code, _ := run(probe, "ready", "--dir", n.root, "--plugin", "audit"); code != 0 || out != "ready: owner since epoch 2" {
		t.Errorf("probe ready with $%s: exit %d, %q", plugin.EnvInstance, code, out)
	}
	t.Setenv(plugin.EnvDir, n.root)
	if out, code, _ := run(status, "--timeout", "300ms"); code != 0 || !strings.Contains(out, "owner          c-v3") {
		t.Errorf("status with $%s: exit %d\n%s", plugin.EnvDir, code, out)
	}
}

// TestStatusOwnerGone: the owner stopped with no standby; owner.sock still
// leads to its (now unlinked) socket. Status says there is no owner and
// exits 1.
func TestStatusOwnerGone(t *testing.T) {
	n := newTestNode(t)
	a := n.start(t, "a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	a.stop()
	out, code, err := run(status, "--dir", n.root)
	if code != 0 || err != nil {
		t.Fatalf("status after a clean stop: exit %d (%v), want 0\n%s", code, err, out)
	}
	mustContain(t, "status", out, "owner          none: no instance running (the last one stopped cleanly)", "no instances")
	if out, code, _ := run(probe, "live", "--dir", n.root, "--plugin", "audit", "--instance", "a"); code != 1 ||
		!strings.HasPrefix(out, "not live: instance a has no socket") {
		t.Errorf("probe live of a stopped instance: exit %d, %q", code, out)
	}
	if out, code, _ := run(probe, "ready", "--dir", n.root, "--plugin", "audit"); code != 1 ||
		!strings.Contains(out, `no instance of plugin "audit" answers`) || !strings.Contains(out, "--instance") {
		t.Errorf("probe ready with no instance running: exit %d, %q", code, out)
	}
}

// TestProbeFindsTheOnlyInstance: without --instance or $NRI_HANDOVER_INSTANCE
// (as the README shows the probe), the probe asks the only instance that
// answers; with two it names them and the fix.
func TestProbeFindsTheOnlyInstance(t *testing.T) {
	t.Setenv(plugin.EnvInstance, "")
	n := newTestNode(t)
	a := n.start(t, "a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	if out, code, _ := run(probe, "ready", "--dir", n.root, "--plugin", "audit"); code != 0 || !strings.HasPrefix(out, "ready: owner") {
		t.Errorf("probe ready --plugin audit: exit %d, %q", code, out)
	}
	b := n.start(t, "b", "1.0.0")
	waitRole(t, b, handover.RoleOwner)
	out, code, _ := run(probe, "ready", "--dir", n.root, "--plugin", "audit")
	if code != 1 || !strings.Contains(out, `2 instances of plugin "audit" answer (a, b)`) || !strings.Contains(out, "--instance") {
		t.Errorf("probe ready with two instances: exit %d, %q", code, out)
	}
}

// TestStatusOwnerNotAnswering: owner.sock leads to an instance that accepts
// connections but never answers (stopped, hung).
func TestStatusOwnerNotAnswering(t *testing.T) {
	root := testutil.ShortTempDir(t, "nhs-")
	inst := filepath.Join(root, "frozen", "instances")
	if err := os.MkdirAll(inst, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "fresh", "instances"), 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(inst, "h.sock")
	hungSocket(t, sock)
	if err := os.Link(sock, filepath.Join(root, "frozen", "owner.sock")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, code, err := run(status, "--dir", root, "--timeout", "200ms")
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("status took %v with a 200ms timeout", took)
	}
	if code != 1 || err == nil {
		t.Fatalf("status: exit %d, want 1\n%s", code, out)
	}
	// fresh has no instance: nothing runs, which is no problem.
	if strings.Contains(err.Error(), "fresh") {
		t.Errorf("a plugin with no instance is a problem: %v", err)
	}
	mustContain(t, "error", err.Error(),
		`plugin "frozen": owner h does not answer on owner.sock: no answer within 200ms (hung, stopped or overloaded)`)
	mustContain(t, "status", out, "plugin fresh (", "none: no instance running", "plugin frozen (",
		"owner          NONE (owner.sock: not answering)",
		"h         not answering")
	if out, code, _ := run(probe, "ready", "--dir", root, "--plugin", "frozen", "--instance", "h", "--timeout", "200ms"); code != 1 ||
		!strings.HasPrefix(out, "not ready: instance h does not answer") {
		t.Errorf("probe ready of a hung instance: exit %d, %q", code, out)
	}
}

func TestStatusErrors(t *testing.T) {
	n := newTestNode(t)
	a := n.start(t, "a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)

	t.Run("no such plugin", func(t *testing.T) {
		_, code, err := run(status, "--dir", n.root, "nope")
		if code != 1 || err == nil || err.Error() != `no plugin "nope" in `+n.root+` (found: audit)` {
			t.Fatalf("exit %d, err %v", code, err)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(n.root, "missing")
		_, code, err := run(status, "--dir", dir)
		if code != 1 || err == nil || !strings.Contains(err.Error(), "handover directory "+dir+" does not exist") {
			t.Fatalf("exit %d, err %v", code, err)
		}
		if out, code, _ := run(probe, "ready", "--dir", dir, "--plugin", "audit", "--instance", "a"); code != 1 ||
			!strings.HasPrefix(out, `not ready: no handover directory for plugin "audit": `+dir+" does not exist") {
			t.Errorf("probe: exit %d, %q", code, out)
		}
	})
	t.Run("directory is a file", func(t *testing.T) {
		file := filepath.Join(n.root, "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, code, err := run(status, "--dir", file)
		if code != 1 || err == nil || err.Error() != "handover directory "+file+" is not a directory" {
			t.Fatalf("exit %d, err %v", code, err)
		}
	})
	t.Run("unreadable directory", func(t *testing.T) {
		// A world-traversable parent holding a chmod 000 directory.
		parent := testutil.ShortTempDir(t, "nhs-perm-")
		if err := os.Chmod(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "locked")
		if err := os.Mkdir(dir, 0o000); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		want := "cannot read handover directory " + dir + ": permission denied"
		if os.Geteuid() != 0 {
			_, code, err := run(status, "--dir", dir)
			if code != 1 || err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("exit %d, err %v", code, err)
			}
			return
		}
		// Root bypasses permission checks: run this test binary again as
		// nobody to see what an unprivileged operator sees.
		out, err := runAsNobody(t, parent, "status", "--dir", dir)
		if err != nil {
			t.Skipf("running as root, and cannot run the check as an unprivileged user (%v): "+
				"root bypasses the permission check this case needs", err)
		}
		if !strings.Contains(out, "exit 1: "+want) {
			t.Fatalf("as nobody: %q, want exit 1 and %q", out, want)
		}
	})
	t.Run("empty directory", func(t *testing.T) {
		dir := filepath.Join(n.root, "empty")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		out, code, err := run(status, "--dir", dir)
		if code != 0 || out != "no plugins in "+dir+"\n" {
			t.Fatalf("exit %d (%v), %q", code, err, out)
		}
		_, code, err = run(status, "--dir", dir, "x")
		if code != 1 || err == nil || err.Error() != `no plugin "x" in `+dir+` (found: none)` {
			t.Fatalf("exit %d, err %v", code, err)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"a", "b"}, {"--bogus"}, {"--timeout", "0"}, {"--dir="}} {
			var out, errb bytes.Buffer
			if code := statusMain(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: nri-handover status") {
				t.Errorf("status %q: exit %d, stderr %q", args, code, errb.String())
			}
		}
		var out, errb bytes.Buffer
		if code := statusMain([]string{"-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "-timeout") {
			t.Errorf("status -h: exit %d, stdout %q", code, out.String())
		}
	})
}

func TestProbeUsage(t *testing.T) {
	t.Setenv(plugin.EnvInstance, "")
	cases := []struct {
		args []string
		want string
	}{
		{nil, "which probe? want ready, live or started"},
		{[]string{"maybe", "--plugin", "x", "--instance", "i"}, `unknown probe "maybe"`},
		{[]string{"ready", "live", "--plugin", "x", "--instance", "i"}, "want exactly one of ready, live or started"},
		{[]string{"ready", "--instance", "i"}, "--plugin is required"},
		{[]string{"ready", "--plugin", "../x", "--instance", "i"}, "invalid plugin name"},
		{[]string{"ready", "--plugin", "x", "--instance", "i", "--timeout", "-1s"}, "must be positive"},
		{[]string{"ready", "--plugin", "x", "--instance", "i", "--bogus"}, "flag provided but not defined: -bogus"},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := probeMain(tc.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "usage: nri-handover probe") {
			t.Errorf("probe %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("probe %q: stdout %q, want nothing", tc.args, out.String())
		}
	}
	// Not ready is exit 1 with the line on stdout and nothing on stderr.
	var out, errb bytes.Buffer
	dir := t.TempDir()
	if code := probeMain([]string{"ready", "--dir", dir, "--plugin", "x", "--instance", "i"}, &out, &errb); code != 1 ||
		!strings.HasPrefix(out.String(), "not ready: ") || errb.Len() != 0 {
		t.Errorf("probe of a missing plugin: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// envHelper makes the test binary run one command and print its exit code
// and error instead of running tests (see runAsNobody).
const envHelper = "NRI_HANDOVER_TEST_HELPER"

func init() {
	if os.Getenv(envHelper) != "1" {
		return
	}
	args := os.Args[len(os.Args)-1]
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil || len(argv) == 0 {
		fmt.Println("bad helper arguments:", err)
		os.Exit(3)
	}
	cmds := map[string]func([]string, io.Writer) error{"status": status, "probe": probe}
	var out bytes.Buffer
	err := cmds[argv[0]](argv[1:], &out)
	fmt.Printf("exit %d: %v", exitCode(err), err)
	os.Exit(0)
}

// runAsNobody runs a command of this binary as uid/gid 65534 and returns
// "exit N: error". The binary is copied to dir (world-readable) first, as
// the test binary's own directory is private to root.
func runAsNobody(t *testing.T, dir string, argv ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "helper.test")
	data, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		return "", err
	}
	args, _ := json.Marshal(argv)
	cmd := exec.Command(bin, string(args))
	cmd.Env = append(os.Environ(), envHelper+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return string(out), nil
}

// TestProbeSupersededOwner: an owner whose owner name was taken over while
// it did not answer (a forced takeover) still says "owner" until its next
// event; the readiness probe goes by the owner name and says not ready.
func TestProbeSupersededOwner(t *testing.T) {
	n := newTestNode(t)
	a := n.start(t, "a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	// Publish another socket under the owner name, as a newcomer taking
	// over by force does (link, then rename over owner.sock).
	dir := filepath.Join(n.root, "audit")
	other := filepath.Join(dir, "instances", "b.sock")
	hungSocket(t, other)
	if err := os.Link(other, filepath.Join(dir, "owner.sock.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "owner.sock.tmp"), filepath.Join(dir, "owner.sock")); err != nil {
		t.Fatal(err)
	}
	base := []string{"--dir", n.root, "--plugin", "audit", "--instance", "a", "--timeout", "200ms"}
	if out, code, _ := run(probe, append([]string{"ready"}, base...)...); code != 1 ||
		out != "not ready: superseded: owner.sock leads to another instance; this one retires at its next event" {
		t.Errorf("probe ready: exit %d, %q", code, out)
	}
	if out, code, _ := run(probe, append([]string{"live"}, base...)...); code != 0 || out != "live: owner since epoch 1" {
		t.Errorf("probe live: exit %d, %q", code, out)
	}
	out, code, err := run(status, "--dir", n.root, "--timeout", "200ms")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "owner b does not answer on owner.sock") {
		t.Errorf("status: exit %d, err %v", code, err)
	}
	if !regexpMatch(out, `(?m)^\s+a\s+owner \(superseded\)\s+1\.0\.0`) {
		t.Errorf("status does not show a as superseded:\n%s", out)
	}
	ready, why := a.p.Ready()
	t.Logf("the instance's own Ready() meanwhile: %v (%s)", ready, why)
}

// regexpMatch reports whether s matches pattern.
func regexpMatch(s, pattern string) bool { return regexp.MustCompile(pattern).MatchString(s) }
