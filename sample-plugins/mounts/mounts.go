// Package mounts is a sample NRI plugin that injects mounts into containers
// as their pod's annotations ask:
//
//	mounts.nri-handover.io/container.<container name>: "<source>:<destination>[:ro][,...]"
//
// Its commands are built twice from the same source: cmd/nri-mounts on the
// nri-handover harness, cmd/nri-mounts-bare on the bare NRI stub.
package mounts

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// AnnotationPrefix, followed by a container's name, is the pod annotation
// that lists the mounts for that container.
const AnnotationPrefix = "mounts.nri-handover.io/container."

// Injector injects the annotated mounts on CreateContainer.
type Injector struct {
	// Log receives one entry per injected mount.
	Log *logrus.Entry
}

// CreateContainer adds the mounts the pod's annotation lists for c.
func (i *Injector) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	spec, ok := pod.GetAnnotations()[AnnotationPrefix+c.GetName()]
	if !ok {
		return nil, nil, nil
	}
	mounts, err := Parse(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("pod %s, container %s: %w", pod.GetName(), c.GetName(), err)
	}
	adjust := &api.ContainerAdjustment{}
	for _, m := range mounts {
		adjust.AddMount(m)
		i.Log.WithFields(logrus.Fields{"container": c.GetName(), "source": m.Source, "destination": m.Destination}).
			Info("mount injected")
	}
	return adjust, nil, nil
}

// Parse reads "<source>:<destination>[:ro]" items separated by commas
// into bind mounts.
func Parse(spec string) ([]*api.Mount, error) {
	var out []*api.Mount
	for _, item := range strings.Split(spec, ",") {
		parts := strings.Split(strings.TrimSpace(item), ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" ||
			len(parts) == 3 && parts[2] != "ro" {
			return nil, fmt.Errorf("mount %q: want <source>:<destination>[:ro]", item)
		}
		opts := []string{"rbind", "rprivate"}
		if len(parts) == 3 {
			opts = append(opts, "ro")
		}
		out = append(out, &api.Mount{Source: parts[0], Destination: parts[1], Type: "bind", Options: opts})
	}
	return out, nil
}
