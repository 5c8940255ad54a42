//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What the suite builds and runs.
const (
	defaultContainerdVersion = "v2.2.9"
	imageName                = "nri-handover.test/e2e/sleep:1"
	criNamespace             = "k8s.io"
	// nriRequestTimeout is containerd's plugin_request_timeout: a plugin
	// that takes longer to answer one event is dropped.
	nriRequestTimeout = 2 * time.Second
	tempPrefix        = "nho-e2e-"
	// shimSocketDir is where containerd's shims put their sockets, whatever
	// the configuration says.
	shimSocketDir = "/run/containerd"
)

// env is the machine-wide state of one run: the private containerd and
// everything the tests start.
type env struct {
	start   time.Time
	root    string // the run's temporary directory; everything lives under it
	runID   string // base name of root, also the pods' cgroup parent
	repo    string // module root
	bin     string // project binaries built for this run
	raceBin string // the harnessed plugins built with -race
	ctrdBin string // containerd, containerd-shim-runc-v2, ctr
	ctrdVer string
	runc    string

	config, sock, nriSock, runcRoot, ctrdLog string

	// hadRunContainerd: /run/containerd existed before the run (the shims
	// create /run/containerd/s for their sockets).
	hadRunContainerd bool

	ctrdMu   sync.Mutex
	ctrd     *exec.Cmd
	ctrdDone chan struct{}

	cri *criClient

	procMu sync.Mutex
	procs  map[int]*exec.Cmd // plugin processes still running

	teardownOnce sync.Once
}

// progress prints one line of progress on stderr, with the time since the
// run started, so that a person watching `make test` sees where it is.
func (e *env) progress(format string, args ...any) {
	el := time.Since(e.start).Round(time.Second)
	fmt.Fprintf(os.Stderr, "e2e [%02d:%02d] %s\n", int(el.Minutes()), int(el.Seconds())%60, fmt.Sprintf(format, args...))
}

// cannotRun says why this machine cannot run the suite, or "".
func cannotRun() string {
	if runtime.GOOS != "linux" {
		return "needs Linux (this is " + runtime.GOOS + ")"
	}
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return "needs root to run containerd (running as " + name + ")"
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return "no cgroup file system at /sys/fs/cgroup"
	}
	return ""
}

// cacheDir is where built binaries are kept between runs, keyed by version.
func cacheDir() string {
	if d := os.Getenv("NRI_HANDOVER_E2E_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "nri-handover", "e2e")
	}
	return filepath.Join(os.TempDir(), "nri-handover-e2e-cache")
}

