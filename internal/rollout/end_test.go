package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/internal/rollout"
)

// A run whose last step freezes the only instance ends only once an
// instance acts again: the frozen owner, dropped by the runtime, thaws
// and reconnects, and its takeover declares the gap. A run that ended as
// soon as the event count was reached would leave the events after the
// drop undeclared (no takeover had happened yet) and the unprocessed
// containers created meanwhile with no catch-up.
func TestRunEndsAfterTheLastTakeover(t *testing.T) {
	cfg := rollout.DefaultConfig()
	cfg.Events, cfg.Handovers, cfg.Faults, cfg.Seed = 600, 0, 1, 1
	cfg.RequestTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := rollout.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Faults) != 1 || !strings.HasPrefix(res.Faults[0], "freeze ") {
		t.Fatalf("faults %v: want one freeze (seed %d)", res.Faults, cfg.Seed)
	}
	t.Logf("%d events, %d unacted (%d in a gap window, %d in doubt, %d caught up, %d undeclared), %d gaps, unstamped %d (%d caught up, %d unseen, %d unprocessed)",
		res.Report.Events, res.Report.Missed, res.Missed.InGap, res.Missed.InDoubt, res.Missed.CaughtUp, res.Missed.UndeclaredCount,
		res.Gaps, res.Unstamped, res.CaughtUpContainers, res.Unseen, res.UnprocessedCount)
	if !res.AllMissedDeclared() {
		t.Errorf("%d missed events undeclared:\n%s", res.Missed.UndeclaredCount, strings.Join(res.Missed.UndeclaredRuns, "\n"))
	}
	if res.Report.Missed != 0 && res.Gaps == 0 {
		t.Errorf("%d events missed and no gap declared", res.Report.Missed)
	}
	if res.UnprocessedCount != 0 || res.Report.Duplicates != 0 || res.Stats.FailedCreates != 0 {
		t.Errorf("unprocessed %v, duplicates %d, failed creates %d", res.Unprocessed, res.Report.Duplicates, res.Stats.FailedCreates)
	}
}
