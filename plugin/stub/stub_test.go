package stub_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	harness "github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/stub"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// plugin is written as upstream samples are: `type plugin struct` holding
// its stub, which is what clashed with package plugin.
type plugin struct {
	stub    stub.Stub
	created atomic.Int64
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.created.Add(1)
	return nil, nil, nil
}

// TestDropInRunsAnUpstreamStylePlugin: New with the stub's option names
// and a version runs the plugin on the harness; the Stub methods work.
func TestDropInRunsAnUpstreamStylePlugin(t *testing.T) {
	rt := testutil.StartRuntime(t, sim.Options{})
	l := logrus.New()
	l.SetOutput(io.Discard)
	p := &plugin{}
	var err error
	p.stub, err = stub.New(p,
		stub.WithPluginName("dropin"), stub.WithPluginIdx("10"), stub.WithSocketPath(rt.SocketPath()),
		stub.WithOnClose(func() {}),
		stub.WithVersion("1.0.0"),
		stub.WithHandoverDir(testutil.ShortTempDir(t, "nhs-")), stub.WithInstanceID("a"),
		stub.WithHarnessOptions(harness.WithLogger(logrus.NewEntry(l))),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.stub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.stub.Stop()
	h := p.stub.Harness()
	testutil.WaitStatus(t, h, "owner", func(st handover.Status) bool { return st.Role == handover.RoleOwner })
	if err := rt.Lifecycle(context.Background(), "p", 2); err != nil {
		t.Fatal(err)
	}
	if got := p.created.Load(); got != 2 {
		t.Fatalf("CreateContainer called %d times, want 2", got)
	}
	if p.stub.RequestTimeout() <= 0 || p.stub.RegistrationTimeout() <= 0 || p.stub.RuntimeNRIVersion() == "unknown" ||
		p.stub.Logger() == nil || p.stub.PluginNRIVersion() == "" {
		t.Fatalf("accessors: %v %v %q", p.stub.RequestTimeout(), p.stub.RegistrationTimeout(), p.stub.RuntimeNRIVersion())
	}
	if _, err := p.stub.UpdateContainers(nil); err != nil {
		t.Fatalf("UpdateContainers on the owner: %v", err)
	}
	done := make(chan struct{})
	go func() { p.stub.Wait(); close(done) }()
	p.stub.Stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Stop")
	}
}

// TestDropInRefusesWithConnection: an option that cannot work under the
// harness is refused by name.
func TestDropInRefusesWithConnection(t *testing.T) {
	_, err := stub.New(&plugin{}, stub.WithConnection(nil), stub.WithVersion("1.0.0"))
	if err == nil || !strings.Contains(err.Error(), "stub.WithConnection") {
		t.Fatalf("err %v", err)
	}
}