func goTool() string {
	for _, name := range []string{os.Getenv("GO"), "go"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// setup prepares everything the tests need. On error the caller tears down.
func (e *env) setup() error {
	var err error
	if e.repo, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(e.repo, "go.mod")); err != nil {
		return fmt.Errorf("module root not found at %s: %w", e.repo, err)
	}
	cleanStaleRuns(e)
	_, err = os.Stat(shimSocketDir)
	e.hadRunContainerd = err == nil

	if e.root, err = os.MkdirTemp("", tempPrefix); err != nil {
		return err
	}
	e.runID = filepath.Base(e.root)
	if err := os.WriteFile(filepath.Join(e.root, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return err
	}
	e.progress("run directory %s", e.root)

	e.ctrdVer = os.Getenv("NRI_HANDOVER_E2E_CONTAINERD")
	if e.ctrdVer == "" {
		e.ctrdVer = defaultContainerdVersion
	}
	if e.ctrdBin, err = e.ensureContainerd(); err != nil {
		return err
	}
	if e.runc, err = e.ensureRunc(); err != nil {
		return err
	}
	if err := e.buildBinaries(); err != nil {
		return err
	}
	if err := e.writeConfig(); err != nil {
		return err
	}
	if err := e.startContainerd(); err != nil {
		return err
	}
	if err := e.importImage(); err != nil {
		return err
	}
	return nil
}

// ensureContainerd returns the directory of containerd's binaries, building
// them into the cache with `go install` when they are not there yet (or
// were built another way). The version is linked in as a release build
// would have it, so that plugins see "v2.2.9", not "2.2.9+unknown".
func (e *env) ensureContainerd() (string, error) {
	base := filepath.Join(cacheDir(), "containerd-"+e.ctrdVer)
	dir := filepath.Join(base, "bin")
	names := []string{"containerd", "containerd-shim-runc-v2", "ctr"}
	var pkgs []string
	for _, n := range names {
		pkgs = append(pkgs, "github.com/containerd/containerd/v2/cmd/"+n+"@"+e.ctrdVer)
	}
	args := append([]string{"install", "-trimpath", "-ldflags=-X github.com/containerd/containerd/v2/version.Version=" + e.ctrdVer +
		" -X github.com/containerd/containerd/v2/version.Revision=go-install"}, pkgs...)
	recipe := strings.Join(args, " ")
	have := readFile(filepath.Join(base, "recipe")) == recipe
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			have = false
		}
	}
	if have {
		e.progress("containerd %s: cached in %s", e.ctrdVer, dir)
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.tmp-%d", dir, os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	e.progress("containerd %s: not cached; building with go install (2-3 minutes on 2 cores)", e.ctrdVer)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = base
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	start := time.Now()
	out, err := runWithHeartbeat(cmd, func() {
		e.progress("containerd %s: still building (%v)", e.ctrdVer, time.Since(start).Round(time.Second))
	})
	if err != nil {
		return "", fmt.Errorf("go install containerd %s: %w\n%s", e.ctrdVer, err, tail(out, 40))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(base, "recipe"), []byte(recipe), 0o644); err != nil {
		return "", err
	}
	e.progress("containerd %s: built in %v into %s", e.ctrdVer, time.Since(start).Round(time.Second), dir)
	return dir, nil
}

// runWithHeartbeat runs cmd, calls beat every 30 s while it runs and
// returns its combined output.
func runWithHeartbeat(cmd *exec.Cmd, beat func()) (string, error) {
	var buf strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			mu.Lock()
			defer mu.Unlock()
			return buf.String(), err
		case <-tick.C:
			beat()
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// ensureRunc returns runc's path, installing Debian's package if missing.
func (e *env) ensureRunc() (string, error) {
	if p, err := exec.LookPath("runc"); err == nil {
		e.progress("runc: %s", p)
		return p, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", errors.New("runc is not installed and there is no apt-get to install it: install runc")
	}
	install := func() (string, error) {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "runc")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	e.progress("runc: not installed; apt-get install -y runc")
	if out, err := install(); err != nil {
		e.progress("runc: install failed (%v); apt-get update, then again", err)
		if out2, err := exec.Command("apt-get", "update").CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get update: %w\n%s\n%s", err, tail(out, 10), tail(string(out2), 10))
		}
		if out, err = install(); err != nil {
			return "", fmt.Errorf("apt-get install runc: %w\n%s", err, tail(out, 20))
		}
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("runc installed but not found in PATH: %w", err)
	}
	e.progress("runc: installed %s", p)
	return p, nil
}

// buildBinaries builds the plugins and the image's program for this run.
func (e *env) buildBinaries() error {
	e.bin = filepath.Join(e.root, "bin")
	if err := os.MkdirAll(e.bin, 0o755); err != nil {
		return err
	}
	start := time.Now()
	build := func(env []string, pkgs ...string) error {
		cmd := exec.Command(goTool(), append([]string{"build", "-o", e.bin + "/"}, pkgs...)...)
		cmd.Dir = e.repo
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, tail(string(out), 30))
		}
		return nil
	}
	if err := build(nil, "./sample-plugins/audit/cmd/nri-audit", "./test/e2e/cmd/nri-audit-bare",
		"./test/e2e/cmd/nri-reconcile", "./test/e2e/cmd/nri-audit-sync"); err != nil {
		return err
	}
	// The functional tests run the harnessed plugins with the race detector:
	// a data race under real containerd traffic fails the test (exit code
	// 66 at SIGTERM). The benchmark uses the plain builds.
	e.raceBin = filepath.Join(e.bin, "race")
	if err := os.MkdirAll(e.raceBin, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(goTool(), "build", "-race", "-o", e.raceBin+"/", "./sample-plugins/audit/cmd/nri-audit", "./test/e2e/cmd/nri-reconcile",
		"./test/e2e/cmd/nri-audit-sync")
	cmd.Dir = e.repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -race: %w\n%s", err, tail(string(out), 30))
	}
	if err := build([]string{"CGO_ENABLED=0"}, "./test/e2e/cmd/e2e-sleep"); err != nil {
		return err
	}
	e.progress("built plugins and the image program in %v", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// writeConfig writes a containerd configuration that keeps everything
// under the run directory and enables NRI on its own socket.
func (e *env) writeConfig() error {
	r := e.root
	e.sock = filepath.Join(r, "containerd.sock")
	e.nriSock = filepath.Join(r, "nri.sock")
	e.runcRoot = filepath.Join(r, "runc")
	e.ctrdLog = filepath.Join(r, "containerd.log")
	e.config = filepath.Join(r, "containerd.toml")
	for _, d := range []string{"nri-plugins", "nri-conf", "cni/bin", "cni/net.d", "opt", "verifier"} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			return err
		}
	}
	cfg := fmt.Sprintf(`# Written by the nri-handover e2e suite; everything lives under this directory.
version = 3
root = %[1]q
state = %[2]q
imports = []

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins]
  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = %[5]q
    plugin_path = %[6]q
    plugin_config_path = %[7]q
    plugin_registration_timeout = '5s'
    plugin_request_timeout = %[8]q
    disable_connections = false

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[9]q

  [plugins.'io.containerd.cri.v1.runtime']
    # Required here: the sandbox lacks CAP_SYS_RESOURCE, and without this
    # every pod fails with "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[10]q
          Root = %[11]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[12]q]
      conf_dir = %[13]q

  [plugins.'io.containerd.internal.v1.opt']
    path = %[14]q

  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = %[15]q
`, filepath.Join(r, "root"), filepath.Join(r, "state"), e.sock, e.sock+".ttrpc", e.nriSock,
		filepath.Join(r, "nri-plugins"), filepath.Join(r, "nri-conf"), nriRequestTimeout.String(),
		imageName, e.runc, e.runcRoot, filepath.Join(r, "cni/bin"), filepath.Join(r, "cni/net.d"),
		filepath.Join(r, "opt"), filepath.Join(r, "verifier"))
	return os.WriteFile(e.config, []byte(cfg), 0o644)
}

