package plugin

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
)

// Environment variables read by New when the matching option is not given.
const (
	// EnvInstance names this instance; set it from the pod name with the
	// downward API so that status and logs show which pod is which.
	EnvInstance = "NRI_HANDOVER_INSTANCE"
	// EnvDir overrides the handover root directory.
	EnvDir = "NRI_HANDOVER_DIR"
	// EnvPolicy selects the handover policy by name.
	EnvPolicy = "NRI_HANDOVER_POLICY"
	// EnvFailpoint is for fault tests only: "<step>:<action>" makes the
	// instance kill itself (action "kill", SIGKILL) or stop itself ("stop",
	// SIGSTOP) when the handover protocol reaches step (a handover.Step,
	// e.g. "yield-decided"). Never set it in production.
	EnvFailpoint = "NRI_HANDOVER_FAILPOINT"
)

// Option configures a Plugin, in the functional-options style of the NRI
// stub.
type Option func(*config) error

type config struct {
	name, idx    string
	key          string // names.Key(name): stamps and the handover directory
	version      string
	socketPath   string
	root         string
	instance     string
	policy       handover.Policy
	claimTimeout time.Duration
	leaveTimeout time.Duration
	log          *logrus.Entry
	stubOptions  []stub.Option
	// From stubOptions, sorted by New: those passed to every stub, and
	// the authors' close callbacks (with WithOnClose's).
	passStubOptions []stub.Option
	onClose         []func()
	metricsAddr     string
	started         time.Time
	// stopSignals, if stopSignalsSet, replace the default (see Run).
	stopSignals    []os.Signal
	stopSignalsSet bool
}

// WithVersion sets the plugin's own version (required): it is reported to
// the other instances, written into every stamp and compared by policies.
// Any version hashicorp/go-version accepts, e.g. "1.4.0" or "2.0.0-rc.1".
func WithVersion(v string) Option {
	return func(c *config) error { c.version = v; return nil }
}

// WithPluginName sets the name the plugin registers with (as stub.WithPluginName).
func WithPluginName(name string) Option {
	return func(c *config) error { c.name = name; return nil }
}

// WithPluginIdx sets the two-digit index the plugin registers with (as stub.WithPluginIdx).
func WithPluginIdx(idx string) Option {
	return func(c *config) error { c.idx = idx; return nil }
}

// WithSocketPath sets the runtime's NRI socket (default /var/run/nri/nri.sock).
func WithSocketPath(path string) Option {
	return func(c *config) error { c.socketPath = path; return nil }
}

// WithHandoverDir sets the node-local handover root directory (default
// /var/run/nri-handover, or $NRI_HANDOVER_DIR). Every instance of a plugin
// on a node must use the same one.
func WithHandoverDir(dir string) Option {
	return func(c *config) error { c.root = dir; return nil }
}

// WithInstanceID names this instance (default $NRI_HANDOVER_INSTANCE, else
// a random id). Ids must be unique among the running instances of a plugin.
func WithInstanceID(id string) Option {
	return func(c *config) error { c.instance = id; return nil }
}

// WithPolicy sets who may take over: handover.NewestInstance (default) or
// handover.NewestVersion.
func WithPolicy(p handover.Policy) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("nil handover policy")
		}
		c.policy = p
		return nil
	}
}

// WithClaimTimeout bounds the negotiation inside Synchronize (default
// 500 ms). It must stay well below the runtime's request timeout.
func WithClaimTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("claim timeout %v: must be positive", d)
		}
		c.claimTimeout = d
		return nil
	}
}

// WithLeaveTimeout bounds how long a stopping owner waits for a standby to
// take over (default 10 s). Keep it below the pod's termination grace period.
func WithLeaveTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("leave timeout %v: must not be negative", d)
		}
		c.leaveTimeout = d
		return nil
	}
}

// WithLogger sets the logrus entry the harness logs to.
func WithLogger(l *logrus.Entry) Option {
	return func(c *config) error { c.log = l; return nil }
}

// WithStopSignals sets the signals on which Run and Start stop the plugin
// (an owner hands over first), whatever context they are given;
// WithStopSignals() with none leaves every signal to the caller. Without
// this option the harness stops on SIGTERM and SIGINT only when its
// context can never end (context.Background()), so that an upstream-style
// Run(context.Background()) does not lose the handover on SIGTERM.
func WithStopSignals(sigs ...os.Signal) Option {
	return func(c *config) error {
		c.stopSignals, c.stopSignalsSet = sigs, true
		return nil
	}
}

