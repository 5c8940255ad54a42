//go:build k8s

package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// What the suite runs. The ports are the components' defaults: one such
// cluster per machine at a time.
const (
	defaultK8sVersion        = "v1.36.3"
	defaultContainerdVersion = "v2.2.9"
	nodeName                 = "nri-handover-node"
	// The shipped manifests' host paths: the cluster's containerd serves
	// NRI where the DaemonSet mounts it.
	hostNRIDir      = "/var/run/nri"
	hostHandoverDir = "/var/run/nri-handover"
	hostLedgerDir   = "/var/log/nri-audit"
	// The pause image and the workload's image: one static program that
	// sleeps until SIGTERM (test/e2e/cmd/e2e-sleep).
	sleepImage   = "nri-handover.test/k8s/sleep:1"
	criNamespace = "k8s.io"
	tempPrefix   = "nho-k8s-"
	shimSockDir  = "/run/containerd"
	apiServer    = "https://127.0.0.1:6443"
	// The plugin pods are not hostNetwork: they get an address on a bridge
	// of the suite's own, from CNI's reference plugins.
	cniVersion = "v1.9.1"
	cniBridge  = "nhok8s0"
	podSubnet  = "10.244.0.0/24"
)

// The sysctls the kubelet sets on start; restored at teardown.
// So is IP forwarding, which the CNI bridge plugin turns on for its gateway.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward"}

// cluster is one node of real Kubernetes components on a containerd of its
// own, everything under root.
type cluster struct {
	start    time.Time
	root     string
	repo     string
	k8sBin   string
	ctrdBin  string
	cniBin   string
	runc     string
	etcd     string
	bin      string // the repository's binaries built for the images
	pki      *pki
	ctrdSock string
	// nodeIP is the host address the node registers with: the kubelet
	// refuses a loopback node IP, and the API server reaches the kubelet
	// (pod logs) there.
	nodeIP string

	admin        string // admin kubeconfig
	cs           *kubernetes.Clientset
	procMu       sync.Mutex
	procs        []*proc
	hostBefore   hostState
	teardownOnce sync.Once
}

// proc is a component the suite started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// hostState is what the kubelet and the plugins change on the host.
type hostState struct {
	sysctls map[string]string
	existed map[string]bool // paths that existed before the run
	bridge  bool            // the CNI bridge existed
	cgroups map[string]bool // kubepods cgroup dirs that existed
}

// hostPaths are the directories the run may create on the host; the ones
// that did not exist before are removed at teardown.
var hostPaths = []string{hostNRIDir, hostHandoverDir, hostLedgerDir, "/var/log/containers",
	"/var/lib/kubelet/device-plugins", "/var/lib/kubelet", shimSockDir + "/s", shimSockDir}

func (c *cluster) progress(format string, args ...any) {
	el := time.Since(c.start).Round(time.Second)
	fmt.Fprintf(os.Stderr, "k8s [%02d:%02d] %s\n", int(el.Minutes()), int(el.Seconds())%60, fmt.Sprintf(format, args...))
}

// cannotRun says why this machine cannot run the suite, or "".
func cannotRun() string {
	if runtime.GOOS != "linux" {
		return "needs Linux (this is " + runtime.GOOS + ")"
	}
	if os.Geteuid() != 0 {
		return "needs root to run containerd and the kubelet (uid " + strconv.Itoa(os.Geteuid()) + ")"
	}
	return ""
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

func userCache(sub string) string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "nri-handover", sub)
	}
	return filepath.Join(os.TempDir(), "nri-handover-cache", sub)
}

