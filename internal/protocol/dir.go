package protocol

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File names inside a plugin's handover directory.
const (
	ownerSocketName = "owner.sock"
	lockFileName    = "lock"
	keyFileName     = "stamp.key"
	genFileName     = "owner.gen"
	instanceSuffix  = ".sock"
	instancesDir    = "instances"
)

// Dir is the handover directory of one plugin on one node. It holds the
// well-known owner socket, one socket per running instance, the lock that
// serializes claims, the stamp key and the last epoch. Nothing in it is ever
// removed by an instance other than its own instance socket.
type Dir struct {
	path   string
	plugin string
	fd     int // the directory, opened O_PATH once: owner checks stat relative to it

	// gen is owner.gen mapped shared: the changes of the owner name (see
	// ownerGeneration) and the last epoch (readEpoch) as 64-bit counters.
	// genMu guards fd and the mapping against Close (read-locked to use
	// them); fd is -1 and gen nil once closed.
	genMu sync.RWMutex
	gen   []byte

	// layoutErr is set when owner.gen has a layout this build does not
	// speak (see checkLayout): the instance takes no part in the cut.
	layoutErr error

	// beforeCutSwap, if set (tests only, before the directory is used), is
	// called before each swap of decide: a test makes a swap fail there
	// as a concurrent writer of the register would.
	beforeCutSwap func()
}

// genFileSize is the size of owner.gen: one page, of which 88 bytes are used.
const genFileSize = 4096

// OpenDir creates (0700) or checks the handover directory of plugin under
// root. An existing directory that other users can write to, or that is not
// owned by this user, is refused: its sockets would not be trustworthy.
func OpenDir(root, plugin string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("handover directory: empty root path")
	}
	if err := validatePluginName(plugin); err != nil {
		return nil, err
	}
	root = filepath.Clean(root)
	d := &Dir{path: filepath.Join(root, plugin), plugin: plugin}
	for _, p := range []string{root, d.path, filepath.Join(d.path, instancesDir)} {
		if err := ensurePrivateDir(p); err != nil {
			return nil, err
		}
	}
	fd, err := unix.Open(d.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("handover directory %s: %w", d.path, err)
	}
	d.fd = fd
	if d.gen, err = mapGeneration(filepath.Join(d.path, genFileName)); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("handover directory %s: %w", d.path, err)
	}
	d.layoutErr = d.checkLayout()
	return d, nil
}

// pageLayout is the layout of owner.gen this build reads and writes: the
// word offsets below and in cut.go, and the register's bits (heirUnseen,
// bit 62, included). Change it with any change an instance of an older
// build would misread; an instance never writes a page of another layout.
const pageLayout = 1

// ErrPageLayout is wrapped by the error of an instance whose handover page
// (owner.gen) has a layout this build does not speak: it takes no part in
// the handover (it claims nothing, acts on no event and is not Ready), so
// that an incompatible upgrade leaves the instances that speak the page
// serving instead of corrupting the per-event cut.
var ErrPageLayout = errors.New("handover page layout not supported by this build")

// checkLayout stamps a page that has no layout yet with pageLayout (a new
// page, or one written by a build from before the layout word, which used
// the same offsets as layout 1), and reports a page of another layout.
func (d *Dir) checkLayout() error {
	w := d.word(layoutOffset)
	if atomic.CompareAndSwapUint64(w, 0, pageLayout) {
		return nil
	}
	if l := atomic.LoadUint64(w); l != pageLayout {
		return fmt.Errorf("%s has layout %d, this build speaks layout %d: %w",
			filepath.Join(d.path, genFileName), l, pageLayout, ErrPageLayout)
	}
	return nil
}

// LayoutErr reports (wrapping ErrPageLayout) that the handover page has a
// layout this build does not speak; nil if it speaks it.
func (d *Dir) LayoutErr() error { return d.layoutErr }

// mapGeneration opens (creating it 0600 if needed) the owner-name
// generation file and maps it shared, so that a change published by any
// instance is visible to all without a system call.
func mapGeneration(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", genFileName, err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", genFileName, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() < genFileSize {
		// Growing only: a concurrent instance truncating to the same size
		// changes nothing, and the counter's bytes are never cut off.
		if err := f.Truncate(genFileSize); err != nil {
			return nil, fmt.Errorf("size %s: %w", genFileName, err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, genFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", genFileName, err)
	}
	return mem, nil
}

// ownerGeneration returns the number of times the owner name has been
// published on this node (by any instance). It changes after every rename
// of the owner name, so an owner that verified the name at generation g
// need not look at it again while the generation is still g.
// ok is false once the Dir is closed.
func (d *Dir) ownerGeneration() (gen uint64, ok bool) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return 0, false
	}
	return atomic.LoadUint64(d.word(genOffset)), true
}

// bumpOwnerGeneration records a change of the owner name; call it after
// the rename.
func (d *Dir) bumpOwnerGeneration() {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen != nil {
		atomic.AddUint64(d.word(genOffset), 1)
	}
}

// Close releases the directory handle and the generation mapping. The
// files are left alone.
func (d *Dir) Close() error {
	d.genMu.Lock()
	defer d.genMu.Unlock()
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	if d.gen != nil {
		err = errors.Join(err, unix.Munmap(d.gen))
		d.gen = nil
	}
	return err
}

