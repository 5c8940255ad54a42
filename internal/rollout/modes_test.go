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
			t.Logf("%v: %d events, %d duplicates, %d missed, %d failed creates, %d unstamped, %d in doubt, %d caught up, faults %v",
				s, res.Report.Events, res.Report.Duplicates, res.Report.Missed, res.Stats.FailedCreates,
				res.Unstamped, res.InDoubt, res.CaughtUp, res.Faults)
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