// setup brings the node up. On error the caller tears down.
func (c *cluster) setup() error {
	var err error
	if c.repo, err = filepath.Abs(".."); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.repo, "go.mod")); err != nil {
		return fmt.Errorf("repository root not found at %s: %w", c.repo, err)
	}
	if err := refuseBusyPorts(); err != nil {
		return err
	}
	if sock := filepath.Join(hostNRIDir, "nri.sock"); fileExists(sock) {
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			conn.Close()
			return fmt.Errorf("%s answers: another runtime serves NRI on this host; the suite needs that path for its own containerd", sock)
		}
		// Nobody listens: left by a run that was not torn down (a
		// crash, or NRI_HANDOVER_K8S_KEEP).
		c.progress("removing %s, which nobody serves (%v)", sock, err)
		if err := os.Remove(sock); err != nil {
			return fmt.Errorf("remove stale %s: %w", sock, err)
		}
	}
	if c.nodeIP, err = hostIP(); err != nil {
		return err
	}
	c.saveHost()
	if c.root, err = os.MkdirTemp("", tempPrefix); err != nil {
		return err
	}
	c.progress("run directory %s", c.root)
	if c.k8sBin, err = c.buildKubernetes(); err != nil {
		return err
	}
	if c.ctrdBin, err = c.ensureContainerd(); err != nil {
		return err
	}
	if c.cniBin, err = c.ensureCNI(); err != nil {
		return err
	}
	if c.runc, err = aptBinary("runc", "runc"); err != nil {
		return err
	}
	if c.etcd, err = aptBinary("etcd", "etcd-server"); err != nil {
		return err
	}
	if err := c.buildRepoBinaries(); err != nil {
		return err
	}
	if err := c.writePKI(); err != nil {
		return err
	}
	if err := c.startContainerd(); err != nil {
		return err
	}
	if err := c.importImages(); err != nil {
		return err
	}
	if err := c.startControlPlane(); err != nil {
		return err
	}
	if err := c.startKubelet(); err != nil {
		return err
	}
	return nil
}

// hostIP returns the first IPv4 address of an interface that is up and not
// loopback (nor the suite's bridge).
func hostIP() (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 || i.Name == cniBridge {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String(), nil
			}
		}
	}
	return "", errors.New("no non-loopback IPv4 address for the node")
}

// refuseBusyPorts fails early when another cluster (or anything) holds the
// ports this one needs.
func refuseBusyPorts() error {
	for _, port := range []int{2379, 2380, 6443, 10248, 10250, 10257, 10259} {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			return fmt.Errorf("port %d is in use (another cluster on this machine?): %w", port, err)
		}
		l.Close()
	}
	return nil
}

func (c *cluster) saveHost() {
	c.hostBefore = hostState{sysctls: map[string]string{}, existed: map[string]bool{}, cgroups: map[string]bool{}}
	for _, s := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			c.hostBefore.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			c.hostBefore.existed[p] = true
		}
	}
	for _, d := range kubepodsCgroups() {
		c.hostBefore.cgroups[d] = true
	}
	_, err := os.Stat("/sys/class/net/" + cniBridge)
	c.hostBefore.bridge = err == nil
}

// kubepodsCgroups lists the kubepods cgroup directory of every hierarchy.
func kubepodsCgroups() []string {
	var out []string
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	hier = append(hier, "/sys/fs/cgroup")
	for _, h := range hier {
		d := filepath.Join(h, "kubepods")
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// buildKubernetes runs test/k8s/build-k8s.sh, which builds the components
// into the cache (or finds them there) and prints the directory.
func (c *cluster) buildKubernetes() (string, error) {
	ver := os.Getenv("K8S_VERSION")
	if ver == "" {
		ver = defaultK8sVersion
	}
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(c.repo, "test/k8s/build-k8s.sh"))
	cmd.Env = append(os.Environ(), "K8S_VERSION="+ver, "GO="+goTool())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build Kubernetes %s: %w", ver, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := lines[len(lines)-1]
	c.progress("Kubernetes %s in %s (%v)", ver, dir, time.Since(start).Round(time.Second))
	return dir, nil
}

// ensureContainerd returns containerd's binaries, built exactly as the e2e
// suite builds them (test/e2e/env_test.go) and from the same cache, so a
// machine that ran one suite does not build again for the other.
func (c *cluster) ensureContainerd() (string, error) {
	ver := os.Getenv("NRI_HANDOVER_E2E_CONTAINERD")
	if ver == "" {
		ver = defaultContainerdVersion
	}
	cacheRoot := os.Getenv("NRI_HANDOVER_E2E_CACHE")
	if cacheRoot == "" {
		cacheRoot = userCache("e2e")
	}
	base := filepath.Join(cacheRoot, "containerd-"+ver)
	dir := filepath.Join(base, "bin")
	names := []string{"containerd", "containerd-shim-runc-v2", "ctr"}
	var pkgs []string
	for _, n := range names {
		pkgs = append(pkgs, "github.com/containerd/containerd/v2/cmd/"+n+"@"+ver)
	}
	args := append([]string{"install", "-trimpath", "-ldflags=-X github.com/containerd/containerd/v2/version.Version=" + ver +
		" -X github.com/containerd/containerd/v2/version.Revision=go-install"}, pkgs...)
	recipe := strings.Join(args, " ")
	have := readFile(filepath.Join(base, "recipe")) == recipe
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			have = false
		}
	}
	if have {
		c.progress("containerd %s: cached in %s", ver, dir)
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.tmp-%d", dir, os.Getpid())
	_ = os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	c.progress("containerd %s: not cached; building with go install (2-3 minutes on 2 cores)", ver)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = base
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install containerd %s: %w\n%s", ver, err, tail(string(out), 30))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(base, "recipe"), []byte(recipe), 0o644)
}

