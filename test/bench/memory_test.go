package bench

// Memory with 10,000 containers known to the runtime (issue 6): one
// instance of the audit plugin, on the bare NRI stub or on the harness,
// connects to a runtime that already holds the containers and synchronizes
// with all of them, as a plugin does when it starts (or is upgraded) on a
// busy node. Each runs with no container (the instance's fixed cost) and
// with 10,000 (sub-benchmarks containers-0 and containers-10000).
//
//   - BenchmarkMemory runs the instance in this process and reports the
//     heap it keeps once synchronized (the difference of the live heap
//     after a GC with and without it) and what its start and Synchronize
//     allocate; ns/op is that start and Synchronize.
//   - BenchmarkRSS runs the instance as a process of its own (the sample
//     binaries, as deployed: sample-plugins/audit/cmd/nri-audit and
//     test/e2e/cmd/nri-audit-bare, built without the race detector) and
//     reports its resident memory from /proc/<pid>/status, once
//     synchronized and after 1,100 more events; ns/op is the process's
//     start and Synchronize.
//
// Both reuse one runtime per number of containers and test binary (built
// on first use: pods of 100 containers, created through a harnessed
// instance of version 1.0.0, so that every container carries a valid
// stamp), and start version 2.0.0: the harness verifies every stamp and
// finds them all older, as in an upgrade. Run them with -benchtime 1x
// (make bench does): each op starts an instance.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/rollout"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
)

const (
	containersPerPod = 100
	opTimeout        = time.Minute // bound of one instance's start, sync and stop
)

// world is a runtime with its containers and the handover root whose
// stamp key signed them.
type world struct {
	rt         *sim.Runtime
	root       string // handover root; also holds ledgers
	containers int
	flush      int // events sent to make the runtime drop a stopped plugin
}

var (
	worldsMu sync.Mutex
	worlds   = map[int]*world{} // by number of containers
	binDir   string

	binsOnce sync.Once
	bins     struct{ harness, bare string }
	binsErr  error
)

// cleanupShared stops what the benchmarks share; TestMain calls it.
func cleanupShared() {
	worldsMu.Lock()
	defer worldsMu.Unlock()
	for _, w := range worlds {
		w.rt.Stop()
		os.RemoveAll(w.root)
	}
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// getWorld returns the runtime with n containers, building it on first use.
func getWorld(b *testing.B, n int) *world {
	b.Helper()
	worldsMu.Lock()
	defer worldsMu.Unlock()
	if w := worlds[n]; w != nil {
		return w
	}
	start := time.Now()
	w, err := buildWorld(n)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("runtime with %d containers built in %v", n, time.Since(start).Round(time.Millisecond))
	worlds[n] = w
	return w
}

func buildWorld(n int) (*world, error) {
	rt, err := sim.Start(sim.Options{})
	if err != nil {
		return nil, err
	}
	// A short path: unix socket paths are limited to 108 bytes.
	root, err := os.MkdirTemp(rollout.HandoverTempBase(), "nhm-")
	if err != nil {
		rt.Stop()
		return nil, err
	}
	w := &world{rt: rt, root: root, containers: n}
	if err := w.populate(); err != nil {
		rt.Stop()
		os.RemoveAll(root)
		return nil, err
	}
	return w, nil
}

// populate creates the containers through a harnessed instance of version
// 1.0.0, which stamps them, and stops it.
func (w *world) populate() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, stop, err := w.startHarness(ctx, "1.0.0", "i0")
	if err != nil {
		return err
	}
	for i := 0; i*containersPerPod < w.containers; i++ {
		pod, err := w.rt.RunPod(ctx, fmt.Sprintf("known%d", i))
		if err != nil {
			stop()
			return err
		}
		for j := 0; j < containersPerPod && i*containersPerPod+j < w.containers; j++ {
			if _, err := w.rt.CreateContainer(ctx, pod.Id, fmt.Sprintf("known%d-c%d", i, j), nil); err != nil {
				stop()
				return err
			}
		}
	}
	if got := p.Stats().Stamped; got != uint64(w.containers) {
		stop()
		return fmt.Errorf("instance i0 stamped %d containers, want %d", got, w.containers)
	}
	stop()
	return w.dropStopped(ctx)
}

// dropStopped makes the runtime notice that its plugin has gone: the
// adaptation counts a closed plugin out at the end of the next event.
func (w *world) dropStopped(ctx context.Context) error {
	w.flush++
	if err := w.rt.Lifecycle(ctx, fmt.Sprintf("flush%d", w.flush), 0); err != nil {
		return err
	}
	return w.rt.WaitPlugins(ctx, 0)
}

