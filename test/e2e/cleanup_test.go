//go:build e2e

package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cleanStaleRuns tears down what earlier runs that were killed outright
// left behind: their test process is gone, their directory is not.
func cleanStaleRuns(e *env) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "kept")); err == nil {
			continue // torn down already; kept on request for its logs
		}
		b, err := os.ReadFile(filepath.Join(d, "pid"))
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && processAlive(pid) {
				continue // a run in progress
			}
		}
		e.progress("cleaning up after an earlier run that did not finish: %s", d)
		cleanupRunDir(e, d, true)
	}
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// cleanupRunDir removes the containers, processes, mounts and cgroups of
// the run whose directory is dir, then (with remove) the directory. It
// touches only what names dir or the run's own cgroup parent.
func cleanupRunDir(e *env, dir string, remove bool) {
	runID := filepath.Base(dir)
	// Containers still known to runc: kill and delete them.
	runcBin, _ := exec.LookPath("runc")
	if runcBin != "" {
		nsDirs, _ := os.ReadDir(filepath.Join(dir, "runc"))
		for _, ns := range nsDirs {
			root := filepath.Join(dir, "runc", ns.Name())
			ctrs, _ := os.ReadDir(root)
			for _, c := range ctrs {
				_ = exec.Command(runcBin, "--root", root, "delete", "--force", c.Name()).Run()
			}
		}
	}
	// Processes left in the run's cgroups (containers' processes).
	for _, pid := range cgroupPids(runID) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Processes whose command line names the run directory: containerd,
	// shims (their -address is under dir) and plugins.
	shimIDs := shimIDsOf(dir)
	for _, pid := range pidsMentioning(dir) {
		if pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	time.Sleep(100 * time.Millisecond)
	removeShimSockets(dir, shimIDs)
	if n := unmountUnder(dir); n > 0 {
		e.progress("unmounted %d leftover mounts under %s", n, dir)
	}
	removeCgroups(runID)
	if remove {
		if err := os.RemoveAll(dir); err != nil {
			e.progress("cannot remove %s: %v", dir, err)
		}
	}
}

// shimIDsOf returns the ids of the shims of the run whose directory is dir
// (their -address is under it) and of the containers runc knows there.
func shimIDsOf(dir string) []string {
	var ids []string
	for _, pid := range pidsMentioning(dir) {
		args := strings.Split(readFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-id" {
				ids = append(ids, args[i+1])
			}
		}
	}
	nsDirs, _ := os.ReadDir(filepath.Join(dir, "runc"))
	for _, ns := range nsDirs {
		ctrs, _ := os.ReadDir(filepath.Join(dir, "runc", ns.Name()))
		for _, c := range ctrs {
			ids = append(ids, c.Name())
		}
	}
	return ids
}

// removeShimSockets removes the socket files that the run's shims, killed
// rather than stopped, left in /run/containerd/s (where containerd puts
// them whatever its configuration says: pkg/shim SocketAddress, the
// sha256 of "<address>/<namespace>/<id>"). A socket someone serves stays.
func removeShimSockets(dir string, ids []string) {
	addr := filepath.Join(dir, "containerd.sock")
	for _, id := range ids {
		for _, p := range []string{filepath.Join(addr, criNamespace, id), filepath.Join(addr, criNamespace, id, "debug")} {
			sum := sha256.Sum256([]byte(p))
			sock := filepath.Join(shimSocketDir, "s", hex.EncodeToString(sum[:]))
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				continue
			}
			_ = os.Remove(sock)
		}
	}
}

// pidsMentioning lists processes whose command line contains s.
func pidsMentioning(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, en := range ents {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), s) {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupRoots are the run's cgroup directories under every v1 hierarchy
// (or the v2 unified one).
func cgroupRoots(runID string) []string {
	var out []string
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", runID)); err == nil {
		out = append(out, filepath.Join("/sys/fs/cgroup", runID))
	}
	ms, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", runID))
	return append(out, ms...)
}

func cgroupPids(runID string) []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range cgroupRoots(runID) {
		_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			for _, f := range strings.Fields(readFile(p)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// removeCgroups removes the run's (empty) cgroup directories, deepest first.
func removeCgroups(runID string) {
	for _, r := range cgroupRoots(runID) {
		var dirs []string
		_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

// unmountUnder detaches every mount point under dir, deepest first, and
// returns how many it found.
func unmountUnder(dir string) int {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	return len(mounts)
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
