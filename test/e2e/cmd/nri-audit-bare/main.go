// Command nri-audit-bare runs the audit sample plugin's logic on the bare
// NRI stub (github.com/containerd/nri/pkg/stub), without the nri-handover
// harness: no handover, no stamps. The e2e benchmark compares container
// start latency with it against the harnessed sample-plugins/audit to show
// what the harness costs on a real containerd.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

func main() {
	name := flag.String("name", "audit-bare", "plugin name to register with")
	idx := flag.String("idx", "10", "plugin index to register with")
	socket := flag.String("nri-socket", "/var/run/nri/nri.sock", "NRI socket of the runtime")
	ledger := flag.String("ledger", "/var/log/nri-audit-bare.log", "file to append one line per event to")
	ver := flag.String("version", "1.0.0", "version written into the injected environment variable")
	flag.Parse()
	if err := run(*name, *idx, *socket, *ledger, *ver); err != nil {
		fmt.Fprintln(os.Stderr, "nri-audit-bare:", err)
		os.Exit(1)
	}
}

func run(name, idx, socket, ledger, ver string) error {
	rec, err := audit.OpenFileRecorder(ledger, "bare", ver)
	if err != nil {
		return err
	}
	defer rec.Close()
	s, err := stub.New(&audit.Plugin{Version: ver, Recorder: rec},
		stub.WithPluginName(name), stub.WithPluginIdx(idx), stub.WithSocketPath(socket))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	s.Stop()
	return nil
}
