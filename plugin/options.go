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
	// EnvLeaveTimeout sets the leave timeout (WithLeaveTimeout) as a Go
	// duration, e.g. "10s".
	EnvLeaveTimeout = "NRI_HANDOVER_LEAVE_TIMEOUT"
	// EnvVersion is the plugin's version when neither WithVersion nor
	// -handover-version gives it.
	EnvVersion = "NRI_HANDOVER_VERSION"
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
	atLeastOnce    bool
}

// WithVersion sets the plugin's own version (required, here, by
// -handover-version or by $NRI_HANDOVER_VERSION): it is reported to the
// other instances, written into every stamp and compared by policies. Any
// version hashicorp/go-version accepts, e.g. "1.4.0" or "2.0.0-rc.1". Of
// several WithVersion options the last counts.
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
// handover.NewestVersion. A newcomer the policy refuses stays standby: it
// keeps its connection (its Configure ran, its other handlers are not
// called) and claims again in a new Synchronize, after reconnecting, once
// the owner leaves.
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
// 500 ms). It must stay well below the runtime's request timeout: the
// author's Synchronize runs after the claim, in the same request.
func WithClaimTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("claim timeout %v: must be positive", d)
		}
		c.claimTimeout = d
		return nil
	}
}

// WithLeaveTimeout bounds how long a stopping owner keeps acting while it
// waits for a successor to take over: a standby, or with none running a new
// instance (the pod re-created by its DaemonSet). Default 10 s, or
// $NRI_HANDOVER_LEAVE_TIMEOUT. Keep it below the pod's termination grace
// period. An owner with no successor in time, or whose runtime connection
// is gone, stops without a handover.
func WithLeaveTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("leave timeout %v: must not be negative", d)
		}
		c.leaveTimeout = d
		return nil
	}
}

// WithAtLeastOnce makes an event in doubt be acted on again: when an owner
// dies inside a handler, the instance that takes over cannot know whether
// that event took effect; by default it does not act on it (at most once),
// with this option it does (at least once): at once if the runtime calls
// it for that event after the owner, else late, with a context that says
// CatchingUp (see InDoubtInterface for what is handed when). Either way
// the event is logged, counted (Stats.InDoubt, nri_handover_in_doubt_total)
// and passed to the author's InDoubt, if it has one.
func WithAtLeastOnce() Option {
	return func(c *config) error { c.atLeastOnce = true; return nil }
}

// WithLogger sets the logrus entry the harness logs to. Default: logrus's
// standard logger; with millisecond timestamps if its
// formatter is logrus's default.
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
// metrics.Handler) on addr, e.g. ":9101", while Run runs. Default: off.
// The metrics are in package plugin/metrics, which the binary must import
// (import _ "github.com/nri-handover/nri-handover/plugin/metrics"): New
// refuses an address without it, so that a binary without metrics links
// no Prometheus client.
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
// harness creates anew for each connection to the runtime (so the author's
// Configure runs again on each). New checks each:
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

// Flags holds the command-line flags a plugin binary offers for the
// harness; see RegisterFlags.
type Flags struct {
	name, idx, socket, dir, instance, policy, version, metricsAddr string // the flags' values

	fs      *flag.FlagSet
	adopted map[*string]string // field -> name of a flag defined before RegisterFlags
}

// RegisterFlags defines the harness's flags on fs; pass the result's
// Options to New after parsing. Its own flags carry a prefix, so they
// cannot collide with a plugin's:
//
//	-handover-dir       the handover directory (default /var/run/nri-handover, $NRI_HANDOVER_DIR)
//	-handover-instance  this instance's id ($NRI_HANDOVER_INSTANCE; -instance is an alias)
//	-handover-policy    newest-instance or newest-version ($NRI_HANDOVER_POLICY; alias -policy)
//	-handover-version   the plugin's version ($NRI_HANDOVER_VERSION)
//	-handover-metrics-addr  serve /metrics, /healthz, /readyz (alias -metrics-addr)
//
// The registration flags are NRI's: -name, -idx and -socket-path (alias
// -nri-socket). A flag of any of these names that fs already has, such as
// the -name, -idx and -socket-path every upstream sample defines, is
// adopted, not defined again: its value is read when Options is called. So
// call RegisterFlags after defining your own flags. An alias is defined
// only when fs does not have that name already.
func RegisterFlags(fs *flag.FlagSet) *Flags { return registerFlags(fs, true) }

