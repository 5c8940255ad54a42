package test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin/metrics"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

// brokenSync is the audit plugin whose Synchronize fails (hang false) or
// never returns (hang true), as a broken new version's might.
type brokenSync struct {
	*audit.Plugin
	hang    bool
	calls   atomic.Int32
	called  chan struct{} // one send per call, never blocking
	release chan struct{} // closed at the end of the test: a hung call returns
}

func (b *brokenSync) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	b.calls.Add(1)
	select {
	case b.called <- struct{}{}:
	default:
	}
	if b.hang {
		<-b.release // ignores its context, as a stuck handler does
	}
	return nil, errors.New("v2 cannot read its configuration")
}

// TestFailedNewcomerChangesNothing: a newcomer whose author Synchronize
// fails, or hangs past the runtime's patience, never takes the plugin from
// the working owner. It claims, is made ready, fails, and gives ownership
// back inside its own Synchronize; it retries on its reconnection and fails
// again; meanwhile the old owner acts on every event of a steady load
// (0 missed, 0 twice), and the newcomer is never Ready and counts the
// outcome not-ready.
func TestFailedNewcomerChangesNothing(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "error", true: "hang"}[hang], func(t *testing.T) {
			n := newNode(t)
			v1 := n.start("a-v1", "1.0.0")
			waitRole(t, v1, handover.RoleOwner)

			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // a steady stream of pod life cycles
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					if err := n.rt.Lifecycle(context.Background(), fmt.Sprintf("p%d", i), 2); err != nil {
						t.Error(err)
						return
					}
				}
			}()

			author := &brokenSync{Plugin: n.auditPlugin("b-v2", "2.0.0"), hang: hang,
				called: make(chan struct{}, 8), release: make(chan struct{})}
			t.Cleanup(func() { close(author.release) })
			v2 := n.startAuthor("b-v2", "2.0.0", author)
			notReady := 0
			for author.calls.Load() < 3 { // the first try and two retries
				select {
				case <-author.called:
				case <-v2.p.RoleChanged():
				}
				if ok, why := v2.p.Ready(); ok {
					t.Fatalf("broken newcomer reported Ready (%s)", why)
				} else if strings.Contains(why, "not ready: ") {
					notReady++
				}
			}
			stop()
			wg.Wait()
			testutil.WaitStatus(t, v1.p, "v1 owner", func(st handover.Status) bool { return st.Role == handover.RoleOwner })
			// The last try's claim may still be in flight (hang: its ready
			// runs until the claim gives up on it and gives the name back).
			waitFor(t, "v1 to own the plugin after the broken newcomer's tries", func() bool { return n.owns(v1) })
			if ok, why := v2.p.Ready(); ok {
				t.Fatalf("broken newcomer Ready: %s", why)
			}
			rep := n.check()
			if rep.Acted == 0 || rep.ByInstance["b-v2"] != 0 {
				t.Fatalf("acts by instance %v: want all by a-v1", rep.ByInstance)
			}
			srv := httptest.NewServer(metrics.Handler(v2.p))
			defer srv.Close()
			if got := value(scrape(t, srv.URL), "nri_handover_handovers_total", map[string]string{"outcome": "not-ready"}); got < 3 {
				t.Errorf("nri_handover_handovers_total{outcome=not-ready} = %v, want >= 3", got)
			}
			t.Logf("%s: %d events acted on by v1, %d Synchronize calls of v2, %d seen not ready with the reason",
				map[bool]string{false: "error", true: "hang"}[hang], rep.Acted, author.calls.Load(), notReady)
		})
	}
}
