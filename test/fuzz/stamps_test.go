// Package fuzz holds fuzz targets that cross packages (issue 5,
// docs/reliability.md); the parsers' own targets live next to them
// (stamp/, handover/, plugin/).
package fuzz

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
	"github.com/nri-handover/nri-handover/stamp"
)

type ledgerRecorder struct{ l *sim.Ledger }

func (r ledgerRecorder) Record(event, id string) error {
	r.l.Record(sim.Event(event), id, "owner", "1.0.0")
	return nil
}

// stampNode is an in-process runtime with one owner of the audit plugin.
type stampNode struct {
	rt     *sim.Runtime
	p      *plugin.Plugin
	signer *stamp.Signer
	key    string
	ledger *sim.Ledger
	pod    string
	used   int
	close  func()
}

// recycleAfter bounds how many containers one node sees: the runtime keeps
// every container it ever created, so a long fuzzing run starts over now
// and then.
const recycleAfter = 5000

func newStampNode(tb testing.TB) *stampNode {
	tb.Helper()
	logrus.SetOutput(io.Discard) // the NRI stub logs through the standard logger
	var closers []func()
	n := &stampNode{ledger: sim.NewLedger(), close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	n.rt = rt
	closers = append(closers, rt.Stop)
	root, err := os.MkdirTemp("", "nhs-")
	if err != nil {
		tb.Fatal(err)
	}
	closers = append(closers, func() { os.RemoveAll(root) })
	log := logrus.New()
	log.SetOutput(io.Discard)
	n.p, err = plugin.New(&audit.Plugin{Version: "1.0.0", Recorder: ledgerRecorder{n.ledger}},
		plugin.WithVersion("1.0.0"), plugin.WithPluginName("audit"), plugin.WithPluginIdx("10"),
		plugin.WithSocketPath(rt.SocketPath()), plugin.WithHandoverDir(root), plugin.WithInstanceID("owner"),
		plugin.WithLogger(logrus.NewEntry(log)))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.p.Run(ctx)
	}()
	closers = append(closers, func() {
		cancel()
		<-done
	})
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for {
		ch := n.p.RoleChanged()
		if n.p.Role() == handover.RoleOwner {
			break
		}
		select {
		case <-ch:
		case <-wctx.Done():
			tb.Fatal("the instance never owned the plugin")
		}
	}
	key, err := stamp.LoadOrCreateKey(root + "/audit/stamp.key")
	if err != nil {
		tb.Fatal(err)
	}
	if n.signer, err = stamp.NewSigner("audit", key); err != nil {
		tb.Fatal(err)
	}
	n.key = n.signer.Key()
	pod, err := rt.RunPod(context.Background(), "fuzz")
	if err != nil {
		tb.Fatal(err)
	}
	n.pod = pod.Id
	return n
}

// FuzzStampAnnotation: the value of the plugin's stamp annotation on a new
// container is user input (any pod may carry it), and so are the other
// annotations. Whatever they are — garbage, a forged MAC, a valid stamp
// copied from another container — the container is created, the owner acts
// on it exactly once, replaces the annotation with its own stamp, and
// counts the invalid one (Stats().BadStamps); only a stamp valid for that
// very container would make it skip the container.
func FuzzStampAnnotation(f *testing.F) {
	n := newStampNode(f)
	f.Cleanup(func() { n.close() })
	var lastStamp string
	f.Add("v1;1.0.0;a;AAAAAAAAAAAAAAAAAAAAAA", "", "", false)
	f.Add("", "io.kubernetes.pod.name", "x", true)
	f.Add("v2;1.0.0;a;AAAAAAAAAAAAAAAAAAAAAA", "stamp.nri-handover.io/other", "v1;1.0.0;a;AAAAAAAAAAAAAAAAAAAAAA", false)
	f.Fuzz(func(t *testing.T, value, extraKey, extraValue string, copyPrevious bool) {
		if !utf8.ValidString(value) || !utf8.ValidString(extraKey) || !utf8.ValidString(extraValue) {
			return // not representable in a pod's annotations (protobuf strings)
		}
		if n.used++; n.used > recycleAfter {
			n.close()
			n = newStampNode(t)
		}
		if copyPrevious && lastStamp != "" {
			value = lastStamp // a valid stamp, of another container
		}
		ann := map[string]string{n.key: value}
		if extraKey != "" && extraKey != n.key {
			ann[extraKey] = extraValue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		before := n.p.Stats()
		c, err := n.rt.CreateContainer(ctx, n.pod, "c", ann)
		if err != nil {
			t.Fatalf("creation with stamp annotation %q failed: %v", value, err)
		}
		after := n.p.Stats()
		acted := n.ledger.Acted(sim.EventCreateContainer, c.Id)
		if _, verr := n.signer.Verify(c.Id, ann); verr == nil {
			if len(acted) != 0 || after.SkippedStamped != before.SkippedStamped+1 {
				t.Fatalf("container with a valid stamp of its own: acted %v, stats %+v", acted, after)
			}
		} else {
			if len(acted) != 1 || after.BadStamps != before.BadStamps+1 || after.SkippedStamped != before.SkippedStamped {
				t.Fatalf("stamp annotation %q (%v): acted %v, stats %+v -> %+v", value, verr, acted, before, after)
			}
			st, err := n.signer.Verify(c.Id, c.Annotations)
			if err != nil || st.Instance != "owner" {
				t.Fatalf("stamp annotation %q was not replaced by the owner's: %q (%v)", value, c.Annotations[n.key], err)
			}
			lastStamp = c.Annotations[n.key]
		}
		if err := n.rt.RemoveContainer(ctx, c.Id); err != nil {
			t.Fatal(err)
		}
		if got := n.ledger.Acted(sim.EventRemoveContainer, c.Id); len(got) != 1 {
			t.Fatalf("RemoveContainer acted on by %v", got)
		}
		if st := n.rt.Stats(); st.FailedCreates != 0 || len(st.Timeouts) != 0 {
			t.Fatalf("runtime: %d failed creations, timeouts %v", st.FailedCreates, st.Timeouts)
		}
	})
}
