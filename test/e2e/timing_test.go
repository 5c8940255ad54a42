//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLatencyBenchmark measures CreateContainer+StartContainer through CRI,
// side by side in one run: with no plugin, with the audit logic on the bare
// NRI stub, and with the audit plugin on the harness. The configurations
// take turns in rounds so that drift of the machine hits all alike, and
// the harness is compared with the bare stub round by round (a paired
// comparison: the ratio of their medians in each round), which the
// machine's drift between rounds does not blur.
//
// NRI_HANDOVER_E2E_BENCH_ROUNDS sets the number of rounds (default 5);
// NRI_HANDOVER_E2E_BENCHSTAT_OUT names a file that receives every
// container's latency in Go's benchmark format, one configuration per
// value of /plugin, for benchstat (`make bench-e2e`).
func TestLatencyBenchmark(t *testing.T) {
	n := newNode(t)
	e := n.e
	const perRound, warmup = 25, 2
	rounds := 5
	if v := os.Getenv("NRI_HANDOVER_E2E_BENCH_ROUNDS"); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 {
			t.Fatalf("NRI_HANDOVER_E2E_BENCH_ROUNDS=%q: want a whole number of rounds, at least 1", v)
		}
		rounds = r
	}
	type config struct {
		name  string
		key   string          // its /plugin value in the benchstat file
		start func() func()   // starts the plugin; returns its stop
		lat   []time.Duration // every measured container, in order
		round []time.Duration // the median of each round
	}
	configs := []*config{
		{name: "no plugin", key: "none", start: func() func() { return func() {} }},
		{name: "audit on the bare NRI stub", key: "bare", start: func() func() {
			before := n.connectedPlugins()
			cmd := e.startProc(t, filepath.Join(e.bin, "nri-audit-bare"), []string{"-name", "audit-bare", "-idx", pluginIdx,
				"-nri-socket", e.nriSock, "-ledger", filepath.Join(n.dir, "ledger-bare")}, filepath.Join(n.dir, "bare.log"))
			deadline := time.Now().Add(ownerWithin)
			for n.connectedPlugins() == before {
				if time.Now().After(deadline) {
					t.Fatalf("the bare plugin did not connect within %v", ownerWithin)
				}
				time.Sleep(5 * time.Millisecond)
			}
			return func() {
				_ = cmd.Process.Signal(unix.SIGTERM)
				_ = cmd.Wait()
				e.untrackProc(cmd)
			}
		}},
		{name: "audit on the nri-handover harness", key: "harness", start: func() func() {
			in := n.start(instanceOpts{version: "1.0.0", noRace: true})
			in.mustOwn(t, ownerWithin)
			return func() {
				if err := in.stop(exitWithin); err != nil {
					t.Error(err)
				}
			}
		}},
	}
	ctx := ctxFor(t, 10*time.Minute)
	load0 := loadavg()
	began := time.Now()
	for r := 0; r < rounds; r++ {
		for k := range configs {
			c := configs[(k+r)%len(configs)] // rotate who goes first
			stop := c.start()
			measured := len(c.lat)
			p, err := e.cri.runPod(ctx, e.runID, "bench")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < warmup+perRound; i++ {
				t0 := time.Now()
				id, err := e.cri.createContainer(ctx, p, "b")
				if err != nil {
					t.Fatalf("%s: CreateContainer: %v", c.name, err)
				}
				if err := e.cri.startContainer(ctx, id); err != nil {
					t.Fatalf("%s: StartContainer: %v", c.name, err)
				}
				d := time.Since(t0)
				if i == warmup {
					// The plugin really acted (or, with none, nothing did).
					sp, err := e.cri.spec(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := len(sp.env(auditEnv)), map[bool]int{true: 0, false: 1}[c.name == "no plugin"]; got != want {
						t.Fatalf("%s: %s set %d times, want %d", c.name, auditEnv, got, want)
					}
				}
				if i >= warmup {
					c.lat = append(c.lat, d)
				}
				if err := e.cri.stopContainer(ctx, id); err != nil {
					t.Fatal(err)
				}
				if err := e.cri.removeContainer(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.cri.stopRemovePod(ctx, p.id); err != nil {
				t.Fatal(err)
			}
			stop()
			c.round = append(c.round, percentile(c.lat[measured:], 50))
		}
		e.progress("benchmark: round %d of %d done", r+1, rounds)
	}
	took := time.Since(began)
	load1 := loadavg()

	var b strings.Builder
	fmt.Fprintf(&b, "| configuration | containers | median | p90 | mean |\n|---|---:|---:|---:|---:|\n")
	base := percentile(configs[0].lat, 50)
	for _, c := range configs {
		var sum time.Duration
		for _, d := range c.lat {
			sum += d
		}
		med := percentile(c.lat, 50)
		fmt.Fprintf(&b, "| %s | %d | %v (%+v) | %v | %v |\n", c.name, len(c.lat), ms(med), ms(med-base),
			ms(percentile(c.lat, 90)), ms(sum/time.Duration(len(c.lat))))
	}
	// Paired: harness against the bare stub, and the bare stub against no
	// plugin, round by round.
	bare, harness, none := configs[1], configs[2], configs[0]
	fmt.Fprintf(&b, "\nPer round (paired, the same minutes of the machine): %s\n", pairedLine("harness / bare stub", harness.round, bare.round))
	fmt.Fprintf(&b, "Per round: %s\n", pairedLine("bare stub / no plugin", bare.round, none.round))
	machine := machineLine(ctx, e)
	fmt.Fprintf(&b, "\nCreateContainer+StartContainer through CRI, one container at a time in one pod; %d round(s) of %d containers per configuration, the configurations taking turns; %v in all.\n",
		rounds, perRound, took.Round(time.Second))
	fmt.Fprintf(&b, "Machine: %s; load average %s before, %s after.\n", machine, load0, load1)
	t.Logf("latency of CreateContainer+StartContainer:\n%s", b.String())
	if out := os.Getenv("NRI_HANDOVER_E2E_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if out := os.Getenv("NRI_HANDOVER_E2E_BENCHSTAT_OUT"); out != "" {
		var bs strings.Builder
		fmt.Fprintf(&bs, "goos: %s\ngoarch: %s\npkg: github.com/nri-handover/nri-handover/test/e2e\nmachine: %s\n", runtime.GOOS, runtime.GOARCH, machine)
		// The bare stub first: benchstat compares the other columns with it.
		for _, c := range []*config{bare, harness, none} {
			for _, d := range c.lat {
				fmt.Fprintf(&bs, "BenchmarkCreateStart/plugin=%s 1 %d ns/op\n", c.key, d.Nanoseconds())
			}
		}
		if err := os.WriteFile(out, []byte(bs.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// pairedLine describes the ratios a[i]/b[i] of two configurations' medians
// in the same rounds: their median and range, and in how many rounds a
// was the slower.
func pairedLine(name string, a, b []time.Duration) string {
	ratios := make([]float64, 0, len(a))
	slower := 0
	for i := range a {
		if i >= len(b) || b[i] <= 0 {
			break
		}
		ratios = append(ratios, float64(a[i])/float64(b[i]))
		if a[i] > b[i] {
			slower++
		}
	}
	if len(ratios) == 0 {
		return name + ": no rounds"
	}
	sort.Float64s(ratios)
	med := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		med = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
	}
	return fmt.Sprintf("%s median %.3f (range %.3f-%.3f over %d round(s); the first slower in %d)",
		name, med, ratios[0], ratios[len(ratios)-1], len(ratios), slower)
}

func loadavg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// machineLine describes the machine as the benchmark saw it.
func machineLine(ctx context.Context, e *env) string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	kernel := unix.ByteSliceToString(u.Release[:])
	ctrd, _ := e.cri.version(ctx)
	runcV, _ := exec.Command(e.runc, "--version").Output()
	cg := "v1"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cg = "v2"
	}
	return fmt.Sprintf("%d CPUs (nproc), kernel %s, %s (%s, go install), %s, cgroup %s, %s",
		runtime.NumCPU(), kernel, ctrd, e.ctrdVer, strings.SplitN(strings.TrimSpace(string(runcV)), "\n", 2)[0], cg, runtime.Version())
}
