package rollout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/internal/rollout"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// scenario is a runtime mode and a number of owner faults.
type scenario struct {
	mode   plugintest.Mode
	faults int
}

func (s scenario) String() string { return fmt.Sprintf("%s/faults=%d", s.mode, s.faults) }

// exact says in which scenarios today's protocol keeps every guarantee
// (no duplicate, no miss, no failed creation, every container stamped by
// the instance that created it). Issue 10's protocol work is to make every
// entry true; flip each as it lands. A scenario marked false still runs and
// logs what it measured.
var exact = map[scenario]bool{
	{plugintest.ModeContainerd, 0}: true,
	{plugintest.ModeCRIO, 0}:       true,
	{plugintest.ModeGap, 0}:        true,
	{plugintest.ModeExitStop, 0}:   true,
	{plugintest.ModeContainerd, 2}: false, // a killed or frozen owner loses what it held
	{plugintest.ModeCRIO, 2}:       false,
	{plugintest.ModeGap, 2}:        false,
	{plugintest.ModeExitStop, 2}:   false,
}

// declared says in which scenarios every missed event is declared today
// (in a declared gap window, or declared in doubt): the promise "nothing
// lost without saying so". Measured 2026-12-02 with faults, in every mode:
// not yet. An owner the runtime dropped (frozen past the request timeout)
// or one promoted while its runtime connection is gone is taken for live
// by a newcomer claiming in its Synchronize, which takes over cleanly and
// declares no gap, so the events since the drop are declared by nobody;
// and a takeover by rule 3 or 4 of the cut declares no gap even when the
// taker was not in the runtime's chain (it was reconnecting) when the
// runtime gave up on the owner. Those are internal/protocol's to fix; flip
// each entry as it lands. A scenario marked false still runs, checks its
// accounting and logs what was undeclared.
var declared = map[scenario]bool{
	{plugintest.ModeContainerd, 0}: true,
	{plugintest.ModeCRIO, 0}:       true,
	{plugintest.ModeGap, 0}:        true,
	{plugintest.ModeExitStop, 0}:   true,
	{plugintest.ModeContainerd, 2}: true,
	{plugintest.ModeCRIO, 2}:       true,
	{plugintest.ModeGap, 2}:        true,
	{plugintest.ModeExitStop, 2}:   true,
}

// Every mode, with and without owner faults, under a rollout: the run
// completes with the handovers and faults it was asked for, each mode did
// what it says (gaps in gap mode, self-exits in exit-stop mode), nothing is
// ever declared in doubt beyond the faults, and where exact says so, every
// guarantee holds.
func TestRolloutInEveryMode(t *testing.T) {
	for s, wantExact := range exact {
		t.Run(s.String(), func(t *testing.T) {
			cfg := rollout.DefaultConfig()
			cfg.Events, cfg.Handovers, cfg.Faults, cfg.Mode = 3000, 6, s.faults, s.mode
			if s.faults > 0 {
				// A frozen owner holds the stream up for this long. Without
				// faults NRI's default stands: under -race on 2 cores a
				// busy instance can take longer than 300 ms.
				cfg.RequestTimeout = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := rollout.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v: %d events, %d duplicates, %d unacted (%d in a gap window, %d in doubt, %d caught up, %d undeclared), %d failed creates, %d unstamped (%d caught up, %d unseen, %d unprocessed), %d in doubt, %d caught up, %d gaps, faults %v",
				s, res.Report.Events, res.Report.Duplicates, res.Report.Missed,
				res.Missed.InGap, res.Missed.InDoubt, res.Missed.CaughtUp, res.Missed.UndeclaredCount, res.Stats.FailedCreates,
				res.Unstamped, res.CaughtUpContainers, res.Unseen, res.UnprocessedCount, res.InDoubt, res.CaughtUp, res.Gaps, res.Faults)
			// Every missed event is sorted into exactly one class (an
			// event missed and another occurrence of it acted twice count
			// as a miss here and not in the report).
			if sorted := res.Missed.InGap + res.Missed.InDoubt + res.Missed.CaughtUp + res.Missed.UndeclaredCount; sorted < res.Report.Missed ||
				res.Report.Duplicates == 0 && sorted != res.Report.Missed {
				t.Errorf("%d missed events sorted, the report has %d", sorted, res.Report.Missed)
			}
			// Every gap ends with a catch-up: a container no instance
			// processed is handed to an author unless it lived and ended
			// while no instance was connected (a declared gap window with
			// events missed in it); none is handed twice.
			if res.UnprocessedCount != 0 && res.Missed.InGap == 0 || len(res.HandedTwice) != 0 ||
				res.Unstamped != res.CaughtUpContainers+res.Unseen+res.UnprocessedCount {
				t.Errorf("unstamped %d = %d caught up + %d unseen + %d unprocessed %v; handed twice %v",
					res.Unstamped, res.CaughtUpContainers, res.Unseen, res.UnprocessedCount, res.Unprocessed, res.HandedTwice)
			} else if res.UnprocessedCount != 0 {
				t.Logf("known: %d containers never handed to an author: %v", res.UnprocessedCount, res.Unprocessed)
			}
			if !res.Missed.GapsCaptured {
				t.Errorf("%d gap windows collected, the instances declared %d gaps", len(res.Missed.Windows), res.Gaps)
			}
			switch {
			case !res.AllMissedDeclared() && declared[s]:
				t.Errorf("%d missed events undeclared:\n%v", res.Missed.UndeclaredCount, res.Missed.UndeclaredRuns)
			case !res.AllMissedDeclared():
				t.Logf("known (declared[%v] is false): %d missed events undeclared:\n%v", s, res.Missed.UndeclaredCount, res.Missed.UndeclaredRuns)
			case !declared[s]:
				t.Logf("every missed event was declared: declared[%v] may be flipped (if it holds over many runs)", s)
			}
			switch {
			case res.Report.Events < cfg.Events:
				t.Errorf("%d events delivered, want at least %d", res.Report.Events, cfg.Events)
			case len(res.Handovers) != cfg.Handovers || len(res.Faults) != cfg.Faults:
				t.Errorf("%d handovers and %d faults, want %d and %d", len(res.Handovers), len(res.Faults), cfg.Handovers, cfg.Faults)
			case len(res.WorkloadErrors) != 0:
				t.Errorf("workload errors: %v", res.WorkloadErrors)
			case res.InDoubt > s.faults:
				t.Errorf("%d events in doubt with %d faults", res.InDoubt, s.faults)
			case s.mode == plugintest.ModeGap && res.Stats.GapEvents == 0:
				t.Error("gap mode delivered no event in a gap")
			case s.mode == plugintest.ModeExitStop && res.Stats.ExitStops == 0:
				t.Error("no container exited by itself in exit-stop mode")
			case s.mode == plugintest.ModeContainerd && res.Stats.GapEvents != 0:
				t.Errorf("%d events in a gap in containerd mode", res.Stats.GapEvents)
			}
			if wantExact && !res.OK() {
				t.Errorf("guarantees broken:\n%v", res.Problems())
			}
		})
	}
}