// ownerID returns the identity of the file behind the owner name: one
// fstatat(2) relative to the open directory, cheap enough for every event.
func (d *Dir) ownerID() (fileID, error) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.fd < 0 {
		return fileID{}, errors.New("handover directory closed")
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, ownerSocketName, &st, 0); err != nil {
		return fileID{}, fmt.Errorf("stat %s: %w", d.OwnerSocket(), err)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

func validatePluginName(plugin string) error {
	if plugin == "" || len(plugin) > 63 || strings.ContainsAny(plugin, "/\x00") ||
		plugin == "." || plugin == ".." {
		return fmt.Errorf("invalid plugin name %q for a handover directory", plugin)
	}
	return nil
}

// ensurePrivateDir creates path with mode 0700 if it is missing and checks
// that an existing one is a directory owned by us that nobody else can write.
func ensurePrivateDir(path string) error {
	err := os.Mkdir(path, 0o700)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("handover directory %s: %w", path, err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("handover directory %s: %w", path, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("handover directory %s: not a directory", path)
	}
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("handover directory %s: mode %v lets other users write; want 0700",
			path, info.Mode().Perm())
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("handover directory %s: owned by uid %d, not by this process (uid %d)",
			path, st.Uid, os.Geteuid())
	}
	// Probe for write access now, so a read-only mount fails at start with
	// a clear message rather than at the first handover.
	if err := unix.Access(path, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("handover directory %s: not writable: %w", path, err)
	}
	return nil
}

// Path is the plugin's handover directory.
func (d *Dir) Path() string { return d.path }

// Plugin is the plugin name the directory belongs to.
func (d *Dir) Plugin() string { return d.plugin }

// OwnerSocket is the well-known socket path of the current owner.
func (d *Dir) OwnerSocket() string { return filepath.Join(d.path, ownerSocketName) }

// InstanceSocket is the socket path of the instance with the given id.
func (d *Dir) InstanceSocket(id string) string {
	return filepath.Join(d.path, instancesDir, id+instanceSuffix)
}

// KeyPath is the stamp key file shared by the plugin's instances.
func (d *Dir) KeyPath() string { return filepath.Join(d.path, keyFileName) }

// InstanceSockets lists the sockets of instances that may be running.
func (d *Dir) InstanceSockets() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.path, instancesDir))
	if err != nil {
		return nil, fmt.Errorf("list instances in %s: %w", d.path, err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), instanceSuffix) {
			out = append(out, filepath.Join(d.path, instancesDir, e.Name()))
		}
	}
	return out, nil
}

// lockRetry is how often a busy claim lock is tried again.
const lockRetry = time.Millisecond

// Lock takes the directory's claim lock (flock), waiting until ctx ends. The
// kernel drops the lock when the holder dies, so a crash never wedges it.
func (d *Dir) Lock(ctx context.Context) (unlock func(), err error) {
	path := filepath.Join(d.path, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open claim lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("take claim lock %s: %w", path, err)
		}
		// flock(2) cannot be cancelled, so a bounded wait polls it.
		t := time.NewTimer(lockRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, fmt.Errorf("take claim lock %s: another handover is in progress: %w",
				path, ctx.Err())
		case <-t.C:
		}
	}
}

// publishSeq numbers this process's publishes of the owner name, so that
// each uses a temporary name of its own.
var publishSeq atomic.Uint64

// publishOwner makes instanceSocket reachable under the owner socket name.
// The name is swapped atomically (link to a temporary name, then rename), so
// a client dialing the owner socket always finds one of the two owners and
// the previous owner's own socket file is left untouched. A non-zero
// deadline is checked right before the swap, against now (the
// coordinator's clock; nil with a zero deadline): past it, nothing changes
// and the error wraps errClaimDeadline. Call with the lock.
func (d *Dir) publishOwner(instanceSocket string, deadline time.Time, now func() time.Time) error {
	// A name of this call's own: instances in one process (tests, the demo)
	// may publish at the same time.
	tmp := fmt.Sprintf("%s.tmp-%d-%d", d.OwnerSocket(), os.Getpid(), publishSeq.Add(1))
	_ = os.Remove(tmp)
	if err := os.Link(instanceSocket, tmp); err != nil {
		return fmt.Errorf("publish owner socket: %w", err)
	}
	if !deadline.IsZero() && !now().Before(deadline) {
		_ = os.Remove(tmp)
		return fmt.Errorf("publish owner socket: %w", errClaimDeadline)
	}
	if err := os.Rename(tmp, d.OwnerSocket()); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("publish owner socket: %w", err)
	}
	d.bumpOwnerGeneration()
	return nil
}

// Offsets of the counters in owner.gen.
const (
	genOffset   = 0 // changes of the owner name
	epochOffset = 8 // the last epoch any owner recorded
	// layoutOffset holds the page's layout (pageLayout; 0: none yet). The
	// cut's words follow the counters (cut.go: 16 to 79).
	layoutOffset = 80
)

// word returns the counter at off in the shared page; call with genMu
// read-locked and gen non-nil.
func (d *Dir) word(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&d.gen[off]))
}

// readEpoch returns the last epoch recorded on this node (0 if none).
func (d *Dir) readEpoch() (uint64, error) {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return 0, errors.New("read epoch: handover directory closed")
	}
	return atomic.LoadUint64(d.word(epochOffset)), nil
}

// writeEpoch records epoch as the last one, unless a later one is on
// record already: epochs only grow.
func (d *Dir) writeEpoch(epoch uint64) error {
	d.genMu.RLock()
	defer d.genMu.RUnlock()
	if d.gen == nil {
		return errors.New("write epoch: handover directory closed")
	}
	w := d.word(epochOffset)
	for {
		last := atomic.LoadUint64(w)
		if last >= epoch || atomic.CompareAndSwapUint64(w, last, epoch) {
			return nil
		}
	}
}

// fileID identifies a file: its device and inode numbers.
type fileID struct{ dev, ino uint64 }

// statID returns the identity of the file at path (following links).
func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}
