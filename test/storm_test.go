// Package test holds the integration tests: real harness instances over the
// real NRI socket of the in-process runtime (github.com/containerd/nri's
// adaptation, the code containerd embeds).
package test

import (
	"context"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/internal/rollout"
)

// TestStorm runs thousands of pod and container lifecycles through many
// handovers at random moments, and checks every event against an
// independent ledger: acted on exactly once, no creation failed, no
// instance dropped, no request to an instance failed (retiring instances
// close their connections quietly), every container stamped once by the
// instance that created it.
func TestStorm(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*rollout.Config)
	}{
		{"same index", func(c *rollout.Config) {}},
		{"newcomer first and second in turn", func(c *rollout.Config) { c.Order = rollout.Alternate; c.Seed = 2 }},
		{"old instance kept running", func(c *rollout.Config) { c.Order = rollout.Alternate; c.KeepOld = true; c.Seed = 3 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rollout.DefaultConfig()
			cfg.Events, cfg.Handovers, cfg.Workers = 6000, 24, 3
			tc.cfg(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := rollout.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d events, %d handovers in %v; acted by version %v", res.Report.Events,
				len(res.Handovers), res.Elapsed, res.ActedByVersion)
			if res.Report.Events < cfg.Events || len(res.Handovers) != cfg.Handovers {
				t.Fatalf("ran %d events and %d handovers, want >= %d and %d",
					res.Report.Events, len(res.Handovers), cfg.Events, cfg.Handovers)
			}
			for _, p := range res.Problems() {
				t.Error(p)
			}
			// Retirement is invisible to the runtime: no request to any
			// instance failed (a connection closed with one in flight
			// makes containerd log "closing plugin ... ttrpc: closed").
			if n := len(res.Stats.PluginErrorTexts); n != 0 {
				t.Errorf("%d runtime requests to instances failed: %v", n, res.Stats.PluginErrorTexts)
			}
			// Both versions acted: the handovers really moved the work.
			for _, v := range cfg.Versions {
				if res.ActedByVersion[v] == 0 {
					t.Errorf("version %s never acted", v)
				}
			}
		})
	}
}