// WithMetricsAddr serves /metrics, /healthz and /readyz (see
// Plugin.Handler) on addr, e.g. ":9101", while Run runs. Default: off.
func WithMetricsAddr(addr string) Option {
	return func(c *config) error { c.metricsAddr = addr; return nil }
}

// WithOnClose sets a function to call each time the connection to the
// runtime is lost, as stub.WithOnClose does; the harness reconnects
// afterwards all the same (so a function that exits the process, as
// upstream samples do, ends this instance as it ended the stub plugin). It
// is not called when the harness itself closes a connection: to reconnect
// for a handover, or at the end of Run.
func WithOnClose(f func()) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("nil OnClose function")
		}
		c.onClose = append(c.onClose, f)
		return nil
	}
}

// WithStubOptions passes options to the underlying NRI stub, which the
// harness creates anew for each connection to the runtime. New checks each:
//
//   - stub.WithOnClose: called in addition to the harness's own callback,
//     as WithOnClose says;
//   - stub.WithPluginName, stub.WithPluginIdx: accepted when they agree
//     with the plugin's name and index, refused otherwise;
//   - stub.WithSocketPath: as WithSocketPath;
//   - stub.WithDialer, stub.WithTTRPCOptions, stub.WithLogger,
//     stub.WithFailurePolicy: applied to every connection;
//   - stub.WithConnection: refused (a connection serves once; the harness
//     reconnects), as is any option the harness does not know.
func WithStubOptions(opts ...stub.Option) Option {
	return func(c *config) error { c.stubOptions = append(c.stubOptions, opts...); return nil }
}

// Flags holds the command-line flags a plugin binary usually offers.
type Flags struct {
	Name, Idx, Socket, Dir, Instance, Policy, MetricsAddr string
}

// RegisterFlags defines -name, -idx, -nri-socket, -handover-dir, -instance,
// -policy and -metrics-addr on fs. Pass the result's Options to New after parsing.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Name, "name", "", "plugin name to register with (default: $NRI_PLUGIN_NAME or the binary name)")
	fs.StringVar(&f.Idx, "idx", "", "plugin index to register with (default: $NRI_PLUGIN_IDX)")
	fs.StringVar(&f.Socket, "nri-socket", "", "NRI socket of the runtime (default /var/run/nri/nri.sock)")
	fs.StringVar(&f.Dir, "handover-dir", "", "handover directory shared by the instances (default "+handover.DefaultRoot+")")
	fs.StringVar(&f.Instance, "instance", "", "instance id (default: $"+EnvInstance+" or random)")
	fs.StringVar(&f.Policy, "policy", "", "who may take over: newest-instance (default) or newest-version")
	fs.StringVar(&f.MetricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (default: off)")
	return f
}

// Options turns the parsed flags into options; unset flags add nothing.
func (f *Flags) Options() ([]Option, error) {
	var opts []Option
	if f.Name != "" {
		opts = append(opts, WithPluginName(f.Name))
	}
	if f.Idx != "" {
		opts = append(opts, WithPluginIdx(f.Idx))
	}
	if f.Socket != "" {
		opts = append(opts, WithSocketPath(f.Socket))
	}
	if f.Dir != "" {
		opts = append(opts, WithHandoverDir(f.Dir))
	}
	if f.Instance != "" {
		opts = append(opts, WithInstanceID(f.Instance))
	}
	if f.MetricsAddr != "" {
		opts = append(opts, WithMetricsAddr(f.MetricsAddr))
	}
	if f.Policy != "" {
		p, err := handover.ParsePolicy(f.Policy)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithPolicy(p))
	}
	return opts, nil
}

// applyDefaults fills in what neither options nor flags set, from the
// environment as NRI does, then from defaults.
func (c *config) applyDefaults() error {
	if c.root == "" {
		c.root = os.Getenv(EnvDir)
	}
	if c.root == "" {
		c.root = handover.DefaultRoot
	}
	if c.instance == "" {
		c.instance = os.Getenv(EnvInstance)
	}
	if c.policy == nil {
		p, err := handover.ParsePolicy(os.Getenv(EnvPolicy))
		if err != nil {
			return fmt.Errorf("$%s: %w", EnvPolicy, err)
		}
		c.policy = p
	}
	if c.claimTimeout == 0 {
		c.claimTimeout = handover.DefaultClaimTimeout
	}
	if c.leaveTimeout == 0 {
		c.leaveTimeout = handover.DefaultLeaveTimeout
	}
	if c.log == nil {
		c.log = logrus.NewEntry(logrus.StandardLogger())
	}
	return nil
}
