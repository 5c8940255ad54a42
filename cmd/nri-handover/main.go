// Command nri-handover is the operator's and demonstrator's tool for the
// nri-handover framework.
//
//	nri-handover demo [flags]   upgrade and roll back a sample plugin under load,
//	                            on an in-process NRI runtime, and report
//	nri-handover status [flags] [PLUGIN]
//	                            who owns each plugin on this node, standbys,
//	                            retired instances, the last handover
//	nri-handover probe ready|live --plugin NAME [flags]
//	                            Kubernetes exec probes for one instance
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/rollout"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

const usage = `usage: nri-handover <command> [flags]

commands:
  demo    run the sample plugin through upgrades and rollbacks under a stream
          of pod and container events on an in-process NRI runtime, and print
          what each version handled, duplicates and misses
  status  show, for each plugin in the handover directory, the owner, its
          version and start time, the standbys, the retired instances and
          the last handover (exit 1 if a plugin has no answering owner)
  probe   ready|live --plugin NAME [--instance ID]: Kubernetes exec probes;
          ready only on the owner, live on any instance that answers

run 'nri-handover <command> -h' for the command's flags
`

func main() {
	logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000Z07:00"}) // ms: a handover takes a few
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "demo":
		err = demo(os.Args[2:], os.Stdout)
	case "status":
		os.Exit(statusMain(os.Args[2:], os.Stdout, os.Stderr))
	case "probe":
		os.Exit(probeMain(os.Args[2:], os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "nri-handover: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nri-handover:", err)
		os.Exit(1)
	}
}

// errGuarantee is returned when a run broke a guarantee: the exit code
// tells scripts, the report tells people.
var errGuarantee = errors.New("guarantees broken: see the report")

// demoReport is the --json output.
type demoReport struct {
	Events     int `json:"events"`
	Duplicates int `json:"duplicates"`
	// Duplicates counts the events acted on more often than delivered,
	// a lifecycle change a catch-up handed counting as one act; with
	// -at-least-once, those not declared in doubt: the events declared in
	// doubt that were acted on again, as the option asks, are acted_again.
	// Unacted counts the delivered events no instance acted on; each is
	// either declared in doubt (missed_in_doubt), or caught up (its
	// container was handed to the author afterwards, or the change itself
	// was handed to the author's handler by a catch-up, missed_caught_up),
	// or missed.
	Unacted int `json:"unacted"`
	// Missed counts the events no instance acted on, not declared in doubt
	// and not caught up: lost. Those inside a declared gap window (no
	// instance connected to the runtime: it sent them to nobody) are
	// missed_in_gap, the others missed_undeclared.
	Missed           int   `json:"missed"`
	MissedInGap      int   `json:"missed_in_gap"`
	MissedInDoubt    int   `json:"missed_in_doubt"`
	MissedCaughtUp   int   `json:"missed_caught_up"`
	MissedUndeclared int   `json:"missed_undeclared"`
	Handovers        int   `json:"handovers"`
	MaxSwitchDelayUS int64 `json:"max_switch_delay_us"`
	MaxHandoverUS    int64 `json:"max_handover_us"`
	MaxEventUS       int64 `json:"max_event_us"`
	FailedCreates    int   `json:"failed_creates"`
	Dropped          int   `json:"dropped"`
	// Unstamped counts the containers no instance processed at their
	// creation: unstamped_caught_up were handed to the author later,
	// unstamped_unseen lived and ended while no instance was connected
	// (no Synchronize listed them), unprocessed neither (a broken catch-up).
	Unstamped         int `json:"unstamped"`
	UnstampedCaughtUp int `json:"unstamped_caught_up"`
	UnstampedUnseen   int `json:"unstamped_unseen"`
	Unprocessed       int `json:"unprocessed"`
	InDoubt           int `json:"in_doubt"`
	CaughtUp          int `json:"caught_up"`
	// CaughtUpChanges counts the lifecycle changes catch-ups handed to the
	// author's handlers (also in caught_up, which adds the containers).
	CaughtUpChanges int            `json:"caught_up_changes"`
	Gaps            int            `json:"gaps"`
	GapWindows      []gapWindow    `json:"gap_windows,omitempty"`
	Acted           map[string]int `json:"acted"`
	Instances       int            `json:"instances"`
	ElapsedMS       int64          `json:"elapsed_ms"`
	Runtime         string         `json:"runtime"`
	Faults          []string       `json:"faults,omitempty"`
	AtLeastOnce     bool           `json:"at_least_once,omitempty"`
	ActedAgain      int            `json:"acted_again,omitempty"`
	OK              bool           `json:"ok"`
	Problems        []string       `json:"problems,omitempty"`
}

