// Command nri-audit runs the audit sample plugin under the nri-handover
// harness against a runtime's NRI socket.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/plugin"
	_ "github.com/nri-handover/nri-handover/plugin/metrics" // -metrics-addr
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// version is set at build time: -ldflags "-X main.version=2.0.0".
var version = "1.0.0"

func main() {
	flags := plugin.RegisterFlags(flag.CommandLine)
	ledger := flag.String("ledger", "/var/log/nri-audit.log", "file to append one line per acted event to")
	ver := flag.String("version", version, "plugin version to report and stamp")
	debug := flag.Bool("debug", false, "log every skipped event")
	ignoreTerm := flag.Bool("ignore-sigterm", false,
		"FOR TESTS ONLY: ignore SIGTERM, like a pod stuck terminating (SIGINT still stops it, SIGKILL kills it)")
	flag.Parse()
	if *debug {
		logrus.SetLevel(logrus.DebugLevel)
	}
	if *ignoreTerm {
		// -ignore-sigterm exists only for the process tests (test/
		// process_test.go), to play an old pod that does not react to the
		// kubelet's SIGTERM and is killed after its grace period. Ignored
		// from the start, so that no SIGTERM can stop the process.
		signal.Ignore(syscall.SIGTERM)
		logrus.Warn("ignoring SIGTERM (-ignore-sigterm, for tests only)")
	}
	if err := run(flags, *ledger, *ver, *ignoreTerm); err != nil {
		fmt.Fprintln(os.Stderr, "nri-audit:", err)
		os.Exit(1)
	}
}

func run(flags *plugin.Flags, ledgerPath, ver string, ignoreTerm bool) error {
	opts, err := flags.Options()
	if err != nil {
		return err
	}
	rec := &lazyRecorder{}
	p, err := plugin.New(&audit.Plugin{Version: ver, Recorder: rec}, append(opts, plugin.WithVersion(ver))...)
	if err != nil {
		return err
	}
	fr, err := audit.OpenFileRecorder(ledgerPath, p.Instance().ID, ver)
	if err != nil {
		return err
	}
	defer fr.Close()
	rec.r = fr
	stopSignals := []os.Signal{syscall.SIGTERM, os.Interrupt}
	if ignoreTerm {
		stopSignals = []os.Signal{os.Interrupt}
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	return p.Run(ctx)
}

// lazyRecorder lets the recorder learn the instance id the harness chose.
type lazyRecorder struct{ r audit.Recorder }

func (l *lazyRecorder) Record(event, id string) error { return l.r.Record(event, id) }
