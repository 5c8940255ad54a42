// Package stub is a drop-in for github.com/containerd/nri/pkg/stub that runs
// the plugin on the nri-handover harness: the same New, Stub, Option and
// handler interface names, so that converting a stub plugin is changing its
// import path and adding a version:
//
//	import "github.com/nri-handover/nri-handover/plugin/stub" // was github.com/containerd/nri/pkg/stub
//
//	p.stub, err = stub.New(p, append(opts, stub.WithVersion("1.2.0"))...)
//
// Everything else of an upstream-style plugin stays: its own -name, -idx and
// -socket-path flags, `type plugin struct`, stub.WithOnClose, Run(ctx).
// The handlers are the author's, called only while this instance owns the
// plugin (see package plugin for what the harness adds and changes).
//
// The package defines the harness's prefixed flags on flag.CommandLine
// (-handover-dir, -handover-instance, -handover-policy, -handover-version,
// -handover-metrics-addr; see plugin.RegisterHandoverFlags), which cannot
// collide with a plugin's own; New applies those set on the command line
// after its options, so an operator's -handover-version wins over the
// version in the code.
package stub

import (
	"context"
	"errors"
	"flag"
	stdnet "net"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	nristub "github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"

	"github.com/nri-handover/nri-handover/plugin"
)

// The handler interfaces, the same types as containerd/nri's.
type (
	// Plugin is any value implementing one or more handler interfaces.
	Plugin = nristub.Plugin
	// ConfigureInterface handles Configure; it runs again on every
	// reconnect (see plugin.New).
	ConfigureInterface = nristub.ConfigureInterface
	// SynchronizeInterface handles Synchronize, on the owner only, with
	// the containers no instance of the plugin stamped.
	SynchronizeInterface = nristub.SynchronizeInterface
	// ShutdownInterface handles Shutdown, on the owner only.
	ShutdownInterface = nristub.ShutdownInterface
	// RunPodInterface handles RunPodSandbox.
	RunPodInterface = nristub.RunPodInterface
	// UpdatePodInterface handles UpdatePodSandbox.
	UpdatePodInterface = nristub.UpdatePodInterface
	// StopPodInterface handles StopPodSandbox.
	StopPodInterface = nristub.StopPodInterface
	// RemovePodInterface handles RemovePodSandbox.
	RemovePodInterface = nristub.RemovePodInterface
	// PostUpdatePodInterface handles PostUpdatePodSandbox.
	PostUpdatePodInterface = nristub.PostUpdatePodInterface
	// CreateContainerInterface handles CreateContainer.
	CreateContainerInterface = nristub.CreateContainerInterface
	// StartContainerInterface handles StartContainer.
	StartContainerInterface = nristub.StartContainerInterface
	// UpdateContainerInterface handles UpdateContainer.
	UpdateContainerInterface = nristub.UpdateContainerInterface
	// StopContainerInterface handles StopContainer.
	StopContainerInterface = nristub.StopContainerInterface
	// RemoveContainerInterface handles RemoveContainer.
	RemoveContainerInterface = nristub.RemoveContainerInterface
	// PostCreateContainerInterface handles PostCreateContainer.
	PostCreateContainerInterface = nristub.PostCreateContainerInterface
	// PostStartContainerInterface handles PostStartContainer.
	PostStartContainerInterface = nristub.PostStartContainerInterface
	// PostUpdateContainerInterface handles PostUpdateContainer.
	PostUpdateContainerInterface = nristub.PostUpdateContainerInterface
	// ValidateContainerAdjustmentInterface validates adjustments, on the
	// owner only.
	ValidateContainerAdjustmentInterface = nristub.ValidateContainerAdjustmentInterface
	// EventMask is a set of events to subscribe to.
	EventMask = api.EventMask
)

// The stub's default timeouts.
const (
	// DefaultRegistrationTimeout is the default plugin registration timeout.
	DefaultRegistrationTimeout = nristub.DefaultRegistrationTimeout
	// DefaultRequestTimeout is the default plugin request timeout.
	DefaultRequestTimeout = nristub.DefaultRequestTimeout
)

// ErrNoService is returned by UpdateContainers while the plugin is not
// connected to the runtime.
var ErrNoService = nristub.ErrNoService

// ErrNotOwner is returned by UpdateContainers on an instance that does not
// own the plugin.
var ErrNotOwner = plugin.ErrNotOwner

