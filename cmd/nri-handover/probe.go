package main

// nri-handover probe ready|live: Kubernetes exec probes for one instance of
// a plugin, asked over the instance's own handover socket.

import (
	"context"
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
	"time"

	"github.com/nri-handover/nri-handover/internal/names"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/plugin"
)

const probeUsage = `usage: nri-handover probe ready|live|started [--dir D] --plugin NAME [--instance ID] [--timeout T]

Kubernetes exec probes for one instance of a plugin (the instance id
defaults to $` + plugin.EnvInstance + `, which the DaemonSet sets to the pod
name with the downward API, else to the only instance that answers):

  ready   succeeds if the instance answers with role owner and owner.sock
          leads to it, or if it is the live fallback of the owner it yielded
          to (retired, not stopping, its successor answers on owner.sock as
          owner): a maxSurge rollout deletes the old pod only after the new
          one took over, and keeps it for minReadySeconds after that
  live    succeeds if the instance answers at all, in any role: a standby
          waiting for its turn must not be restarted
  started succeeds once the instance answers in a role other than joining
          (it has synchronized with the runtime and claimed); waits for that
          up to the timeout: the startup probe, so that the readiness probe
          never sees a joining instance

Prints one line with the reason, without a newline (the kubelet puts the
output into the pod's events as it is), and exits 0 (ready / live /
started), 1 (not ready / not live / not started) or 2 (usage error).

flags:
`

type probeOptions struct {
	dir, plugin, instance string
	timeout               time.Duration
}

func probeFlags(out io.Writer) (*flag.FlagSet, *probeOptions) {
	o := &probeOptions{}
	flags := flag.NewFlagSet("probe", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	if out != nil {
		flags.SetOutput(out)
	}
	flags.StringVar(&o.dir, "dir", defaultRoot(), "handover directory shared by the plugin's instances ($"+plugin.EnvDir+")")
	flags.StringVar(&o.plugin, "plugin", "", "plugin name (required)")
	flags.StringVar(&o.instance, "instance", "", "instance id (default $"+plugin.EnvInstance+")")
	flags.DurationVar(&o.timeout, "timeout", time.Second, "how long the instance has to answer; keep it below the probe's timeoutSeconds")
	return flags, o
}

// probeMain is the probe command as main runs it.
func probeMain(args []string, stdout, stderr io.Writer) int {
	return runCommand("probe", probeUsage, func(w io.Writer) *flag.FlagSet {
		f, _ := probeFlags(w)
		return f
	}, probe, args, stdout, stderr)
}

// probe runs one probe and prints its one-line verdict to out. It returns
// nil when the probe succeeds, an *exitError with code 1 when it fails
// (already printed) and code 2 on usage errors (not printed).
func probe(args []string, out io.Writer) error {
	flags, o := probeFlags(nil)
	pos, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return usageErrorf("%v", err)
	}
	if len(pos) == 0 {
		return usageErrorf("which probe? want ready, live or started")
	}
	if len(pos) != 1 {
		return usageErrorf("want exactly one of ready, live or started, got %q", pos)
	}
	mode := pos[0]
	if mode != "ready" && mode != "live" && mode != "started" {
		return usageErrorf("unknown probe %q: want ready, live or started", mode)
	}
	if o.plugin == "" {
		return usageErrorf("--plugin is required")
	}
	if strings.ContainsAny(o.plugin, "/\x00") || o.plugin == "." || o.plugin == ".." {
		return usageErrorf("invalid plugin name %q", o.plugin)
	}
	o.plugin = names.Key(o.plugin) // the directory of a name NRI accepts
	if o.instance == "" {
		o.instance = os.Getenv(plugin.EnvInstance)
	}
	if strings.ContainsAny(o.instance, "/\x00") {
		return usageErrorf("invalid instance id %q", o.instance)
	}
	if o.timeout <= 0 {
		return usageErrorf("--timeout %v: must be positive", o.timeout)
	}
	if o.dir == "" {
		return usageErrorf("--dir is empty")
	}
	if o.instance == "" {
		// Not in a pod that names it: the only instance that answers.
		id, err := onlyInstance(context.Background(), filepath.Clean(o.dir), o.plugin, o.timeout)
		if err != nil {
			line := "not " + mode + ": " + err.Error()
			fmt.Fprintln(out, line)
			return &exitError{code: exitFailed, err: errors.New(line), printed: true}
		}
		o.instance = id
	}

	var ok bool
	var why string
	if mode == "started" {
		ok, why = started(context.Background(), filepath.Clean(o.dir), o.plugin, o.instance, o.timeout)
	} else {
		ok, why = check(context.Background(), mode, filepath.Clean(o.dir), o.plugin, o.instance, o.timeout)
	}
	line := mode + ": " + why
	if !ok {
		line = "not " + line
	}
	fmt.Fprint(out, line)
	if !ok {
		return &exitError{code: exitFailed, err: errors.New(line), printed: true}
	}
	return nil
}

