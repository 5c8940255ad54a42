package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

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
//
// A container's removal does not drop its entry at once: it marks it
// removed (MarkSyncedRemoved), and the mark is dropped removedKeep later.
// A Synchronize's list may be older than the removal (CRI-O lists the
// containers before it takes the lock its events take, and so does the
// test kit's runtime in that mode): dropped at once, the entry was gone
// for the next owner, whose list still had the container, and its author
// was handed it a second time (the demo, mode cri-o, -faults 10).

const (
	// syncedFileName has a line per container: id, version, instance, and
	// for a removed one "removed=" and the removal's time in Unix
	// nanoseconds (a build from before the mark skips such a line).
	syncedFileName = "synced-unstamped"
	syncedLockName = "synced-unstamped.lock"
)

// removedKeep is how long a removed container's entry is kept: far longer
// than a Synchronize takes from its listing to its end (a variable for the
// package's tests).
var removedKeep = 10 * time.Minute

// SyncedBy says which instance's author synchronized a container, at
// which version: for such a container it is what a stamp would say.
// Removed, if set, is when the container's removal was seen.
type SyncedBy struct {
	Version, Instance string
	Removed           time.Time
}

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
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3:
			ids[f[0]] = SyncedBy{Version: f[1], Instance: f[2]}
		case len(f) == 4 && strings.HasPrefix(f[3], "removed="):
			if ns, err := strconv.ParseInt(strings.TrimPrefix(f[3], "removed="), 10, 64); err == nil && ns > 0 {
				ids[f[0]] = SyncedBy{Version: f[1], Instance: f[2], Removed: time.Unix(0, ns)}
			}
		}
	}
	return ids
}

// RecordSyncedUnstamped adds the ids of added, synchronized by by, to the
// list and drops the listed ids for which exists is false (containers that
// are gone) unless marked removed, and the marks older than removedKeep.
// An id listed already keeps its entry: like a stamp, it names the version
// that processed the container first. Writers are serialized by a lock of
// the list's own, and the list is replaced by a rename, so a reader never
// sees half of it and a crash leaves the old one.
func (d *Dir) RecordSyncedUnstamped(added []string, by SyncedBy, exists func(id string) bool) error {
	if strings.ContainsAny(by.Version+by.Instance, " \t\n") || by.Version == "" || by.Instance == "" {
		return fmt.Errorf("record synced containers: bad version %q or instance %q", by.Version, by.Instance)
	}
	return d.rewriteSynced(func(listed map[string]SyncedBy) {
		for id, b := range listed {
			if !exists(id) && b.Removed.IsZero() {
				delete(listed, id)
			}
		}
		for _, id := range added {
			if _, ok := listed[id]; !ok && !strings.ContainsAny(id, " \t\n") && id != "" {
				listed[id] = SyncedBy{Version: by.Version, Instance: by.Instance}
			}
		}
	})
}

// MarkSyncedRemoved marks the listed container id removed at at: it stays
// listed for removedKeep. An id not listed, or marked already, is left as
// it is.
func (d *Dir) MarkSyncedRemoved(id string, at time.Time) error {
	return d.rewriteSynced(func(listed map[string]SyncedBy) {
		if b, ok := listed[id]; ok && b.Removed.IsZero() {
			b.Removed = at
			listed[id] = b
		}
	})
}

// rewriteSynced replaces the list with what change makes of it, under the
// list's lock, and drops the removal marks older than removedKeep; it
// writes nothing if nothing changed.
func (d *Dir) rewriteSynced(change func(listed map[string]SyncedBy)) error {
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
	before := maps.Clone(listed)
	change(listed)
	now := time.Now()
	for id, b := range listed {
		if !b.Removed.IsZero() && now.Sub(b.Removed) > removedKeep {
			delete(listed, id)
		}
	}
	if maps.Equal(before, listed) {
		return nil // nothing was dropped, added or marked
	}
	ids := make([]string, 0, len(listed))
	for id := range listed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var buf bytes.Buffer
	for _, id := range ids {
		if b := listed[id]; b.Removed.IsZero() {
			fmt.Fprintf(&buf, "%s %s %s\n", id, b.Version, b.Instance)
		} else {
			fmt.Fprintf(&buf, "%s %s %s removed=%d\n", id, b.Version, b.Instance, b.Removed.UnixNano())
		}
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
