// Package resources is a sample NRI plugin that adjusts containers as they
// are created: a container without a memory limit gets a default one, and
// every container the configured CPU shares. Its commands are built twice
// from the same source: cmd/nri-resources on the nri-handover harness,
// cmd/nri-resources-bare on the bare NRI stub.
package resources

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// Defaults adjusts containers on CreateContainer.
type Defaults struct {
	// MemoryLimit is set on containers that have none (bytes; 0: none).
	MemoryLimit int64
	// CPUShares is set on every container (0: none).
	CPUShares uint64
	// Log receives one entry per adjusted container.
	Log *logrus.Entry
}

// CreateContainer sets the default memory limit and CPU shares.
func (d *Defaults) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	fields := logrus.Fields{"container": c.GetName(), "id": c.GetId()}
	if d.MemoryLimit > 0 && c.GetLinux().GetResources().GetMemory().GetLimit().GetValue() == 0 {
		adjust.SetLinuxMemoryLimit(d.MemoryLimit)
		fields["memory_limit"] = d.MemoryLimit
	}
	if d.CPUShares > 0 {
		adjust.SetLinuxCPUShares(d.CPUShares)
		fields["cpu_shares"] = d.CPUShares
	}
	d.Log.WithFields(fields).Info("adjusted")
	return adjust, nil, nil
}