// onlyInstance returns the id of the one instance of plugin name that
// answers, or an error that says how to pick one.
func onlyInstance(ctx context.Context, root, name string, timeout time.Duration) (string, error) {
	d, err := openExisting(root, name)
	if err != nil {
		return "", fmt.Errorf("no handover directory for plugin %q: %v", name, err)
	}
	socks, err := d.InstanceSockets()
	if err != nil {
		return "", err
	}
	results := make([]queryResult, len(socks))
	var wg sync.WaitGroup
	for i, s := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = query(ctx, s, timeout)
		}()
	}
	wg.Wait()
	var live []string
	for i, s := range socks {
		if results[i].st != nil {
			live = append(live, strings.TrimSuffix(filepath.Base(s), ".sock"))
		}
	}
	switch len(live) {
	case 1:
		return live[0], nil
	case 0:
		return "", fmt.Errorf("no instance of plugin %q answers in %s: is it running? (run `nri-handover status`; "+
			"name the instance with --instance or $%s)", name, root, plugin.EnvInstance)
	default:
		sort.Strings(live)
		return "", fmt.Errorf("%d instances of plugin %q answer (%s): name the one to probe with --instance or $%s "+
			"(the DaemonSet sets it to the pod name)", len(live), name, strings.Join(live, ", "), plugin.EnvInstance)
	}
}

// check asks the instance for its status and decides the probe.
func check(ctx context.Context, mode, root, name, id string, timeout time.Duration) (bool, string) {
	d, err := openExisting(root, name)
	if err != nil {
		return false, fmt.Sprintf("no handover directory for plugin %q: %v", name, err)
	}
	sock := d.InstanceSocket(id)
	r := query(ctx, sock, timeout)
	switch {
	case r.state == stateGone:
		if _, err := os.Lstat(sock); errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Sprintf("instance %s has no socket %s (not started yet, or exited)", id, sock)
		}
		return false, fmt.Sprintf("instance %s is gone: nothing listens on %s", id, sock)
	case r.st == nil:
		return false, fmt.Sprintf("instance %s does not answer on %s: %s", id, sock, r.err)
	}
	st := r.st
	if got := st.GetInstance().GetId(); got != id {
		return false, fmt.Sprintf("%s answers as instance %q, not %q", sock, got, id)
	}
	desc := describe(st)
	if mode == "live" {
		return true, desc
	}
	if st.GetRole() == hapi.Role_ROLE_RETIRED {
		// A live fallback stays ready: the DaemonSet controller deletes an
		// unready old pod at once, and with it the instance that would take
		// back if the new one died before it had been available for
		// minReadySeconds.
		fctx, cancel := context.WithTimeout(ctx, timeout)
		succ, ok := protocol.LiveFallback(fctx, d, st)
		cancel()
		if ok {
			return true, protocol.FallbackReason(succ)
		}
	}
	if st.GetRole() != hapi.Role_ROLE_OWNER {
		return false, desc
	}
	// An owner that was stopped while a newcomer took over by force still
	// says owner until its next event; the owner name tells the truth.
	same, err := sameFile(d.OwnerSocket(), sock)
	if err != nil {
		return false, fmt.Sprintf("owner, but the owner name cannot be checked: %v", err)
	}
	if !same {
		return false, "superseded: owner.sock leads to another instance; this one retires at its next event"
	}
	return true, desc
}

// started waits until the instance answers in a role other than joining,
// or the timeout ends; it says why not with the last answer.
func started(ctx context.Context, root, name, id string, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, why := check(ctx, "live", root, name, id, timeout)
		if ok && !strings.HasPrefix(why, "joining") {
			return true, why
		}
		select {
		case <-ctx.Done():
			return false, why
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// describe says what an instance is doing, as Coordinator.Ready does:
// "owner since epoch 4", "standby: <why>".
func describe(st *hapi.StatusResponse) string {
	role := protocol.RoleName(st.GetRole())
	var s string
	switch {
	case st.GetRole() == hapi.Role_ROLE_OWNER:
		s = fmt.Sprintf("owner since epoch %d", st.GetEpoch())
	case st.GetReason() != "":
		s = role + ": " + st.GetReason()
	default:
		s = role
	}
	if st.GetLeaving() {
		s += " (leaving)"
	}
	return s
}

func sameFile(a, b string) (bool, error) {
	ia, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	ib, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(ia, ib), nil
}