// startContainerd starts containerd and waits until CRI answers.
func (e *env) startContainerd() error {
	e.ctrdMu.Lock()
	defer e.ctrdMu.Unlock()
	logf, err := os.OpenFile(e.ctrdLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== e2e: starting containerd at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(filepath.Join(e.ctrdBin, "containerd"), "--config", e.config)
	cmd.Env = append(os.Environ(), "PATH="+e.ctrdBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C on the terminal reaches the test, which
	// tears down in order, not containerd directly. Killed with the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.ctrd, e.ctrdDone = cmd, done

	if e.cri == nil {
		if e.cri, err = dialCRI(e.sock); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := e.cri.version(ctx)
		cancel()
		_, serr := os.Stat(e.nriSock)
		if err == nil && serr == nil {
			e.progress("containerd %s up in %v (pid %d)", v, time.Since(start).Round(time.Millisecond), cmd.Process.Pid)
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("containerd exited during start-up:\n%s", tail(readFile(e.ctrdLog), 30))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd not ready after 30 s (cri: %v, nri socket: %v):\n%s", err, serr, tail(readFile(e.ctrdLog), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopContainerd stops containerd (SIGTERM, then SIGKILL after 15 s). The
// shims and containers keep running, as on a real node.
func (e *env) stopContainerd() {
	e.ctrdMu.Lock()
	defer e.ctrdMu.Unlock()
	if e.ctrd == nil {
		return
	}
	_ = e.ctrd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.ctrdDone:
	case <-time.After(15 * time.Second):
		e.progress("containerd did not stop in 15 s; SIGKILL")
		_ = e.ctrd.Process.Kill()
		<-e.ctrdDone
	}
	e.ctrd = nil
}

func (e *env) containerdRunning() bool {
	e.ctrdMu.Lock()
	defer e.ctrdMu.Unlock()
	if e.ctrd == nil {
		return false
	}
	select {
	case <-e.ctrdDone:
		return false
	default:
		return true
	}
}

func (e *env) ctr(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(e.ctrdBin, "ctr"), append([]string{"--address", e.sock, "-n", criNamespace}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// importImage writes the one-binary image as an OCI layout and imports it.
func (e *env) importImage() error {
	tarPath := filepath.Join(e.root, "image.tar")
	if err := writeOCIImage(tarPath, filepath.Join(e.bin, "e2e-sleep"), imageName); err != nil {
		return err
	}
	if out, err := e.ctr("images", "import", tarPath); err != nil {
		return fmt.Errorf("ctr images import: %w\n%s", err, out)
	}
	// CRI learns about the image from containerd's image events: wait.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := e.cri.imageExists(ctx, imageName)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.progress("image %s imported", imageName)
	return nil
}

// trackProc remembers a plugin process so that teardown can kill it.
func (e *env) trackProc(cmd *exec.Cmd) {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	if e.procs == nil {
		e.procs = map[int]*exec.Cmd{}
	}
	e.procs[cmd.Process.Pid] = cmd
}

func (e *env) untrackProc(cmd *exec.Cmd) {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	delete(e.procs, cmd.Process.Pid)
}

// teardown removes everything the run created. It runs once, from
// TestMain, from a signal handler or from the timeout watchdog.
func (e *env) teardown() {
	e.teardownOnce.Do(func() {
		if e.root == "" {
			return
		}
		e.progress("tearing down")
		e.procMu.Lock()
		for _, cmd := range e.procs {
			_ = cmd.Process.Kill() // also ends a plugin stopped with SIGSTOP
		}
		e.procs = nil
		e.procMu.Unlock()
		if e.containerdRunning() && e.cri != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			if n, err := e.cri.removeAllPods(ctx); err != nil {
				e.progress("removing pods: %v", err)
			} else if n > 0 {
				e.progress("removed %d leftover pods", n)
			}
			cancel()
		}
		e.stopContainerd()
		if e.cri != nil {
			e.cri.close()
		}
		keep := os.Getenv("NRI_HANDOVER_E2E_KEEP") != ""
		cleanupRunDir(e, e.root, !keep)
		if !e.hadRunContainerd {
			// Only if empty: a real containerd may use them meanwhile.
			_ = os.Remove(filepath.Join(shimSocketDir, "s"))
			_ = os.Remove(shimSocketDir)
		}
		if keep {
			_ = os.WriteFile(filepath.Join(e.root, "kept"), nil, 0o644)
			e.progress("kept %s (NRI_HANDOVER_E2E_KEEP; remove it by hand)", e.root)
		}
	})
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