// RegisterHandoverFlags defines only the harness's prefixed flags of
// RegisterFlags (-handover-dir, -handover-instance, -handover-policy,
// -handover-version, -handover-metrics-addr), none of NRI's or the aliases,
// so it may be called before the plugin defines its own flags. -name, -idx
// and -socket-path are still adopted if fs has them when Options is called.
func RegisterHandoverFlags(fs *flag.FlagSet) *Flags { return registerFlags(fs, false) }

func registerFlags(fs *flag.FlagSet, full bool) *Flags {
	f := &Flags{fs: fs, adopted: map[*string]string{}}
	def := func(target *string, name, usage string, aliases ...string) {
		if fs.Lookup(name) != nil {
			f.adopted[target] = name
		} else {
			fs.StringVar(target, name, "", usage)
		}
		for _, a := range aliases {
			if full && fs.Lookup(a) == nil {
				fs.StringVar(target, a, "", "alias of -"+name)
			}
		}
	}
	nri := func(target *string, name, usage string, aliases ...string) {
		if full {
			def(target, name, usage, aliases...)
		} else {
			f.adopted[target] = name // if someone defines it
		}
	}
	nri(&f.name, "name", "plugin name to register with (default: $NRI_PLUGIN_NAME or the binary name)")
	nri(&f.idx, "idx", "plugin index to register with (default: $NRI_PLUGIN_IDX)")
	nri(&f.socket, "socket-path", "NRI socket of the runtime (default /var/run/nri/nri.sock)", "nri-socket")
	def(&f.dir, "handover-dir", "handover directory shared by the instances (default $"+EnvDir+" or "+handover.DefaultRoot+")")
	def(&f.instance, "handover-instance", "instance id (default: $"+EnvInstance+" or random)", "instance")
	def(&f.policy, "handover-policy", "who may take over: newest-instance (default) or newest-version (default: $"+EnvPolicy+")", "policy")
	def(&f.version, "handover-version", "the plugin's version, reported and stamped (default: $"+EnvVersion+")")
	def(&f.metricsAddr, "handover-metrics-addr", "serve /metrics, /healthz and /readyz on this address (default: off)", "metrics-addr")
	return f
}

// Options turns the parsed flags into options; unset flags add nothing.
func (f *Flags) Options() ([]Option, error) {
	for target, name := range f.adopted {
		if *target == "" {
			if fl := f.fs.Lookup(name); fl != nil {
				*target = fl.Value.String()
			}
		}
	}
	var opts []Option
	if f.name != "" {
		opts = append(opts, WithPluginName(f.name))
	}
	if f.idx != "" {
		opts = append(opts, WithPluginIdx(f.idx))
	}
	if f.socket != "" {
		opts = append(opts, WithSocketPath(f.socket))
	}
	if f.dir != "" {
		opts = append(opts, WithHandoverDir(f.dir))
	}
	if f.instance != "" {
		opts = append(opts, WithInstanceID(f.instance))
	}
	if f.version != "" {
		opts = append(opts, WithVersion(f.version))
	}
	if f.metricsAddr != "" {
		opts = append(opts, WithMetricsAddr(f.metricsAddr))
	}
	if f.policy != "" {
		p, err := handover.ParsePolicy(f.policy)
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
	if c.version == "" {
		c.version = os.Getenv(EnvVersion)
	}
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
		if v := os.Getenv(EnvLeaveTimeout); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("$%s=%q: want a positive duration such as 10s", EnvLeaveTimeout, v)
			}
			c.leaveTimeout = d
		}
	}
	if c.leaveTimeout == 0 {
		c.leaveTimeout = handover.DefaultLeaveTimeout
	}
	if c.log == nil {
		c.log = logrus.NewEntry(defaultLogger())
	}
	return nil
}

// timestampFormat is the harness's log timestamp: milliseconds, to see
// the steps of a handover apart.
const timestampFormat = "2006-01-02T15:04:05.000Z07:00"

// defaultLogger is logrus's standard logger, or, if its formatter is still
// logrus's default (second resolution), a logger with the standard
// logger's output, level and hooks at the time of New and millisecond
// timestamps.
func defaultLogger() *logrus.Logger {
	std := logrus.StandardLogger()
	tf, ok := std.Formatter.(*logrus.TextFormatter)
	if !ok || tf.TimestampFormat != "" {
		return std // the author chose a format
	}
	l := logrus.New()
	l.SetOutput(std.Out)
	l.SetLevel(std.GetLevel())
	l.ReplaceHooks(std.Hooks)
	l.ExitFunc = std.ExitFunc
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: timestampFormat,
		DisableColors: tf.DisableColors, ForceColors: tf.ForceColors})
	return l
}
