package validator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/sample-plugins/validator"
)

// counted is the validator, counting its calls.
type counted struct {
	*validator.MountPolicy
	calls atomic.Int64
}

func (c *counted) ValidateContainerAdjustment(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	c.calls.Add(1)
	return c.MountPolicy.ValidateContainerAdjustment(ctx, req)
}

func policy() *counted {
	l := logrus.New()
	l.SetOutput(testutil.Discard)
	return &counted{MountPolicy: &validator.MountPolicy{Allowed: []string{"/var/lib/shared"}, Log: logrus.NewEntry(l)}}
}

// mounter is another plugin that mounts what a container's name says.
type mounter struct{}

func (mounter) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	a := &api.ContainerAdjustment{}
	a.AddMount(&api.Mount{Source: "/" + c.Name, Destination: "/x", Type: "bind"})
	return a, nil, nil
}

// TestUpgrade: across an upgrade the validator refuses exactly the
// adjustments it must, each validated once, by the owner.
func TestUpgrade(t *testing.T) {
	rt := testutil.StartRuntime(t, sim.Options{})
	root := testutil.ShortTempDir(t, "nhv-")
	testutil.StartOwner(t, rt, testutil.ShortTempDir(t, "nhw-"), "mounter", "m", "1.0.0", mounter{})
	check := func(prefix string) {
		t.Helper()
		pod, err := rt.RunPod(context.Background(), prefix)
		if err != nil {
			t.Fatal(err)
		}
		var rej *sim.CreateRejectedError
		if _, err := rt.CreateContainer(context.Background(), pod.Id, "var/lib/shared", nil); err != nil {
			t.Errorf("allowed mount refused: %v", err)
		}
		if _, err := rt.CreateContainer(context.Background(), pod.Id, "etc", nil); !errors.As(err, &rej) {
			t.Errorf("mount of /etc: %v, want it refused", err)
		}
	}
	v1p, v2p := policy(), policy()
	_, v1 := testutil.StartOwner(t, rt, root, "validator", "v1", "1.0.0", v1p)
	check("a")
	testutil.StartOwner(t, rt, root, "validator", "v2", "2.0.0", v2p)
	if err := v1.Stop(); err != nil {
		t.Fatal(err)
	}
	check("b")
	if a, b := v1p.calls.Load(), v2p.calls.Load(); a != 2 || b != 2 {
		t.Errorf("validations: v1 %d, v2 %d; want 2 each", a, b)
	}
}
