package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The containers synchronized without a stamp.
//
// A stamp can only be added when a container is created. A container that
// no instance of the plugin was called for at its creation — it existed
// before the plugin was first installed, or was created while no instance
// acted (after a crash) — stays unstamped after an owner's author has
// processed it in Synchronize. So that the next owner's author is not
// handed it a second time, the owner records it in syncedFileName, with
// its version and instance, once its claim has settled: to later owners
// the entry is what a stamp would be (a newer version reconciles it), and
// each record drops the ids of containers that no longer exist.

const (
	syncedFileName = "synced-unstamped" // a line per container: id, version, instance
	syncedLockName = "synced-unstamped.lock"
)

// SyncedBy says which instance's author synchronized a container, at
// which version: for such a container it is what a stamp would say.
type SyncedBy struct{ Version, Instance string }

// SyncedUnstamped returns, by container id, the containers an owner's
// author has processed in Synchronize although they carry no stamp. A
// missing list is empty.
func (d *Dir) SyncedUnstamped() (map[string]SyncedBy, error) {
	b, err := os.ReadFile(filepath.Join(d.path, syncedFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]SyncedBy{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read synced containers: %w", err)
	}
	return parseSynced(b), nil
}

func parseSynced(b []byte) map[string]SyncedBy {
	ids := map[string]SyncedBy{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 {
			ids[f[0]] = SyncedBy{Version: f[1], Instance: f[2]}
		}
	}
	return ids
}

// RecordSyncedUnstamped adds the ids of added, synchronized by by, to the
// list and drops the listed ids for which exists is false (containers that
// are gone). An id listed already keeps its entry: like a stamp, it names
// the version that processed the container first. Writers are serialized
// by a lock of the list's own, and the list is replaced by a rename, so a
// reader never sees half of it and a crash leaves the old one.
func (d *Dir) RecordSyncedUnstamped(added []string, by SyncedBy, exists func(id string) bool) error {
	if strings.ContainsAny(by.Version+by.Instance, " \t\n") || by.Version == "" || by.Instance == "" {
		return fmt.Errorf("record synced containers: bad version %q or instance %q", by.Version, by.Instance)
	}
	lock, err := os.OpenFile(filepath.Join(d.path, syncedLockName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("record synced containers: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("record synced containers: lock: %w", err)
	}
	defer func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }()

	listed, err := d.SyncedUnstamped()
	if err != nil {
		return err
	}
	keep := make(map[string]SyncedBy, len(listed)+len(added))
	for id, b := range listed {
		if exists(id) {
			keep[id] = b
		}
	}
	for _, id := range added {
		if _, ok := keep[id]; !ok && !strings.ContainsAny(id, " \t\n") && id != "" {
			keep[id] = by
		}
	}
	if len(keep) == len(listed) && len(added) == 0 {
		return nil // nothing was dropped or added
	}
	ids := make([]string, 0, len(keep))
	for id := range keep {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var buf bytes.Buffer
	for _, id := range ids {
		fmt.Fprintf(&buf, "%s %s %s\n", id, keep[id].Version, keep[id].Instance)
	}
	tmp := filepath.Join(d.path, syncedFileName+".tmp")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("record synced containers: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.path, syncedFileName)); err != nil {
		return fmt.Errorf("record synced containers: %w", err)
	}
	return nil
}