// gapWindow is a declared gap window in the --json output: no instance
// acted from start to end (RFC 3339, UTC, nanoseconds).
type gapWindow struct {
	Instance string `json:"instance"`
	Start    string `json:"start"`
	End      string `json:"end"`
	MS       int64  `json:"ms"`
	// Missed counts the missed events delivered in the window.
	Missed int `json:"missed"`
}

func demo(args []string, out io.Writer) error {
	def := rollout.DefaultConfig()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	events := fs.Int("events", def.Events, "minimum number of NRI events to deliver")
	handovers := fs.Int("handovers", def.Handovers, "number of handovers (upgrades and rollbacks)")
	versions := fs.String("versions", strings.Join(def.Versions, ","), "versions cycled through by successive instances")
	containers := fs.Int("containers", def.ContainersPerPod, "containers per pod")
	workers := fs.Int("workers", def.Workers, "concurrent pod lifecycles")
	order := fs.String("order", "same", "chain position of newcomers: same (same index, as a DaemonSet) or alternate (newcomer first and second in turn)")
	seed := fs.Int64("seed", def.Seed, "seed of the random handover and fault moments")
	mode := fs.String("runtime", string(plugintest.ModeContainerd),
		"how the runtime fences a plugin's sync from events: containerd (BlockPluginSync around every operation), "+
			"cri-o (none), gap (events delivered between a newcomer's Synchronize and its append), "+
			"exit-stop (containerd plus self-exit StopContainers without BlockPluginSync)")
	faults := fs.Int("faults", 0, "owner kills or freezes at random moments, each while another instance is in the runtime's chain to take over")
	requestTimeout := fs.Duration("request-timeout", 0, "the runtime's plugin request timeout (default: NRI's 2s; a frozen owner holds events up this long)")
	atLeastOnce := fs.Bool("at-least-once", false, "instances act on an event in doubt again (plugin.WithAtLeastOnce): an event acted on twice is then allowed if it was declared in doubt")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	verbose := fs.Bool("v", false, "print the instances' logs to stderr")
	logFile := fs.String("log", "", "write the instances' logs to this file (created or truncated)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := def
	cfg.Events, cfg.Handovers, cfg.ContainersPerPod, cfg.Workers, cfg.Seed = *events, *handovers, *containers, *workers, *seed
	cfg.Versions = strings.Split(*versions, ",")
	m, err := plugintest.ParseMode(*mode)
	if err != nil {
		return fmt.Errorf("-runtime: %w", err)
	}
	cfg.Mode, cfg.Faults, cfg.RequestTimeout, cfg.AtLeastOnce = m, *faults, *requestTimeout, *atLeastOnce
	switch *order {
	case "same":
		cfg.Order = rollout.SameIndex
	case "alternate":
		cfg.Order = rollout.Alternate
	default:
		return fmt.Errorf("-order %q: want same or alternate", *order)
	}
	switch {
	case *logFile != "":
		f, err := os.Create(*logFile)
		if err != nil {
			return fmt.Errorf("-log: %w", err)
		}
		defer f.Close()
		cfg.Log = f
		if *verbose {
			cfg.Log = io.MultiWriter(f, os.Stderr)
		}
		// The NRI library logs through the standard logger: into the file
		// too, and nowhere once the file is closed.
		logrus.SetOutput(cfg.Log)
		defer logrus.SetOutput(io.Discard)
	case *verbose:
		cfg.Log = os.Stderr
	default:
		// The NRI library logs through the standard logger.
		logrus.SetOutput(io.Discard)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := rollout.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep := demoReport{
		Events: res.Report.Events, Duplicates: res.Report.Duplicates + res.ChangeDuplicates, Unacted: res.Report.Missed,
		UnstampedCaughtUp: res.CaughtUpContainers, UnstampedUnseen: res.Unseen, Unprocessed: res.UnprocessedCount,
		MissedCaughtUp: res.Missed.CaughtUp, CaughtUpChanges: res.CaughtUpChanges,
		Handovers: len(res.Handovers), MaxSwitchDelayUS: res.Stats.MaxSyncWait.Microseconds(),
		MaxEventUS:    res.Stats.MaxEventLatency.Microseconds(),
		FailedCreates: res.Stats.FailedCreates, Dropped: len(res.Dropped()), Acted: res.ActedByVersion,
		Unstamped: res.Unstamped, InDoubt: res.InDoubt, CaughtUp: res.CaughtUp, Gaps: res.Gaps, Runtime: string(res.Mode), Faults: res.Faults,
		Instances: len(res.Instances), ElapsedMS: res.Elapsed.Milliseconds(), OK: res.OK(), Problems: res.Problems(),
		MissedInGap: res.Missed.InGap, MissedInDoubt: res.Missed.InDoubt, MissedUndeclared: res.Missed.UndeclaredCount,
	}
	if res.AtLeastOnce {
		rep.AtLeastOnce, rep.ActedAgain = true, res.ActedAgain
		rep.Duplicates -= res.ActedAgain
	}
	if !res.Missed.GapsCaptured && rep.MissedUndeclared == 0 {
		// Without every window the misses cannot be shown declared.
		rep.MissedUndeclared = rep.Unacted - rep.MissedInGap - rep.MissedInDoubt - rep.MissedCaughtUp
	}
	rep.Missed = rep.MissedInGap + rep.MissedUndeclared
	for _, w := range res.Missed.Windows {
		rep.GapWindows = append(rep.GapWindows, gapWindow{Instance: w.Instance,
			Start: w.Start.UTC().Format(time.RFC3339Nano), End: w.End.UTC().Format(time.RFC3339Nano), MS: w.End.Sub(w.Start).Milliseconds(), Missed: w.Missed})
	}
	for _, h := range res.Handovers {
		rep.MaxHandoverUS = max(rep.MaxHandoverUS, h.Took.Microseconds())
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printTables(out, res, rep)
	}
	if !rep.OK {
		return errGuarantee
	}
	return nil
}

func printTables(out io.Writer, res *rollout.Result, rep demoReport) {
	fmt.Fprintf(out, "nri-handover demo: %d events, %d handovers, %d instances in %v\n\n",
		rep.Events, rep.Handovers, rep.Instances, res.Elapsed.Round(time.Millisecond))
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tVERSION\tINDEX\tACTED\tSKIPPED\tSTAMPED")
	for _, in := range res.Instances {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", in.ID, in.Version, in.Idx,
			in.Stats.Acted, in.Stats.Skipped, in.Stats.Stamped)
	}
	tw.Flush()
	fmt.Fprintln(out)
	var vs []string
	for v := range rep.Acted {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tEVENTS ACTED ON")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%d\n", v, rep.Acted[v])
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "events delivered\t%d\n", rep.Events)
	fmt.Fprintf(tw, "acted on exactly once\t%d\n", rep.Events-rep.Unacted)
	fmt.Fprintf(tw, "duplicates\t%d\n", rep.Duplicates)
	if rep.AtLeastOnce {
		fmt.Fprintf(tw, "acted on again, declared in doubt (-at-least-once)\t%d\n", rep.ActedAgain)
	}
	if rep.Unacted > 0 || rep.Gaps > 0 || rep.InDoubt > 0 {
		fmt.Fprintf(tw, "not acted on\t%d\n", rep.Unacted)
		fmt.Fprintf(tw, "  declared in doubt\t%d\n", rep.MissedInDoubt)
		fmt.Fprintf(tw, "  caught up (container or change handed to the author later)\t%d\n", rep.MissedCaughtUp)
		fmt.Fprintf(tw, "  missed, in a declared gap (sent to no instance)\t%d\n", rep.MissedInGap)
		fmt.Fprintf(tw, "  missed, undeclared\t%d\n", rep.MissedUndeclared)
		fmt.Fprintf(tw, "missed (lost: in a gap or undeclared)\t%d\n", rep.Missed)
		fmt.Fprintf(tw, "containers created unprocessed\t%d\n", rep.Unstamped)
		fmt.Fprintf(tw, "  caught up\t%d\n", rep.UnstampedCaughtUp)
		fmt.Fprintf(tw, "  ended while no instance was connected\t%d\n", rep.UnstampedUnseen)
		fmt.Fprintf(tw, "  never handed to the author\t%d\n", rep.Unprocessed)
	} else {
		fmt.Fprintf(tw, "missed\t%d\n", rep.Missed)
	}
	fmt.Fprintf(tw, "failed container creations\t%d\n", rep.FailedCreates)
	fmt.Fprintf(tw, "instances dropped by the runtime\t%d\n", rep.Dropped)
	if rep.Runtime != string(plugintest.ModeContainerd) || len(rep.Faults) > 0 {
		fmt.Fprintf(tw, "runtime mode\t%s\n", rep.Runtime)
		fmt.Fprintf(tw, "faults (owner kills, freezes)\t%d\n", len(rep.Faults))
		fmt.Fprintf(tw, "events in doubt\t%d\n", rep.InDoubt)
		fmt.Fprintf(tw, "caught up after a gap\t%d\n", rep.CaughtUp)
		fmt.Fprintf(tw, "gaps declared (no instance acted)\t%d\n", rep.Gaps)
	}
	fmt.Fprintf(tw, "handovers\t%d\n", rep.Handovers)
	fmt.Fprintf(tw, "longest handover (start to owner)\t%v\n", time.Duration(rep.MaxHandoverUS)*time.Microsecond)
	fmt.Fprintf(tw, "longest delay of an event by a switch\t%v\n", time.Duration(rep.MaxSwitchDelayUS)*time.Microsecond)
	fmt.Fprintf(tw, "longest single event (runtime call)\t%v\n", time.Duration(rep.MaxEventUS)*time.Microsecond)
	tw.Flush()
	fmt.Fprintln(out)
	switch {
	case rep.OK && rep.Unacted == 0 && rep.ActedAgain == 0:
		fmt.Fprintln(out, "OK: every event was handled exactly once across all handovers.")
		return
	case rep.OK && rep.AtLeastOnce:
		fmt.Fprintf(out, "OK: every event was handled exactly once, except %d declared in doubt and acted on again (-at-least-once), %d declared in doubt and not acted on again, and %d caught up (handed to the author later); none lost.\n",
			rep.ActedAgain, rep.MissedInDoubt, rep.MissedCaughtUp)
		return
	case rep.OK:
		fmt.Fprintf(out, "OK: every event was handled exactly once, except %d declared in doubt (an owner died or froze inside it) and %d caught up (handed to the author later); none lost.\n",
			rep.MissedInDoubt, rep.MissedCaughtUp)
		return
	}
	fmt.Fprintln(out, "FAILED:")
	for _, p := range rep.Problems {
		fmt.Fprintln(out, "  "+p)
	}
}
