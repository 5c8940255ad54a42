// Command nri-versioned runs the versioned sample plugin under the
// nri-handover harness against a runtime's NRI socket. The same source is
// built as v1 and v2; the version is set at build time
//
//	go build -ldflags "-X main.version=2.0.0" ./sample-plugins/versioned/cmd/nri-versioned
//
// or at run time with -version.
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
	"github.com/nri-handover/nri-handover/sample-plugins/versioned"
)

// version is set at build time: -ldflags "-X main.version=2.0.0".
var version = "1.0.0"

func main() {
	flags := plugin.RegisterFlags(flag.CommandLine)
	ver := flag.String("version", version, "plugin version to report, stamp and behave as (major 1: tier v1, major 2: tier v2)")
	debug := flag.Bool("debug", false, "log every skipped event")
	flag.Parse()
	if *debug {
		logrus.SetLevel(logrus.DebugLevel)
	}
	if err := run(flags, *ver); err != nil {
		fmt.Fprintln(os.Stderr, "nri-versioned:", err)
		os.Exit(1)
	}
}

func run(flags *plugin.Flags, ver string) error {
	opts, err := flags.Options()
	if err != nil {
		return err
	}
	author, err := versioned.New(ver)
	if err != nil {
		return err
	}
	p, err := plugin.New(author, append(opts, plugin.WithVersion(ver))...)
	if err != nil {
		return err
	}
	log := logrus.WithFields(logrus.Fields{"plugin": p.Name(), "version": ver, "instance": p.Instance().ID})
	author.SetLogf(log.Infof) // the harness logs a failed Reconcile itself
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// On SIGTERM an owner hands over to a standby first (bounded by the
	// leave timeout), then exits.
	return p.Run(ctx)
}