// Stub is what New returns: the methods of containerd/nri's stub.Stub, and
// Harness for what the harness adds.
type Stub interface {
	// Run serves until ctx ends or Stop is called, reconnecting when the
	// runtime goes away; see plugin.Plugin.Run (it also stops on SIGTERM
	// when ctx can never end).
	Run(context.Context) error
	// Start connects and returns once configured; see plugin.Plugin.Start.
	Start(context.Context) error
	// Stop stops the plugin (an owner hands over first) and waits.
	Stop()
	// Wait waits until the plugin stopped.
	Wait()
	// UpdateContainers requests unsolicited container updates, on the
	// owner only (ErrNotOwner otherwise).
	UpdateContainers([]*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
	// RegistrationTimeout is the runtime's registration timeout.
	RegistrationTimeout() time.Duration
	// RequestTimeout is the runtime's request timeout.
	RequestTimeout() time.Duration
	// Logger is the logger given with WithLogger, or NRI's default.
	Logger() nrilog.Logger
	// RuntimeNRIVersion is the runtime's NRI version, if known.
	RuntimeNRIVersion() string
	// PluginNRIVersion is the NRI version the plugin is built with.
	PluginNRIVersion() string
	// Harness is the harness's plugin instance: its role, readiness,
	// statistics, Close.
	Harness() *plugin.Plugin
}

// Option configures New, as containerd/nri's stub.Option does.
type Option func(*options) error

type options struct {
	harness []plugin.Option
	stub    []nristub.Option
	logger  nrilog.Logger
}

// WithVersion sets the plugin's own version, which the harness requires
// (or -handover-version, or $NRI_HANDOVER_VERSION): see plugin.WithVersion.
func WithVersion(v string) Option { return harness(plugin.WithVersion(v)) }

// WithPluginName sets the name the plugin registers with.
func WithPluginName(name string) Option { return harness(plugin.WithPluginName(name)) }

// WithPluginIdx sets the index the plugin registers with.
func WithPluginIdx(idx string) Option { return harness(plugin.WithPluginIdx(idx)) }

// WithSocketPath sets the runtime's NRI socket.
func WithSocketPath(path string) Option { return harness(plugin.WithSocketPath(path)) }

// WithOnClose sets a function called each time the connection to the
// runtime is lost; the harness reconnects all the same (a function that
// exits the process ends this instance, as it ended the stub plugin). See
// plugin.WithOnClose.
func WithOnClose(f func()) Option { return harness(plugin.WithOnClose(f)) }

// WithConnection is refused by New: a connection serves once, and the
// harness reconnects. Use WithSocketPath or WithDialer.
func WithConnection(conn stdnet.Conn) Option {
	return func(*options) error {
		return errors.New("stub.WithConnection: a connection serves once and the harness reconnects; " +
			"use stub.WithSocketPath or stub.WithDialer")
	}
}

// WithDialer sets the function that makes each connection to the runtime.
func WithDialer(d func(string) (stdnet.Conn, error)) Option { return raw(nristub.WithDialer(d)) }

// WithTTRPCOptions sets extra ttrpc client and server options.
func WithTTRPCOptions(clientOpts []ttrpc.ClientOpts, serverOpts []ttrpc.ServerOpt) Option {
	return raw(nristub.WithTTRPCOptions(clientOpts, serverOpts))
}

// WithLogger sets the logger of the NRI stub (the harness logs with
// logrus; see WithHarnessOptions and plugin.WithLogger).
func WithLogger(logger nrilog.Logger) Option {
	return func(o *options) error {
		o.logger = logger
		o.stub = append(o.stub, nristub.WithLogger(logger))
		return nil
	}
}

// WithFailurePolicy sets how the runtime handles the plugin's failures, as
// containerd/nri's stub.WithFailurePolicy.
func WithFailurePolicy(policy *api.FailurePolicy) Option {
	return raw(nristub.WithFailurePolicy(policy))
}

// WithHandoverDir sets the handover directory all instances of the plugin
// on a node share: see plugin.WithHandoverDir.
func WithHandoverDir(dir string) Option { return harness(plugin.WithHandoverDir(dir)) }

// WithInstanceID names this instance: see plugin.WithInstanceID.
func WithInstanceID(id string) Option { return harness(plugin.WithInstanceID(id)) }

// WithHarnessOptions passes options of package plugin: the handover
// directory, instance id, policy, timeouts, logger, Reconcile and so on.
func WithHarnessOptions(opts ...plugin.Option) Option {
	return func(o *options) error {
		o.harness = append(o.harness, opts...)
		return nil
	}
}

func harness(opt plugin.Option) Option {
	return func(o *options) error {
		o.harness = append(o.harness, opt)
		return nil
	}
}

func raw(opt nristub.Option) Option {
	return func(o *options) error {
		o.stub = append(o.stub, opt)
		return nil
	}
}

// flags are the harness's prefixed flags, on flag.CommandLine.
var flags = plugin.RegisterHandoverFlags(flag.CommandLine)

// New creates the plugin p on the harness, as containerd/nri's stub.New:
// p implements any of the handler interfaces (and may implement
// plugin.ReconcileInterface). See plugin.New.
func New(p interface{}, opts ...Option) (Stub, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	hopts := append(o.harness, plugin.WithStubOptions(o.stub...))
	if flag.CommandLine.Parsed() {
		fromFlags, err := flags.Options()
		if err != nil {
			return nil, err
		}
		hopts = append(hopts, fromFlags...)
	}
	pl, err := plugin.New(p, hopts...)
	if err != nil {
		return nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = nrilog.Get()
	}
	return &harnessStub{Plugin: pl, logger: logger}, nil
}

// harnessStub is a plugin.Plugin with the stub's method set.
type harnessStub struct {
	*plugin.Plugin
	logger nrilog.Logger
}

func (s *harnessStub) Harness() *plugin.Plugin { return s.Plugin }
func (s *harnessStub) Logger() nrilog.Logger   { return s.logger }