// ensureCNI returns the directory of CNI's bridge, host-local and loopback
// plugins, built with go install into the cache on first use.
func (c *cluster) ensureCNI() (string, error) {
	base := filepath.Join(userCache("k8s"), "cni-plugins-"+cniVersion)
	dir := filepath.Join(base, "bin")
	names := map[string]string{"bridge": "main/bridge", "loopback": "main/loopback", "host-local": "ipam/host-local"}
	args := []string{"install", "-trimpath"}
	for _, n := range []string{"bridge", "loopback", "host-local"} {
		args = append(args, "github.com/containernetworking/plugins/plugins/"+names[n]+"@"+cniVersion)
	}
	recipe := strings.Join(args, " ")
	have := readFile(filepath.Join(base, "recipe")) == recipe
	for n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			have = false
		}
	}
	if have {
		c.progress("CNI plugins %s: cached in %s", cniVersion, dir)
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.tmp-%d", dir, os.Getpid())
	_ = os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	c.progress("CNI plugins %s: not cached; building with go install (about a minute)", cniVersion)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = base
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install CNI plugins %s: %w\n%s", cniVersion, err, tail(string(out), 30))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(base, "recipe"), []byte(recipe), 0o644)
}

// aptBinary returns the path of bin, installing Debian's package if missing.
func aptBinary(bin, pkg string) (string, error) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("%s is not installed and there is no apt-get: install %s", bin, pkg)
	}
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err != nil {
		if out, err := exec.Command("apt-get", "update").CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get update: %w\n%s", err, tail(string(out), 10))
		}
		if out, err := install(); err != nil {
			return "", fmt.Errorf("apt-get install %s: %w\n%s", pkg, err, tail(string(out), 20))
		}
	}
	return exec.LookPath(bin)
}

// buildRepoBinaries builds the static binaries the images hold, once per
// plugin version the suite rolls out (the version is linked in as a
// release build would have it).
func (c *cluster) buildRepoBinaries() error {
	c.bin = filepath.Join(c.root, "bin")
	start := time.Now()
	build := func(out string, ldflags string, pkgs ...string) error {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", out + "/"}, pkgs...)
		cmd := exec.Command(goTool(), args...)
		cmd.Dir = c.repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, tail(string(out), 30))
		}
		return nil
	}
	for _, v := range pluginVersions {
		if err := build(filepath.Join(c.bin, v), "-s -w -X main.version="+v, "./cmd/nri-handover",
			"./sample-plugins/audit/cmd/nri-audit", "./sample-plugins/versioned/cmd/nri-versioned"); err != nil {
			return err
		}
	}
	if err := build(c.bin, "-s -w", "./test/e2e/cmd/e2e-sleep"); err != nil {
		return err
	}
	c.progress("built the plugins (%s) and the sleep program in %v", strings.Join(pluginVersions, ", "),
		time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (c *cluster) writePKI() error {
	var err error
	if c.pki, err = newPKI(filepath.Join(c.root, "pki")); err != nil {
		return err
	}
	p := c.pki
	steps := []error{
		p.leaf("apiserver", "kube-apiserver", nil, true, false,
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}),
		p.leaf("admin", "admin", []string{"system:masters"}, false, false, nil, nil),
		p.leaf("controller-manager", "system:kube-controller-manager", nil, false, false, nil, nil),
		p.leaf("scheduler", "system:kube-scheduler", nil, false, false, nil, nil),
		p.leaf("kubelet", "system:node:"+nodeName, []string{"system:nodes"}, false, false, nil, nil),
		p.leaf("front-proxy-client", "front-proxy-client", nil, false, true, nil, nil),
		p.serviceAccountKey(),
	}
	for _, err := range steps {
		if err != nil {
			return err
		}
	}
	for _, n := range []string{"admin", "controller-manager", "scheduler", "kubelet"} {
		path, err := p.kubeconfig(n, apiServer)
		if err != nil {
			return err
		}
		if n == "admin" {
			c.admin = path
		}
	}
	return nil
}

