// Package audit is a sample NRI plugin whose work is visibly not
// idempotent: it injects an environment variable into every container it
// creates and records one line per event it acts on. Run by two uncoordinated
// instances, the runtime rejects containers ("both tried to set") and the
// record shows events twice; run by the nri-handover harness, neither happens.
package audit

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/containerd/nri/pkg/api"
)

// EnvVar is the environment variable the plugin injects; its value is the
// plugin version that created the container.
const EnvVar = "NRI_AUDIT_VERSION"

// Recorder receives one record per event the plugin acts on.
type Recorder interface {
	Record(event, objectID string) error
}

// Plugin is the audit plugin. It implements every NRI container and pod
// event handler of the stub.
type Plugin struct {
	// Version is written into the injected environment variable.
	Version string
	// Recorder receives the records; required.
	Recorder Recorder
}

// PluginPodLabel and PluginPodValue mark the pods of NRI plugins: the
// shipped manifests and the chart label every plugin pod
// app.kubernetes.io/component=nri-plugin. The plugin leaves their
// containers' environment alone (it still records their events): during a
// rollout the old pod would otherwise inject its variable into the
// container of its own successor.
const (
	PluginPodLabel = "app.kubernetes.io/component"
	PluginPodValue = "nri-plugin"
)

// CreateContainer injects EnvVar, except into the containers of plugin
// pods (see PluginPodLabel), and records the event.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	if pod.GetLabels()[PluginPodLabel] != PluginPodValue {
		adjust.AddEnv(EnvVar, p.Version)
	}
	return adjust, nil, p.Recorder.Record("CreateContainer", c.GetId())
}

// UpdateContainer records the event.
func (p *Plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	return nil, p.Recorder.Record("UpdateContainer", c.GetId())
}

// StopContainer records the event.
func (p *Plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.Recorder.Record("StopContainer", c.GetId())
}

// PostCreateContainer records the event.
func (p *Plugin) PostCreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.Recorder.Record("PostCreateContainer", c.GetId())
}

// StartContainer records the event.
func (p *Plugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.Recorder.Record("StartContainer", c.GetId())
}

// PostStartContainer records the event.
func (p *Plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.Recorder.Record("PostStartContainer", c.GetId())
}

// PostUpdateContainer records the event.
func (p *Plugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.Recorder.Record("PostUpdateContainer", c.GetId())
}

// RemoveContainer records the event.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.Recorder.Record("RemoveContainer", c.GetId())
}

// RunPodSandbox records the event.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Recorder.Record("RunPodSandbox", pod.GetId())
}

// UpdatePodSandbox records the event.
func (p *Plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	return p.Recorder.Record("UpdatePodSandbox", pod.GetId())
}

// PostUpdatePodSandbox records the event.
func (p *Plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Recorder.Record("PostUpdatePodSandbox", pod.GetId())
}

// StopPodSandbox records the event.
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Recorder.Record("StopPodSandbox", pod.GetId())
}

// RemovePodSandbox records the event.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Recorder.Record("RemovePodSandbox", pod.GetId())
}

// FileRecorder appends one line per record to a file shared by all
// instances: "<event> <object> <instance> <version>". Each line is one
// write(2) on an O_APPEND file, so lines of concurrent writers never mix.
type FileRecorder struct {
	mu                sync.Mutex
	f                 *os.File
	instance, version string
}

// OpenFileRecorder opens (creating, 0644) the ledger file at path.
func OpenFileRecorder(path, instance, version string) (*FileRecorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open audit ledger: %w", err)
	}
	return &FileRecorder{f: f, instance: instance, version: version}, nil
}

// Record implements Recorder.
func (r *FileRecorder) Record(event, objectID string) error {
	line := fmt.Sprintf("%s %s %s %s\n", event, objectID, r.instance, r.version)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.WriteString(line); err != nil {
		return fmt.Errorf("write audit ledger: %w", err)
	}
	return nil
}

// Close closes the ledger file.
func (r *FileRecorder) Close() error { return r.f.Close() }
