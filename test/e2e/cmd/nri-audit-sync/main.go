// Command nri-audit-sync is the audit sample plugin under the nri-handover
// harness plus an author Synchronize, as a plugin that catches up with the
// containers it did not see being created would have: Synchronize records
// the containers the harness hands it (those no instance stamped) and
// returns no update. The sample itself has no Synchronize, so its ledger
// cannot say what a catch-up handed it; the e2e fault tests read this
// record instead. Two flags play what the e2e tests need of an author:
//
//	-fail-sync     Synchronize returns an error (a broken newcomer)
//	-fail-request  NRI's per-plugin failure policy FailRequest
//	               (stub.WithFailurePolicy through plugin.WithStubOptions):
//	               the runtime fails the request when the plugin fails it
//	-create-delay  CreateContainer records "create-begin" and takes this
//	               long before it acts, as an author's allocation would:
//	               a test can kill the owner inside the handler
//
// Record lines: "sync <instance> <version> <id>..." for each Synchronize,
// "sync-failed <instance> <version> <id>..." for each failed one,
// "create-begin <instance> <version> <id>" with -create-delay.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/plugin"
	_ "github.com/nri-handover/nri-handover/plugin/metrics" // -metrics-addr
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// errSyncFailed is what Synchronize returns with -fail-sync.
var errSyncFailed = errors.New("nri-audit-sync: Synchronize fails (-fail-sync)")

type syncing struct {
	*audit.Plugin
	instance, version string
	failSync          bool
	createDelay       time.Duration
	record            *os.File
	mu                sync.Mutex
}

// Synchronize records the containers the harness hands it: those no
// instance of the plugin stamped.
func (s *syncing) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	ids := make([]string, 0, len(ctrs))
	for _, c := range ctrs {
		ids = append(ids, c.GetId())
	}
	sort.Strings(ids)
	kind := "sync"
	if s.failSync {
		kind = "sync-failed"
	}
	if err := s.write(kind, ids); err != nil {
		return nil, err
	}
	if s.failSync {
		return nil, errSyncFailed
	}
	return nil, nil
}

// CreateContainer, with -create-delay, records that it began and waits
// before the sample acts.
func (s *syncing) CreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if s.createDelay > 0 {
		if err := s.write("create-begin", []string{c.GetId()}); err != nil {
			return nil, nil, err
		}
		time.Sleep(s.createDelay)
	}
	return s.Plugin.CreateContainer(ctx, pod, c)
}

func (s *syncing) write(kind string, ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.record, "%s %s %s %s\n", kind, s.instance, s.version, strings.Join(ids, " ")); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

func main() {
	flags := plugin.RegisterFlags(flag.CommandLine)
	ledger := flag.String("ledger", "/var/log/nri-audit.log", "file to append one line per acted event to")
	ver := flag.String("version", "1.0.0", "plugin version to report and stamp")
	record := flag.String("record", "/var/log/nri-audit-sync.log", "file to append one line per Synchronize to")
	failSync := flag.Bool("fail-sync", false, "FOR TESTS: the author Synchronize returns an error")
	failRequest := flag.Bool("fail-request", false, "NRI failure policy FailRequest: the runtime fails a request the plugin fails")
	createDelay := flag.Duration("create-delay", 0, "FOR TESTS: CreateContainer records create-begin, then waits this long")
	flag.Parse()
	if err := run(flags, *ledger, *record, *ver, *failSync, *failRequest, *createDelay); err != nil {
		fmt.Fprintln(os.Stderr, "nri-audit-sync:", err)
		os.Exit(1)
	}
}

func run(flags *plugin.Flags, ledgerPath, recordPath, ver string, failSync, failRequest bool, createDelay time.Duration) error {
	opts, err := flags.Options()
	if err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	rf, err := os.OpenFile(recordPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open sync record: %w", err)
	}
	defer rf.Close()
	rec := &lazyRecorder{}
	s := &syncing{Plugin: &audit.Plugin{Version: ver, Recorder: rec}, version: ver, failSync: failSync,
		createDelay: createDelay, record: rf}
	opts = append(opts, plugin.WithVersion(ver), plugin.WithLogger(logrus.NewEntry(logrus.StandardLogger())))
	if failRequest {
		opts = append(opts, plugin.WithStubOptions(stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true})))
		logrus.Info("NRI failure policy: FailRequest")
	}
	p, err := plugin.New(s, opts...)
	if err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	s.instance = p.Instance().ID
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

// lazyRecorder lets the recorder learn the instance id the harness chose.
type lazyRecorder struct{ r audit.Recorder }

func (l *lazyRecorder) Record(event, id string) error { return l.r.Record(event, id) }
