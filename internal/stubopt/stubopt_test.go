package stubopt

import (
	"net"
	"testing"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
)

// TestInspectEveryStubOption: each stub.Option of the NRI version in
// go.mod is recognised by the field it sets and named after its constructor.
func TestInspectEveryStubOption(t *testing.T) {
	called := 0
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	for _, tc := range []struct {
		opt   stub.Option
		name  string
		field string
	}{
		{stub.WithOnClose(func() { called++ }), "stub.WithOnClose", "onClose"},
		{stub.WithPluginName("x+y"), "stub.WithPluginName", "name"},
		{stub.WithPluginIdx("42"), "stub.WithPluginIdx", "idx"},
		{stub.WithSocketPath("/run/x.sock"), "stub.WithSocketPath", "socketPath"},
		{stub.WithConnection(c1), "stub.WithConnection", "conn"},
		{stub.WithDialer(func(string) (net.Conn, error) { return nil, nil }), "stub.WithDialer", "dialer"},
		{stub.WithTTRPCOptions([]ttrpc.ClientOpts{ttrpc.WithOnClose(func() {})}, nil), "stub.WithTTRPCOptions", "clientOpts"},
		{stub.WithLogger(nrilog.Get()), "stub.WithLogger", "logger"},
		{stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true}), "stub.WithFailurePolicy", "failurePolicy"},
	} {
		e, err := Inspect(tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if e.Name != tc.name || len(e.Fields) != 1 || !e.Sets(tc.field) {
			t.Errorf("Inspect(%s) = %+v, want name %s setting only %s", tc.name, e, tc.name, tc.field)
		}
	}
	e, _ := Inspect(stub.WithOnClose(func() { called++ }))
	e.OnClose()
	if called != 1 {
		t.Errorf("the OnClose read back did not call the author's function")
	}
	if e, _ := Inspect(stub.WithPluginName("x+y")); e.PluginName != "x+y" {
		t.Errorf("PluginName = %q", e.PluginName)
	}
	if e, _ := Inspect(stub.WithPluginIdx("42")); e.PluginIdx != "42" {
		t.Errorf("PluginIdx = %q", e.PluginIdx)
	}
	if e, _ := Inspect(stub.WithSocketPath("/run/x.sock")); e.SocketPath != "/run/x.sock" {
		t.Errorf("SocketPath = %q", e.SocketPath)
	}
	if _, err := Inspect(stub.WithFailurePolicy(nil)); err == nil {
		t.Error("a failing option was not reported")
	}
}
