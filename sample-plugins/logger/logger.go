// Package logger is a sample NRI plugin that observes every pod and
// container event and logs one line for each, changing nothing. Its
// commands are built twice from the same source: cmd/nri-logger on the
// nri-handover harness, cmd/nri-logger-bare on the bare NRI stub.
package logger

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// Logger implements every event handler of the NRI stub, and Synchronize.
type Logger struct {
	// Log receives one entry per event, with fields "event" and "id".
	Log *logrus.Entry
}

func (l *Logger) log(event, id string) {
	l.Log.WithFields(logrus.Fields{"event": event, "id": id}).Info("event")
}

// Synchronize logs the pods and containers the runtime has.
func (l *Logger) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	l.Log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(ctrs)}).Info("synchronized")
	return nil, nil
}

// RunPodSandbox logs the event.
func (l *Logger) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	l.log("RunPodSandbox", pod.GetId())
	return nil
}

// UpdatePodSandbox logs the event.
func (l *Logger) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	l.log("UpdatePodSandbox", pod.GetId())
	return nil
}

// PostUpdatePodSandbox logs the event.
func (l *Logger) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	l.log("PostUpdatePodSandbox", pod.GetId())
	return nil
}

// StopPodSandbox logs the event.
func (l *Logger) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	l.log("StopPodSandbox", pod.GetId())
	return nil
}

// RemovePodSandbox logs the event.
func (l *Logger) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	l.log("RemovePodSandbox", pod.GetId())
	return nil
}

// CreateContainer logs the event and adjusts nothing.
func (l *Logger) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	l.log("CreateContainer", c.GetId())
	return nil, nil, nil
}

// PostCreateContainer logs the event.
func (l *Logger) PostCreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	l.log("PostCreateContainer", c.GetId())
	return nil
}

// StartContainer logs the event.
func (l *Logger) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	l.log("StartContainer", c.GetId())
	return nil
}

// PostStartContainer logs the event.
func (l *Logger) PostStartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	l.log("PostStartContainer", c.GetId())
	return nil
}

// UpdateContainer logs the event and requests nothing.
func (l *Logger) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	l.log("UpdateContainer", c.GetId())
	return nil, nil
}

// PostUpdateContainer logs the event.
func (l *Logger) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	l.log("PostUpdateContainer", c.GetId())
	return nil
}

// StopContainer logs the event and requests nothing.
func (l *Logger) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	l.log("StopContainer", c.GetId())
	return nil, nil
}

// RemoveContainer logs the event.
func (l *Logger) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	l.log("RemoveContainer", c.GetId())
	return nil
}
