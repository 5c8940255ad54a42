package main

// nri-handover status: who owns each plugin on this node, who waits, who
// retired, and the last handover, asked of the instances themselves over
// their handover sockets.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/names"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/plugin"
)

const statusUsage = `usage: nri-handover status [--dir D] [--json] [--timeout T] [PLUGIN]

Shows, for every plugin in the handover directory (or only PLUGIN), which
instance owns it (its role is owner and owner.sock leads to it), its version
and start time, the standbys waiting, the retired instances and the last
handover, as the instances report it over their sockets. Instances that do
not answer within the timeout are shown as "not answering"; the socket file
of an instance that died without removing it is shown as "gone".

Exit status: 0 if every plugin shown has an owner that answers, 1 if one
has none (or the directory cannot be read), 2 on usage errors.

flags:
`

// Exit codes shared by status and probe.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// exitError carries the exit code a command ends with. printed means the
// command has already written the reason to its output (probes print their
// one line themselves), so main prints nothing more.
type exitError struct {
	code    int
	err     error
	printed bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode maps a command's error to its exit code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailed
}

// runCommand runs cmd and turns its result into an exit code, writing the
// error (and, for usage errors, the usage text) to stderr.
func runCommand(name, usage string, flags func(io.Writer) *flag.FlagSet, cmd func([]string, io.Writer) error,
	args []string, stdout, stderr io.Writer) int {
	err := cmd(args, stdout)
	code := exitCode(err)
	if err == nil {
		return code
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.printed {
		return code
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		flags(stdout).PrintDefaults()
		return exitOK
	}
	fmt.Fprintf(stderr, "nri-handover %s: %v\n", name, err)
	if code == exitUsage {
		fmt.Fprintln(stderr)
		fmt.Fprint(stderr, usage)
		flags(stderr).PrintDefaults()
	}
	return code
}

// statusMain is the status command as main runs it.
func statusMain(args []string, stdout, stderr io.Writer) int {
	return runCommand("status", statusUsage, func(w io.Writer) *flag.FlagSet {
		f, _ := statusFlags(w)
		return f
	}, status, args, stdout, stderr)
}

// defaultRoot is the handover root used when --dir is not given: the
// plugins' own default ($NRI_HANDOVER_DIR, else /var/run/nri-handover).
func defaultRoot() string {
	if d := os.Getenv(plugin.EnvDir); d != "" {
		return d
	}
	return handover.DefaultRoot
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("status audit --json"), and returns the positional
// ones. Everything after "--" is positional.
func parseInterleaved(flags *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := flags.Parse(args); err != nil {
			return nil, err
		}
		rest := flags.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

type statusOptions struct {
	dir     string
	json    bool
	timeout time.Duration
}

func statusFlags(out io.Writer) (*flag.FlagSet, *statusOptions) {
	o := &statusOptions{}
	flags := flag.NewFlagSet("status", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	if out != nil {
		flags.SetOutput(out)
	}
	flags.StringVar(&o.dir, "dir", defaultRoot(), "handover directory shared by the plugins' instances ($"+plugin.EnvDir+")")
	flags.BoolVar(&o.json, "json", false, "print one JSON document instead of tables")
	flags.DurationVar(&o.timeout, "timeout", time.Second, "how long each instance has to answer")
	return flags, o
}

// instanceState says whether an instance answered.
const (
	stateAnswering    = "answering"
	stateNotAnswering = "not answering"
	stateGone         = "gone"
)

// instanceReport is one instance as status shows it.
type instanceReport struct {
	ID     string `json:"id"`
	Socket string `json:"socket"`
	// State is "answering", "not answering" (no answer within the
	// timeout: hung, stopped, overloaded) or "gone" (a socket file
	// nothing listens on: the instance died without removing it).
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Role is the role the instance reports (owner, standby, retired,
	// joining); empty if it did not answer.
	Role    string     `json:"role,omitempty"`
	Version string     `json:"version,omitempty"`
	Started *time.Time `json:"started,omitempty"`
	PID     int32      `json:"pid,omitempty"`
	Epoch   uint64     `json:"epoch,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	Leaving bool       `json:"leaving,omitempty"`
	// Watchers are the standbys watching this instance (on the owner).
	Watchers []string `json:"watchers,omitempty"`
	// HoldsOwnerName: owner.sock leads to this instance's socket file.
	HoldsOwnerName bool `json:"holds_owner_name"`
	// Owner: the role is owner and owner.sock leads here.
	Owner bool `json:"owner"`
	// Superseded: the role is owner but owner.sock leads to another
	// instance, which took over while this one did not answer; it
	// retires at its next event.
	Superseded bool `json:"superseded,omitempty"`

	last *hapi.HandoverRecord
}

// handoverReport is the last handover as the instances recorded it.
type handoverReport struct {
	From        string    `json:"from"`
	FromVersion string    `json:"from_version"`
	To          string    `json:"to"`
	ToVersion   string    `json:"to_version"`
	At          time.Time `json:"at"`
	// DurationUS is the taker's measure of the switch (0 if only the
	// yielding instance's record was available).
	DurationUS int64  `json:"duration_us"`
	Epoch      uint64 `json:"epoch"`
}

// pluginReport is one plugin's handover directory.
type pluginReport struct {
	Plugin string `json:"plugin"`
	Path   string `json:"path"`
	// Owner is the id of the owning instance; empty if none answers.
	Owner        string `json:"owner,omitempty"`
	OwnerVersion string `json:"owner_version,omitempty"`
	Epoch        uint64 `json:"epoch,omitempty"`
	// OwnerSocket is what owner.sock leads to: "answering", "missing",
	// "gone" (the owner exited), "not answering", or "unknown" (the
	// directory could not be opened).
	OwnerSocket  string           `json:"owner_socket"`
	Standbys     []string         `json:"standbys"`
	Retired      []string         `json:"retired"`
	LastHandover *handoverReport  `json:"last_handover,omitempty"`
	Instances    []instanceReport `json:"instances"`
	// NotRunning: no instance runs and the last one stopped cleanly (it
	// removed its socket), which is no problem.
	NotRunning bool `json:"not_running,omitempty"`
	// Problems say why the plugin has no answering owner.
	Problems []string `json:"problems,omitempty"`
}

type statusReport struct {
	Dir     string         `json:"dir"`
	Time    time.Time      `json:"time"`
	Plugins []pluginReport `json:"plugins"`
}

func status(args []string, out io.Writer) error {
	flags, o := statusFlags(nil)
	pos, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return usageErrorf("%v", err)
	}
	if len(pos) > 1 {
		return usageErrorf("at most one plugin name, got %q", pos)
	}
	if o.timeout <= 0 {
		return usageErrorf("--timeout %v: must be positive", o.timeout)
	}
	if o.dir == "" {
		return usageErrorf("--dir is empty")
	}
	var only string
	if len(pos) == 1 {
		only = names.Key(pos[0]) // the directory of a name NRI accepts
	}
	rep, err := collectStatus(context.Background(), filepath.Clean(o.dir), only, o.timeout)
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printStatus(out, rep)
	}
	var problems []string
	for _, p := range rep.Plugins {
		for _, pr := range p.Problems {
			problems = append(problems, fmt.Sprintf("plugin %q: %s", p.Plugin, pr))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// listPlugins returns the plugin directories under root: directories with
// an instances/ subdirectory, as the harness creates them.
func listPlugins(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("handover directory %s does not exist: no plugin instance has run with it on this node (set --dir or $%s)",
			root, plugin.EnvDir)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("cannot read handover directory %s: permission denied (run as the plugins' user, usually root)", root)
	case errors.Is(err, syscall.ENOTDIR):
		return nil, fmt.Errorf("handover directory %s is not a directory", root)
	case err != nil:
		return nil, fmt.Errorf("handover directory %s: %w", root, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if info, err := os.Stat(filepath.Join(root, e.Name(), "instances")); err == nil && info.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// openExisting opens the handover directory of a plugin that has one
// already; it never creates directories (protocol.OpenDir would).
func openExisting(root, name string) (*protocol.Dir, error) {
	for _, p := range []string{root, filepath.Join(root, name), filepath.Join(root, name, "instances")} {
		info, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%s does not exist", p)
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("%s: permission denied (run as the plugins' user, usually root)", p)
		case err != nil:
			return nil, err
		case !info.IsDir():
			return nil, fmt.Errorf("%s is not a directory", p)
		}
	}
	return protocol.OpenDir(root, name)
}

func collectStatus(ctx context.Context, root, only string, timeout time.Duration) (*statusReport, error) {
	names, err := listPlugins(root)
	if err != nil {
		return nil, err
	}
	if only != "" {
		found := false
		for _, n := range names {
			found = found || n == only
		}
		if !found {
			list := "none"
			if len(names) > 0 {
				list = strings.Join(names, ", ")
			}
			return nil, fmt.Errorf("no plugin %q in %s (found: %s)", only, root, list)
		}
		names = []string{only}
	}
	rep := &statusReport{Dir: root, Time: time.Now(), Plugins: []pluginReport{}}
	for _, name := range names {
		rep.Plugins = append(rep.Plugins, collectPlugin(ctx, root, name, timeout))
	}
	return rep, nil
}

// queryResult is the answer of one socket.
type queryResult struct {
	st    *hapi.StatusResponse
	state string
	err   string
}

// query asks the instance behind a socket for its status, within timeout.
func query(ctx context.Context, path string, timeout time.Duration) queryResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := protocol.Dial(ctx, path)
	if err != nil {
		// Whatever the dial says (on a loaded machine the deadline may pass
		// before it starts), a socket that is not there is an instance gone.
		if _, serr := os.Lstat(path); errors.Is(serr, fs.ErrNotExist) {
			return queryResult{state: stateGone, err: "socket removed: the instance exited"}
		}
	}
	switch {
	case errors.Is(err, protocol.ErrNoInstance):
		return queryResult{state: stateGone, err: "nothing listens on the socket: the instance died without removing it"}
	case errors.Is(err, fs.ErrPermission):
		return queryResult{state: stateNotAnswering, err: "permission denied (run as the plugins' user, usually root)"}
	case err != nil:
		return queryResult{state: stateNotAnswering, err: err.Error()}
	}
	defer cl.Close()
	st, err := cl.Status(ctx, &hapi.StatusRequest{})
	switch {
	case err == nil:
		return queryResult{st: st, state: stateAnswering}
	case ctx.Err() != nil:
		return queryResult{state: stateNotAnswering, err: fmt.Sprintf("no answer within %v (hung, stopped or overloaded)", timeout)}
	}
	return queryResult{state: stateNotAnswering, err: err.Error()}
}

func collectPlugin(ctx context.Context, root, name string, timeout time.Duration) pluginReport {
	pr := pluginReport{Plugin: name, Path: filepath.Join(root, name), Standbys: []string{}, Retired: []string{},
		Instances: []instanceReport{}}
	d, err := openExisting(root, name)
	if err != nil {
		pr.OwnerSocket = "unknown"
		pr.Problems = append(pr.Problems, err.Error())
		return pr
	}
	socks, err := d.InstanceSockets()
	if err != nil {
		pr.Problems = append(pr.Problems, err.Error())
	}

	// Ask every instance and the owner name at once, so that hung
	// instances cost one timeout in all.
	results := make([]queryResult, len(socks))
	var owner queryResult
	var wg sync.WaitGroup
	for i, s := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = query(ctx, s, timeout)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		owner = query(ctx, d.OwnerSocket(), timeout)
	}()
	wg.Wait()

	ownerInfo, ownerStatErr := os.Stat(d.OwnerSocket())
	holder := ""
	for i, s := range socks {
		ir := instanceReport{ID: strings.TrimSuffix(filepath.Base(s), ".sock"), Socket: s,
			State: results[i].state, Error: results[i].err}
		if ownerStatErr == nil {
			if info, err := os.Stat(s); err == nil && os.SameFile(info, ownerInfo) {
				ir.HoldsOwnerName = true
				holder = ir.ID
			}
		}
		if st := results[i].st; st != nil {
			in := st.GetInstance()
			ir.Role = protocol.RoleName(st.GetRole())
			ir.Version = in.GetVersion()
			if in.GetStartedUnixNano() != 0 {
				t := time.Unix(0, in.GetStartedUnixNano())
				ir.Started = &t
			}
			ir.PID = in.GetPid()
			ir.Epoch = st.GetEpoch()
			ir.Reason = st.GetReason()
			ir.Leaving = st.GetLeaving()
			for _, w := range st.GetWatchers() {
				ir.Watchers = append(ir.Watchers, w.GetId())
			}
			sort.Strings(ir.Watchers)
			ir.last = st.GetLastHandover()
			if in.GetId() != "" && in.GetId() != ir.ID {
				ir.Error = fmt.Sprintf("answers as instance %q", in.GetId())
			}
		}
		pr.Instances = append(pr.Instances, ir)
	}

	// The owner: its role is owner and the owner name leads to it.
	var ownerID string
	switch {
	case owner.st != nil:
		pr.OwnerSocket = stateAnswering
		id := owner.st.GetInstance().GetId()
		if owner.st.GetRole() == hapi.Role_ROLE_OWNER {
			ownerID = id
			pr.Owner, pr.OwnerVersion, pr.Epoch = id, owner.st.GetInstance().GetVersion(), owner.st.GetEpoch()
		} else {
			pr.Problems = append(pr.Problems, fmt.Sprintf("owner.sock leads to %s, which is %s (%s): no instance owns the plugin",
				id, protocol.RoleName(owner.st.GetRole()), owner.st.GetReason()))
		}
	case owner.state == stateGone && len(socks) == 0:
		// Every instance removed its socket when it stopped: none runs.
		pr.OwnerSocket = stateGone
		if errors.Is(ownerStatErr, fs.ErrNotExist) {
			pr.OwnerSocket = "missing"
		}
		pr.NotRunning = true
	case owner.state == stateGone && errors.Is(ownerStatErr, fs.ErrNotExist):
		pr.OwnerSocket = "missing"
		pr.Problems = append(pr.Problems, "no owner: owner.sock does not exist (no instance has claimed the plugin: "+
			"are its instances connected to the runtime? see their logs)")
	case owner.state == stateGone:
		pr.OwnerSocket = stateGone
		who := "an instance that has exited"
		if holder != "" {
			who = "instance " + holder + ", which is gone"
		}
		pr.Problems = append(pr.Problems, "no owner: owner.sock leads to "+who+
			" (start an instance; remove the stale sockets it left if none will run)")
	default:
		pr.OwnerSocket = stateNotAnswering
		who := "the owner"
		if holder != "" {
			who = "owner " + holder
		}
		pr.Problems = append(pr.Problems, fmt.Sprintf("%s does not answer on owner.sock: %s", who, owner.err))
	}

	for i := range pr.Instances {
		ir := &pr.Instances[i]
		if ir.Role == protocol.RoleName(hapi.Role_ROLE_OWNER) {
			if ir.ID == ownerID && ir.HoldsOwnerName {
				ir.Owner = true
			} else if !ir.HoldsOwnerName {
				ir.Superseded = true
			}
		}
		switch ir.Role {
		case protocol.RoleName(hapi.Role_ROLE_STANDBY):
			pr.Standbys = append(pr.Standbys, ir.ID)
		case protocol.RoleName(hapi.Role_ROLE_RETIRED):
			pr.Retired = append(pr.Retired, ir.ID)
		}
	}
	if ownerID != "" && holder != "" && holder != ownerID {
		pr.Problems = append(pr.Problems, fmt.Sprintf("owner.sock answers as %s but is the socket file of %s", ownerID, holder))
	}
	pr.LastHandover = lastHandover(pr.Instances)
	sortInstances(pr.Instances)
	return pr
}

// lastHandover picks the most recent handover record any instance reports:
// the highest epoch, the taker's record (it has a duration) on a tie.
func lastHandover(ins []instanceReport) *handoverReport {
	var best *hapi.HandoverRecord
	for _, ir := range ins {
		r := ir.last
		if r == nil {
			continue
		}
		if best == nil || r.GetEpoch() > best.GetEpoch() ||
			(r.GetEpoch() == best.GetEpoch() && best.GetDurationNano() == 0 && r.GetDurationNano() > 0) {
			best = r
		}
	}
	if best == nil {
		return nil
	}
	return &handoverReport{
		From: best.GetFromId(), FromVersion: best.GetFromVersion(), To: best.GetToId(), ToVersion: best.GetToVersion(),
		At: time.Unix(0, best.GetAtUnixNano()), DurationUS: time.Duration(best.GetDurationNano()).Microseconds(),
		Epoch: best.GetEpoch(),
	}
}

// sortInstances orders instances by start time (oldest first); those that
// did not answer come last, by id.
func sortInstances(ins []instanceReport) {
	sort.SliceStable(ins, func(i, j int) bool {
		a, b := ins[i], ins[j]
		if (a.Started == nil) != (b.Started == nil) {
			return a.Started != nil
		}
		if a.Started != nil && !a.Started.Equal(*b.Started) {
			return a.Started.Before(*b.Started)
		}
		return a.ID < b.ID
	})
}

// statusWord is the STATUS column: the role of an answering instance,
// else whether it is not answering or gone.
func (ir *instanceReport) statusWord() string {
	if ir.State != stateAnswering {
		return ir.State
	}
	w := ir.Role
	if ir.Superseded {
		w += " (superseded)"
	}
	if ir.Leaving {
		w += " (leaving)"
	}
	return w
}

func (ir *instanceReport) note() string {
	var parts []string
	if ir.Superseded {
		parts = append(parts, "owner.sock leads to another instance; it retires at its next event")
	}
	if ir.Reason != "" {
		parts = append(parts, ir.Reason)
	}
	if len(ir.Watchers) > 0 {
		parts = append(parts, "watched by "+strings.Join(ir.Watchers, ", "))
	}
	if ir.Error != "" {
		parts = append(parts, ir.Error)
	}
	return strings.Join(parts, "; ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOrNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

func since(now, t time.Time) string {
	return fmt.Sprintf("%s (%v ago)", t.Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

func printStatus(out io.Writer, rep *statusReport) {
	if len(rep.Plugins) == 0 {
		fmt.Fprintf(out, "no plugins in %s\n", rep.Dir)
		return
	}
	for i, p := range rep.Plugins {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "plugin %s (%s)\n", p.Plugin, p.Path)
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		if p.NotRunning {
			fmt.Fprintf(tw, "  owner\tnone: no instance running (the last one stopped cleanly)\n")
		} else if p.Owner != "" {
			line := fmt.Sprintf("%s, version %s, epoch %d", p.Owner, p.OwnerVersion, p.Epoch)
			for _, ir := range p.Instances {
				if ir.ID == p.Owner && ir.Started != nil {
					line += ", started " + since(rep.Time, *ir.Started)
				}
			}
			fmt.Fprintf(tw, "  owner\t%s\n", line)
		} else {
			fmt.Fprintf(tw, "  owner\tNONE (owner.sock: %s)\n", p.OwnerSocket)
		}
		fmt.Fprintf(tw, "  standbys\t%s\n", listOrNone(p.Standbys))
		fmt.Fprintf(tw, "  retired\t%s\n", listOrNone(p.Retired))
		if h := p.LastHandover; h != nil {
			took := ""
			if h.DurationUS > 0 {
				took = fmt.Sprintf(", took %v", time.Duration(h.DurationUS)*time.Microsecond)
			}
			fmt.Fprintf(tw, "  last handover\t%s (%s) -> %s (%s) at %s%s, epoch %d\n", h.From, h.FromVersion, h.To,
				h.ToVersion, h.At.Format(time.RFC3339Nano), took, h.Epoch)
		} else {
			fmt.Fprintf(tw, "  last handover\tnone recorded by the answering instances\n")
		}
		for _, pb := range p.Problems {
			fmt.Fprintf(tw, "  PROBLEM\t%s\n", pb)
		}
		tw.Flush()
		if len(p.Instances) == 0 {
			fmt.Fprintln(out, "  no instances")
			continue
		}
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  INSTANCE\tSTATUS\tVERSION\tEPOCH\tPID\tSTARTED\tNOTE")
		for _, ir := range p.Instances {
			mark := ""
			if ir.Owner {
				mark = " *"
			}
			epoch, pid, started := "-", "-", "-"
			if ir.State == stateAnswering {
				epoch = fmt.Sprint(ir.Epoch)
				if ir.PID != 0 {
					pid = fmt.Sprint(ir.PID)
				}
				if ir.Started != nil {
					started = since(rep.Time, *ir.Started)
				}
			}
			fmt.Fprintf(tw, "  %s%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ir.ID, mark, ir.statusWord(), orDash(ir.Version),
				epoch, pid, started, orDash(ir.note()))
		}
		tw.Flush()
	}
}
