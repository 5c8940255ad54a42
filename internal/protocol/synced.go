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
// handed it a second time, the owner records it in syncedFileName once its
// claim has settled; every owner's Synchronize skips the containers listed
// there, and each record drops the ids of containers that no longer exist.

const (
	syncedFileName = "synced-unstamped" // one container id per line
	syncedLockName = "synced-unstamped.lock"
)

// SyncedUnstamped returns the ids of the containers an owner's author has
// processed in Synchronize although they carry no stamp. A missing list is
// empty.
func (d *Dir) SyncedUnstamped() (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(d.path, syncedFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read synced containers: %w", err)
	}
	return parseSynced(b), nil
}

func parseSynced(b []byte) map[string]bool {
	ids := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if id := strings.TrimSpace(sc.Text()); id != "" {
			ids[id] = true
		}
	}
	return ids
}

// RecordSyncedUnstamped adds the ids of added to the list and drops the
// listed ids for which exists is false (containers that are gone). Writers
// are serialized by a lock of the list's own, and the list is replaced by
// a rename, so a reader never sees half of it and a crash leaves the old
// one.
func (d *Dir) RecordSyncedUnstamped(added []string, exists func(id string) bool) error {
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
	keep := make([]string, 0, len(listed)+len(added))
	for id := range listed {
		if exists(id) {
			keep = append(keep, id)
		}
	}
	for _, id := range added {
		if !listed[id] {
			keep = append(keep, id)
		}
	}
	sort.Strings(keep)
	if len(keep) == len(listed) && len(added) == 0 {
		return nil // nothing was dropped or added
	}
	var buf bytes.Buffer
	for _, id := range keep {
		buf.WriteString(id)
		buf.WriteByte('\n')
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