// startProc starts a component with its output in <root>/logs/<name>.log.
func (c *cluster) startProc(name string, bin string, args []string, env []string) (*proc, error) {
	logDir := filepath.Join(c.root, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group (a Ctrl-C reaches the test, which tears down in
	// order), killed with the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.procMu.Lock()
	c.procs = append(c.procs, p)
	c.procMu.Unlock()
	return p, nil
}

// waitFor polls cond until it returns nil, the process dies or timeout.
func (c *cluster) waitFor(what string, p *proc, timeout time.Duration, cond func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := cond()
		if err == nil {
			c.progress("%s in %v", what, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s: %s exited:\n%s", what, p.name, tail(readFile(p.log), 30))
		}
		if time.Now().After(deadline) {
			logs := ""
			if p != nil {
				logs = "\n" + tail(readFile(p.log), 30)
			}
			return fmt.Errorf("%s: not after %v: %w%s", what, timeout, err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) writeContainerdConfig() (string, error) {
	r := filepath.Join(c.root, "containerd")
	for _, d := range []string{"cni/net.d", "cni/ipam", "opt", "verifier", "nri-plugins", "nri-conf"} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			return "", err
		}
	}
	// The workload's pods are hostNetwork; the plugin pods, as shipped, are
	// not: a bridge of the suite's own, addresses from host-local.
	conflist := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "nri-handover-k8s", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}]}`,
		cniBridge, podSubnet, filepath.Join(r, "cni/ipam"))
	if err := os.WriteFile(filepath.Join(r, "cni/net.d/10-bridge.conflist"), []byte(conflist), 0o644); err != nil {
		return "", err
	}
	c.ctrdSock = filepath.Join(r, "containerd.sock")
	cfg := fmt.Sprintf(`# Written by the nri-handover k8s suite; everything but the NRI socket lives here.
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
    plugin_request_timeout = '2s'
    disable_connections = false

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[8]q

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[9]q
          Root = %[10]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[11]q]
      conf_dir = %[12]q

  [plugins.'io.containerd.internal.v1.opt']
    path = %[13]q

  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = %[14]q