// startHarness starts an in-process harnessed audit instance and waits
// until it has synchronized (and, being alone, owns the plugin).
func (w *world) startHarness(ctx context.Context, ver, id string) (*plugin.Plugin, func(), error) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	p, err := plugin.New(&audit.Plugin{Version: ver, Recorder: nopRecorder{}},
		plugin.WithVersion(ver), plugin.WithPluginName("audit"), plugin.WithPluginIdx("10"),
		plugin.WithSocketPath(w.rt.SocketPath()), plugin.WithHandoverDir(w.root),
		plugin.WithInstanceID(id), plugin.WithLogger(logrus.NewEntry(quiet)),
		plugin.WithLeaveTimeout(time.Second))
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(runCtx); close(done) }()
	stop := func() { cancel(); <-done }
	if err := w.rt.WaitPlugins(ctx, 1); err != nil {
		stop()
		return nil, nil, err
	}
	if r := p.Role(); r != handover.RoleOwner {
		stop()
		return nil, nil, fmt.Errorf("instance %s synchronized as %v, want owner", id, r)
	}
	return p, stop, nil
}

// startBareStub starts an in-process audit plugin on the bare stub and
// waits until it has synchronized.
func (w *world) startBareStub(ctx context.Context) (func(), error) {
	s, err := stub.New(&audit.Plugin{Version: "2.0.0", Recorder: nopRecorder{}},
		stub.WithPluginName("audit"), stub.WithPluginIdx("10"), stub.WithSocketPath(w.rt.SocketPath()))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(runCtx); close(done) }()
	stop := func() { cancel(); <-done }
	if err := w.rt.WaitPlugins(ctx, 1); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// liveHeap returns the live heap after two full collections.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// totalAlloc returns the bytes allocated so far by this process.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// BenchmarkMemory: one instance in this process synchronizes with the
// runtime's containers; see the top of this file. Metrics: heap-KiB is what
// the instance keeps on the heap once synchronized, heap-B/container that
// divided by the containers, sync-B/container what starting and
// synchronizing allocated per container (runtime side included, as in
// B/op).
func BenchmarkMemory(b *testing.B) {
	forEachWorld(b, func(b *testing.B, w *world, cfg string) {
		var kept int64
		var allocated uint64
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			h0 := liveHeap()
			a0 := totalAlloc()
			b.StartTimer()
			var stop func()
			var err error
			if cfg == "harness" {
				var p *plugin.Plugin
				if p, stop, err = w.startHarness(ctx, "2.0.0", fmt.Sprintf("m%d", i)); err == nil &&
					p.Stats().Acted != 0 {
					err = errors.New("the new owner acted on an event during its synchronization")
				}
			} else {
				stop, err = w.startBareStub(ctx)
			}
			b.StopTimer()
			allocated += totalAlloc() - a0
			if err != nil {
				cancel()
				b.Fatal(err)
			}
			kept += liveHeap() - h0
			stop()
			err = w.dropStopped(ctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.StopTimer()
		perOp := float64(kept) / float64(b.N)
		b.ReportMetric(perOp/1024, "heap-KiB")
		if w.containers > 0 {
			b.ReportMetric(perOp/float64(w.containers), "heap-B/container")
			b.ReportMetric(float64(allocated)/float64(b.N)/float64(w.containers), "sync-B/container")
		}
	})
}

// worldSizes are the numbers of containers the memory benchmarks run with:
// none (the instance's fixed cost) and 10,000.
var worldSizes = []int{0, 10000}

// forEachWorld runs f as sub-benchmarks containers-N/bare-stub and
// containers-N/harness for each of worldSizes.
func forEachWorld(b *testing.B, f func(b *testing.B, w *world, cfg string)) {
	for _, n := range worldSizes {
		b.Run(fmt.Sprintf("containers-%d", n), func(b *testing.B) {
			for _, cfg := range []string{"bare-stub", "harness"} {
				b.Run(cfg, func(b *testing.B) { f(b, getWorld(b, n), cfg) })
			}
		})
	}
}

// buildPlugins builds the sample plugin (nri-audit, harnessed) and its bare
// stub twin (nri-audit-bare) once per test binary, without the race
// detector, as they are deployed.
func buildPlugins(b *testing.B) {
	b.Helper()
	binsOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := os.MkdirTemp("", "nhm-bin-")
		if err != nil {
			binsErr = err
			return
		}
		worldsMu.Lock()
		binDir = out
		worldsMu.Unlock()
		cmd := exec.Command(goTool, "build", "-o", out+string(filepath.Separator),
			"./sample-plugins/audit/cmd/nri-audit", "./test/e2e/cmd/nri-audit-bare")
		cmd.Dir = filepath.Join("..", "..")
		if msg, err := cmd.CombinedOutput(); err != nil {
			binsErr = fmt.Errorf("go build: %v\n%s", err, msg)
			return
		}
		bins.harness, bins.bare = filepath.Join(out, "nri-audit"), filepath.Join(out, "nri-audit-bare")
	})
	if binsErr != nil {
		b.Fatal(binsErr)
	}
}

