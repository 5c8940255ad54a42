// Package testutil holds what the tests of several packages need alike
// (the integration tests in test/ and the command's tests in
// cmd/nri-handover): a TestMain that keeps the logs quiet, an in-process
// runtime and a short handover root per test, instances of the audit
// sample plugin run in the test process, the socket file a crashed instance
// leaves behind, and a wait on an instance's status. It is for tests only.
package testutil

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/protocol"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
)

// Main is a TestMain that silences logrus's standard logger (the NRI
// library and the harness log through it) unless the tests run with -v,
// then runs the tests and exits with their result; it fails them if a
// coordinator made a role or stage change outside the rules of
// internal/protocol/stages.go (logged at error level where it happened).
func Main(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		logrus.SetOutput(io.Discard)
	}
	code := m.Run()
	if n := protocol.IllegalChanges(); n != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d illegal role or stage changes of a coordinator (run with -v for the error logs)\n", n)
		code = max(code, 1)
	}
	os.Exit(code)
}

// StartRuntime starts an in-process runtime (internal/sim) with opts, stopped
// when the test ends. A request timeout in opts is process-wide and outlives
// the runtime: it is set back to the default when the test ends.
func StartRuntime(t testing.TB, opts sim.Options) *sim.Runtime {
	t.Helper()
	rt, err := sim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	if opts.RequestTimeout != 0 {
		t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	}
	return rt
}

// ShortTempDir creates a directory directly under the system's temporary
// directory, named prefix and a random suffix, and removes it when the test
// ends. Handover roots go there rather than in t.TempDir(), whose long
// paths would not leave room for socket names: unix socket paths are
// limited to 108 bytes.
func ShortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// DeadSocket leaves at path the socket file of a process that died: a unix
// socket nothing listens on any more.
func DeadSocket(t testing.TB, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// WaitStatus waits on the instance's change notifications (RoleChanged)
// until cond holds of its status, and fails the test if that takes more
// than 20 s; what names the condition in that failure.
func WaitStatus(t testing.TB, p *plugin.Plugin, what string, cond func(handover.Status) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		ch := p.RoleChanged() // before the status: no change is missed
		st := p.Status()
		if cond(st) {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: waiting for %s: role %v, reason %q", p.Instance().ID, what, st.Role, st.Reason)
		}
	}
}

// AuditOptions are the options of instance id, version ver, of the audit
// sample plugin (index 10) on the runtime rt, in the handover root root.
// Callers append their own.
func AuditOptions(rt *sim.Runtime, root, id, ver string) []plugin.Option {
	return []plugin.Option{
		plugin.WithVersion(ver),
		plugin.WithPluginName("audit"),
		plugin.WithPluginIdx("10"),
		plugin.WithSocketPath(rt.SocketPath()),
		plugin.WithHandoverDir(root),
		plugin.WithInstanceID(id),
	}
}

// Running is an instance whose Run runs in a goroutine of the test process.
type Running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, with its error in err
	err    error
}

// Run runs p.Run in a goroutine until Stop. The caller stops it by the end
// of the test (t.Cleanup) and reports what Run returned as its test wants.
func Run(p *plugin.Plugin) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = p.Run(ctx)
		close(r.done)
	}()
	return r
}

// Stop cancels Run's context, as SIGTERM would, waits for Run to return and
// returns what it returned. It may be called again, and returns the same.
func (r *Running) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}