`, filepath.Join(r, "root"), filepath.Join(r, "state"), c.ctrdSock, c.ctrdSock+".ttrpc",
		filepath.Join(hostNRIDir, "nri.sock"), filepath.Join(r, "nri-plugins"), filepath.Join(r, "nri-conf"),
		sleepImage, c.runc, filepath.Join(r, "runc"), c.cniBin, filepath.Join(r, "cni/net.d"),
		filepath.Join(r, "opt"), filepath.Join(r, "verifier"))
	path := filepath.Join(r, "containerd.toml")
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

func (c *cluster) startContainerd() error {
	cfg, err := c.writeContainerdConfig()
	if err != nil {
		return err
	}
	p, err := c.startProc("containerd", filepath.Join(c.ctrdBin, "containerd"), []string{"--config", cfg},
		[]string{"PATH=" + c.ctrdBin + string(os.PathListSeparator) + os.Getenv("PATH")})
	if err != nil {
		return err
	}
	return c.waitFor("containerd up", p, 30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(hostNRIDir, "nri.sock")); err != nil {
			return err
		}
		_, err := c.ctr("version")
		return err
	})
}

// restartContainerd stops the cluster's containerd (its shims and
// containers keep running, as on a node) and starts it again.
func (c *cluster) restartContainerd() error {
	p := c.procByName("containerd")
	if p == nil {
		return errors.New("containerd is not running")
	}
	stopProc(p, 15*time.Second)
	c.procMu.Lock()
	for i, q := range c.procs {
		if q == p {
			c.procs = append(c.procs[:i], c.procs[i+1:]...)
			break
		}
	}
	c.procMu.Unlock()
	_ = os.Remove(filepath.Join(hostNRIDir, "nri.sock"))
	return c.startContainerd()
}

func (c *cluster) ctr(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.ctrdBin, "ctr"), append([]string{"--address", c.ctrdSock, "-n", criNamespace}, args...)...)
	// stdout only: ctr warns on stderr (cgroup v1 deprecation) even when
	// it succeeds, and callers parse what it prints.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (c *cluster) startControlPlane() error {
	p := c.pki.path
	etcd, err := c.startProc("etcd", c.etcd, []string{
		"--name=node", "--data-dir=" + filepath.Join(c.root, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=node=http://127.0.0.1:2380", "--listen-metrics-urls=http://127.0.0.1:2381",
		"--log-level=warn",
	}, []string{"ETCD_UNSUPPORTED_ARCH=" + runtime.GOARCH})
	if err != nil {
		return err
	}
	if err := c.waitFor("etcd up", etcd, 30*time.Second, func() error {
		return httpGetOK("http://127.0.0.1:2379/health")
	}); err != nil {
		return err
	}
	apiserver, err := c.startProc("kube-apiserver", filepath.Join(c.k8sBin, "kube-apiserver"), []string{
		"--etcd-servers=http://127.0.0.1:2379", "--bind-address=127.0.0.1", "--advertise-address=" + c.nodeIP,
		"--secure-port=6443", "--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"), "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.0.0.0/24",
		"--kubelet-client-certificate=" + p("admin.crt"), "--kubelet-client-key=" + p("admin.key"),
		// The node's name resolves nowhere: logs, exec and port-forward
		// reach the kubelet at its InternalIP.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// Without the front-proxy flags, controller-manager and scheduler
		// keep logging a missing requestheader-client-ca-file.
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"), "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"), "--proxy-client-key-file=" + p("front-proxy-client.key"),
		"--v=1",
	}, nil)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.admin)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	if c.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := c.waitFor("kube-apiserver ready", apiserver, 90*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		body, err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, comp := range []struct{ name, kubeconfig string }{
		{"kube-controller-manager", "controller-manager"}, {"kube-scheduler", "scheduler"},
	} {
		kc := p(comp.kubeconfig + ".kubeconfig")
		args := []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--leader-elect=false", "--bind-address=127.0.0.1", "--v=1"}
		if comp.name == "kube-controller-manager" {
			args = append(args, "--service-account-private-key-file="+p("sa.key"), "--root-ca-file="+p("ca.crt"),
				"--use-service-account-credentials=true", "--controllers=*")
		}
		if _, err := c.startProc(comp.name, filepath.Join(c.k8sBin, comp.name), args, nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) startKubelet() error {
	dir := filepath.Join(c.root, "kubelet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine kind uses cgroup v1: opt in, with the cgroupfs driver the
# cluster's containerd uses.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
podLogsDir: %[2]s
address: %[4]s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
# Only clients with a certificate of the cluster's CA (the API server) may
# call the kubelet, and those may do anything.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[3]s}
authorization:
  mode: AlwaysAllow
# The images were imported, not pulled: never collect them, never evict.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
registerNode: true
# No DNS runs here; a cluster DNS address keeps the kubelet from warning on
# every pod that it falls back to the host's resolver.
clusterDNS: ["10.0.0.10"]
clusterDomain: cluster.local
`, c.ctrdSock, filepath.Join(c.root, "pod-logs"), c.pki.path("ca.crt"), c.nodeIP)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	kubelet, err := c.startProc("kubelet", filepath.Join(c.k8sBin, "kubelet"), []string{
		"--config=" + cfgPath, "--kubeconfig=" + c.pki.path("kubelet.kubeconfig"), "--root-dir=" + dir,
		"--cert-dir=" + filepath.Join(dir, "pki"),
		"--hostname-override=" + nodeName, "--node-ip=" + c.nodeIP, "--v=1",
	}, nil)
	if err != nil {
		return err
	}
	if err := c.waitFor("node Ready", kubelet, 90*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := c.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: %s", cond.Reason, cond.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	}); err != nil {
		return err
	}
	return c.waitFor("default ServiceAccount", nil, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// procByName returns the running component of that name, or nil.
func (c *cluster) procByName(name string) *proc {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	for _, p := range c.procs {
		if p.name == name && !p.exited() {
			return p
		}
	}
	return nil
}

// stopProc stops one component: SIGTERM, then SIGKILL after grace.
func stopProc(p *proc, grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// teardown stops everything the run started, by its own PIDs, and restores
// the host. Pods go first, through the API, so that the kubelet stops their
// containers as it does on a node; what is left is killed.
func (c *cluster) teardown() {
	c.teardownOnce.Do(func() {
		if c.root == "" {
			return
		}
		c.progress("tearing down")
		if c.cs != nil && c.procByName("kubelet") != nil && c.procByName("kube-apiserver") != nil {
			if err := c.deleteAllPods(90 * time.Second); err != nil {
				c.progress("deleting pods: %v", err)
			}
		}
		c.procMu.Lock()
		procs := append([]*proc(nil), c.procs...)
		c.procMu.Unlock()
		order := []string{"kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "containerd"}
		for _, name := range order {
			for _, p := range procs {
				if p.name == name {
					stopProc(p, 15*time.Second)
				}
			}
		}
		c.killLeftovers()
		c.restoreHost()
		// The kubelet bind-mounts its root directory onto itself.
		if n := unmountUnder(c.root); n > 0 {
			c.progress("unmounted %d leftover mounts", n)
		}
		if os.Getenv("NRI_HANDOVER_K8S_KEEP") != "" {
			c.progress("kept %s (NRI_HANDOVER_K8S_KEEP; remove it by hand)", c.root)
			return
		}
		if err := os.RemoveAll(c.root); err != nil {
			c.progress("remove %s: %v", c.root, err)
		}
	})
}

// deleteAllPods deletes every namespace the suite made and every pod, and
// waits until the kubelet has stopped them all.
func (c *cluster) deleteAllPods(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nss, err := c.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		// Finalizers the tests put on pods must not hold teardown.
		pods, err := c.cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if len(p.Finalizers) > 0 {
				patch := []byte(`{"metadata":{"finalizers":null}}`)
				_, _ = c.cs.CoreV1().Pods(ns.Name).Patch(ctx, p.Name, "application/merge-patch+json", patch, metav1.PatchOptions{})
			}
		}
		if strings.HasPrefix(ns.Name, "kube-") || ns.Name == "default" {
			continue
		}
		if err := c.cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	for {
		pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			out, _ := c.ctr("tasks", "ls", "-q")
			if strings.TrimSpace(out) == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods left after %v", timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// killLeftovers kills what the kubelet did not stop: processes in the
// kubepods cgroups this run created, and the shims of this run's
// containerd (their -address names its socket).
func (c *cluster) killLeftovers() {
	for _, d := range kubepodsCgroups() {
		if c.hostBefore.cgroups[d] {
			continue
		}
		_ = filepath.Walk(d, func(path string, fi os.FileInfo, err error) error {
			if err != nil || !fi.IsDir() {
				return nil
			}
			for _, l := range strings.Fields(readFile(filepath.Join(path, "cgroup.procs"))) {
				if pid, err := strconv.Atoi(l); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	if c.ctrdSock != "" {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if strings.Contains(readFile(filepath.Join("/proc", e.Name(), "cmdline")), c.ctrdSock) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// Wait for the cgroups to empty before they are removed.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && c.cgroupProcsLeft() {
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) cgroupProcsLeft() bool {
	left := false
	for _, d := range kubepodsCgroups() {
		if c.hostBefore.cgroups[d] {
			continue
		}
		_ = filepath.Walk(d, func(path string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() && strings.TrimSpace(readFile(filepath.Join(path, "cgroup.procs"))) != "" {
				left = true
			}
			return nil
		})
	}
	return left
}

// restoreHost puts back the sysctls, removes the kubepods cgroups and the
// host directories the run created.
func (c *cluster) restoreHost() {
	for s, v := range c.hostBefore.sysctls {
		if now := strings.TrimSpace(readFile("/proc/sys/" + s)); now != v {
			if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
				c.progress("restore sysctl %s=%s: %v", s, v, err)
			}
		}
	}
	for _, d := range kubepodsCgroups() {
		if !c.hostBefore.cgroups[d] {
			removeCgroupTree(d)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + cniBridge); err == nil && !c.hostBefore.bridge {
		if out, err := exec.Command("ip", "link", "delete", cniBridge).CombinedOutput(); err != nil {
			c.progress("delete bridge %s: %v: %s", cniBridge, err, out)
		}
	}
	for _, p := range hostPaths {
		if c.hostBefore.existed[p] {
			continue
		}
		if strings.HasPrefix(p, shimSockDir) {
			// Every containerd on the host puts its shims' sockets there
			// (the e2e suite's too, which may have started since): remove
			// the directory only if it is empty.
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				c.progress("keep %s: %v", p, err)
			}
			continue
		}
		// The kubelet's plugin sockets, the handover directory's sockets
		// and the ledger: nothing of the host's own lives there.
		if err := os.RemoveAll(p); err != nil {
			c.progress("remove %s: %v", p, err)
		}
	}
}

// removeCgroupTree removes a cgroup directory and its children, deepest
// first (cgroup directories are removed with rmdir, not unlink).
func removeCgroupTree(d string) {
	var dirs []string
	_ = filepath.Walk(d, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// unmountUnder unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) int {
	var points []string
	for _, l := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	n := 0
	for i := len(points) - 1; i >= 0; i-- {
		if syscall.Unmount(points[i], syscall.MNT_DETACH) == nil {
			n++
		}
	}
	return n
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// fileExists reports whether path names anything (a socket included).
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
