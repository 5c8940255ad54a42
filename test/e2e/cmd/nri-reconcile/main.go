// Command nri-reconcile is the audit sample plugin under the nri-handover
// harness plus the two hooks a versioned plugin has: Synchronize, which
// records the containers the harness hands it (those no instance stamped),
// and Reconcile, which records the containers older versions stamped and
// updates their CPU shares through the runtime. The e2e suite reads the
// record file to check what each version was given after an upgrade.
//
// Record lines: "sync <instance> <version> <id>..." and
// "reconcile <instance> <version> <id>:<stamp version>..." and
// "reconcile-update <instance> <version> <failed updates> <error>".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/plugin"
	_ "github.com/nri-handover/nri-handover/plugin/metrics" // -metrics-addr
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// ReconcileShares is the CPU shares value Reconcile gives to every
// container an older version stamped.
const ReconcileShares = 777

type versioned struct {
	*audit.Plugin
	instance, version string
	record            *os.File
	// updatePrefix: Reconcile updates only the containers whose name
	// starts with it ("": all).
	updatePrefix string
	mu           sync.Mutex
}

func (v *versioned) write(kind string, fields []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.record, "%s %s %s %s\n", kind, v.instance, v.version, strings.Join(fields, " "))
}

// Synchronize records the containers that no instance of the plugin stamped.
func (v *versioned) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	var ids []string
	for _, c := range ctrs {
		ids = append(ids, c.GetId())
	}
	sort.Strings(ids)
	v.write("sync", ids)
	return nil, nil
}

// Reconcile records the containers older versions stamped and brings them
// up to date: here, new CPU shares.
func (v *versioned) Reconcile(_ context.Context, p *plugin.Plugin, older []*plugin.StampedContainer) error {
	var ids []string
	var updates []*api.ContainerUpdate
	for _, sc := range older {
		ids = append(ids, sc.Container.GetId()+":"+sc.Stamp.Version.Original())
		if !strings.HasPrefix(sc.Container.GetName(), v.updatePrefix) {
			continue
		}
		u := &api.ContainerUpdate{ContainerId: sc.Container.GetId()}
		u.SetLinuxCPUShares(ReconcileShares)
		updates = append(updates, u)
	}
	sort.Strings(ids)
	v.write("reconcile", ids)
	if len(updates) == 0 {
		return nil
	}
	failed, err := p.UpdateContainers(updates)
	v.write("reconcile-update", []string{fmt.Sprint(len(failed)), fmt.Sprintf("%q", fmt.Sprint(err))})
	return err
}

func main() {
	flags := plugin.RegisterFlags(flag.CommandLine)
	ledger := flag.String("ledger", "/var/log/nri-audit.log", "file to append one line per acted event to")
	ver := flag.String("version", "1.0.0", "plugin version to report and stamp")
	record := flag.String("record", "/var/log/nri-reconcile.log", "file to append Synchronize and Reconcile records to")
	updatePrefix := flag.String("update-prefix", "", "Reconcile updates only the containers whose name starts with this (all if empty)")
	flag.Parse()
	if err := run(flags, *ledger, *record, *ver, *updatePrefix); err != nil {
		fmt.Fprintln(os.Stderr, "nri-reconcile:", err)
		os.Exit(1)
	}
}

func run(flags *plugin.Flags, ledgerPath, recordPath, ver, updatePrefix string) error {
	opts, err := flags.Options()
	if err != nil {
		return err
	}
	rf, err := os.OpenFile(recordPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer rf.Close()
	rec := &lazyRecorder{}
	v := &versioned{Plugin: &audit.Plugin{Version: ver, Recorder: rec}, version: ver, record: rf, updatePrefix: updatePrefix}
	p, err := plugin.New(v, append(opts, plugin.WithVersion(ver), plugin.WithLogger(logrus.NewEntry(logrus.StandardLogger())))...)
	if err != nil {
		return err
	}
	v.instance = p.Instance().ID
	fr, err := audit.OpenFileRecorder(ledgerPath, p.Instance().ID, ver)
	if err != nil {
		return err
	}
	defer fr.Close()
	rec.r = fr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return p.Run(ctx)
}

type lazyRecorder struct{ r audit.Recorder }

func (l *lazyRecorder) Record(event, id string) error { return l.r.Record(event, id) }