// procMem is the memory of a process, in bytes, from /proc/<pid>/status.
type procMem struct {
	rss  int64 // VmRSS: resident now
	hwm  int64 // VmHWM: the peak of VmRSS
	anon int64 // RssAnon: heap, stacks and other private memory
	file int64 // RssFile: mapped files, mostly the binary's code and data
}

// procMemory reads the memory of a process.
func procMemory(pid int) (procMem, error) {
	var m procMem
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	fields := map[string]*int64{"VmRSS": &m.rss, "VmHWM": &m.hwm, "RssAnon": &m.anon, "RssFile": &m.file}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		dst := fields[k]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %q: %w", k, v, err)
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if m.rss == 0 || m.hwm == 0 {
		return m, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return m, nil
}

// BenchmarkRSS: one instance as a process of its own synchronizes with the
// runtime's containers, then handles 100 lifecycles (1,100 events); see the
// top of this file. Metrics, in MiB: rss-sync (VmRSS) once synchronized;
// after the events rss, its parts anon (RssAnon: heap and stacks) and file
// (RssFile: mostly the binary), and hwm, the peak (VmHWM).
func BenchmarkRSS(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc/<pid>/status")
	}
	forEachWorld(b, func(b *testing.B, w *world, cfg string) {
		buildPlugins(b)
		var synced, after procMem
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			s, a, err := w.runProcess(ctx, b, cfg, i)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			synced.rss += s.rss
			after.rss += a.rss
			after.hwm += a.hwm
			after.anon += a.anon
			after.file += a.file
		}
		b.StopTimer()
		mib := func(v int64) float64 { return float64(v) / float64(b.N) / (1 << 20) }
		b.ReportMetric(mib(synced.rss), "rss-sync-MiB")
		b.ReportMetric(mib(after.rss), "rss-MiB")
		b.ReportMetric(mib(after.anon), "anon-MiB")
		b.ReportMetric(mib(after.file), "file-MiB")
		b.ReportMetric(mib(after.hwm), "hwm-MiB")
	})
}

// runProcess starts one plugin process, times its start and Synchronize,
// reads its memory, runs events through it, reads again and stops it.
func (w *world) runProcess(ctx context.Context, b *testing.B, cfg string, i int) (synced, after procMem, err error) {
	ledger := filepath.Join(w.root, "ledger-"+cfg)
	var cmd *exec.Cmd
	if cfg == "harness" {
		cmd = exec.Command(bins.harness, "-name", "audit", "-idx", "10", "-nri-socket", w.rt.SocketPath(),
			"-handover-dir", w.root, "-instance", fmt.Sprintf("r%d", i), "-version", "2.0.0", "-ledger", ledger)
	} else {
		cmd = exec.Command(bins.bare, "-name", "audit", "-idx", "10", "-nri-socket", w.rt.SocketPath(),
			"-version", "2.0.0", "-ledger", ledger)
	}
	cmd.Env = pluginEnv()
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return synced, after, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	if err := w.rt.WaitPlugins(ctx, 1); err != nil {
		return synced, after, err
	}
	b.StopTimer()
	defer b.StartTimer()
	pid := cmd.Process.Pid
	if synced, err = procMemory(pid); err != nil {
		return synced, after, err
	}
	for j := 0; j < 100; j++ {
		if err := w.rt.Lifecycle(ctx, fmt.Sprintf("ev%d-%d", i, j), 1); err != nil {
			return synced, after, err
		}
	}
	if after, err = procMemory(pid); err != nil {
		return synced, after, err
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return synced, after, err
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			return synced, after, fmt.Errorf("%s plugin process: %w", cfg, err)
		}
	case <-ctx.Done():
		return synced, after, fmt.Errorf("%s plugin process did not stop: %w", cfg, ctx.Err())
	}
	return synced, after, w.dropStopped(ctx)
}

// pluginEnv is this process's environment without the variables the
// plugins would read instead of their flags.
func pluginEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NRI_HANDOVER_") || strings.HasPrefix(kv, "NRI_PLUGIN_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
