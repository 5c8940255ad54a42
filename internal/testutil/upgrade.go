package testutil

import (
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
)

// Discard is io.Discard, for loggers of tests.
var Discard = io.Discard

// StartOwner runs author as instance id, version ver, of plugin name
// (index 10) on rt with the handover root root, and waits until it owns
// the plugin, as a newer instance of a rolling upgrade does. The instance
// stops when the test ends; Stop it earlier with the returned Running.
func StartOwner(t testing.TB, rt *sim.Runtime, root, name, id, ver string, author interface{}, opts ...plugin.Option) (*plugin.Plugin, *Running) {
	t.Helper()
	l := logrus.New()
	l.SetOutput(Discard)
	p, err := plugin.New(author, append([]plugin.Option{
		plugin.WithVersion(ver), plugin.WithPluginName(name), plugin.WithPluginIdx("10"),
		plugin.WithSocketPath(rt.SocketPath()), plugin.WithHandoverDir(root), plugin.WithInstanceID(id),
		plugin.WithLeaveTimeout(5 * time.Second), plugin.WithLogger(logrus.NewEntry(l)),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := Run(p)
	t.Cleanup(func() { _ = r.Stop() })
	WaitStatus(t, p, "owner", func(st handover.Status) bool { return st.Role == handover.RoleOwner })
	return p, r
}
