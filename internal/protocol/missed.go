package protocol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The missed creations noted and not handed yet.
//
// An instance that acts on a later event of a container whose creation no
// instance processed (no stamp, not in the synced-unstamped record) hands
// that container to its author at its next catch-up. Until then only that
// instance knows of it: killed before the catch-up, with the container
// stopped or removed before any other instance's Synchronize could list
// it, the container was never handed (the demo, mode cri-o, -faults 10,
// about one run in two). So the note is kept here as well, one file per
// container (missedDirName/<id>: the noting instance's id, a newline, the
// container as the runtime last described it), written before the
// catch-up is asked for and removed once a catch-up has handed the
// container and recorded it synchronized. A catch-up of another instance
// hands the notes of an instance that is gone (NotedMissed, InstanceGone).

const missedDirName = "missed"

// MissedNote is a noted missed creation: the instance that noted it and
// the container, encoded by the caller.
type MissedNote struct {
	Instance  string
	Container []byte
}

// NoteMissed records that instance noted the missed creation of container
// id, encoded as container. The file is replaced by a rename, so a reader
// sees a whole note or none.
func (d *Dir) NoteMissed(id, instance string, container []byte) error {
	if err := validNoteName(id); err != nil {
		return fmt.Errorf("note missed creation: %w", err)
	}
	if instance == "" || strings.ContainsAny(instance, "\n/") {
		return fmt.Errorf("note missed creation of %s: bad instance %q", id, instance)
	}
	dir := filepath.Join(d.path, missedDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("note missed creation of %s: %w", id, err)
	}
	tmp := filepath.Join(dir, "."+id+".tmp")
	b := append([]byte(instance+"\n"), container...)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("note missed creation of %s: %w", id, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, id)); err != nil {
		return fmt.Errorf("note missed creation of %s: %w", id, err)
	}
	return nil
}

// NotedMissed returns the noted missed creations by container id. A note
// that cannot be read is skipped (a later call may read it).
func (d *Dir) NotedMissed() (map[string]MissedNote, error) {
	dir := filepath.Join(d.path, missedDirName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]MissedNote{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read missed creations: %w", err)
	}
	out := make(map[string]MissedNote, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // dropped meanwhile
		}
		inst, ctr, ok := bytes.Cut(b, []byte("\n"))
		if !ok || len(inst) == 0 {
			continue
		}
		out[e.Name()] = MissedNote{Instance: string(inst), Container: ctr}
	}
	return out, nil
}

// takingPrefix names a note taken for handing (TakeMissed).
const takingPrefix = ".taking-"

// TakeMissed takes the note of container id for handing, so that no other
// instance hands it at the same time (two instances may note the same
// container: both saw a later event of it). taken: this call took it;
// busy: another instance took it and has not dropped it (its hand is
// under way, or it died in it). Neither: there is no note.
func (d *Dir) TakeMissed(id string) (taken, busy bool, err error) {
	if err := validNoteName(id); err != nil {
		return false, false, fmt.Errorf("take missed creation: %w", err)
	}
	dir := filepath.Join(d.path, missedDirName)
	note, taking := filepath.Join(dir, id), filepath.Join(dir, takingPrefix+id)
	// A link, not a rename: a rename replaces a taken note, and another
	// instance may have noted the container again while one hands it
	// (it saw a later event of it meanwhile): both handed it (the demo,
	// mode containerd, -faults 10 -seed 3098, 1 ms apart). The link fails
	// while the taken note exists.
	err = os.Link(note, taking)
	switch {
	case err == nil:
		if err := os.Remove(note); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return true, false, fmt.Errorf("take missed creation %s: %w", id, err)
		}
		return true, false, nil
	case errors.Is(err, fs.ErrExist) && !takenLongAgo(taking):
		return false, true, nil
	case errors.Is(err, fs.ErrExist):
		// Taken by an instance that died before it dropped the note (a
		// hand takes at most a request timeout): this note replaces it.
		if err := os.Rename(note, taking); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, true, nil // taken meanwhile
			}
			return false, false, fmt.Errorf("take missed creation %s: %w", id, err)
		}
		return true, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, false, fmt.Errorf("take missed creation %s: %w", id, err)
	}
	if _, err := os.Stat(taking); err == nil {
		return false, true, nil
	}
	return false, false, nil
}

// staleTake is how long after its take a taken note is left to its
// taker: far beyond a hand, which the runtime's request timeout bounds. A
// variable for the package's tests.
var staleTake = time.Minute

// takenLongAgo reports whether the taken note at path was taken more than
// staleTake ago: its inode changed then (the link that took it), and not
// since.
func takenLongAgo(path string) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return false
	}
	return time.Since(time.Unix(st.Ctim.Unix())) > staleTake
}

// MissedNames returns, by container id, the containers with a note, taken
// or not, from one read of the notes' directory: a caller need not try to
// take what has none.
func (d *Dir) MissedNames() (map[string]bool, error) {
	entries, err := os.ReadDir(filepath.Join(d.path, missedDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read missed creations: %w", err)
	}
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		name := e.Name()
		if id, ok := strings.CutPrefix(name, takingPrefix); ok {
			out[id] = true
		} else if !strings.HasPrefix(name, ".") {
			out[name] = true
		}
	}
	return out, nil
}

// ReturnMissed puts back the note of container id taken by TakeMissed
// (its hand failed): another catch-up may take it.
func (d *Dir) ReturnMissed(id string) error {
	if validNoteName(id) != nil {
		return nil
	}
	dir := filepath.Join(d.path, missedDirName)
	if err := os.Rename(filepath.Join(dir, takingPrefix+id), filepath.Join(dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("return missed creation %s: %w", id, err)
	}
	return nil
}

// DropMissed removes the notes of the containers ids (handed, and recorded
// in the synced-unstamped record). A missing note is no error.
func (d *Dir) DropMissed(ids []string) error {
	var errs []error
	for _, id := range ids {
		if validNoteName(id) != nil {
			continue
		}
		for _, name := range []string{id, takingPrefix + id} {
			err := os.Remove(filepath.Join(d.path, missedDirName, name))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drop missed creations: %w", err)
	}
	return nil
}

// InstanceGone reports whether the instance id no longer serves its
// handover socket: the socket is missing or refuses connections (the
// kernel refuses them once the process is gone; a frozen process still
// accepts). Any other failure counts as alive.
func (d *Dir) InstanceGone(ctx context.Context, id string) bool {
	c, err := Dial(ctx, d.InstanceSocket(id))
	if err != nil {
		return errors.Is(err, ErrNoInstance)
	}
	_ = c.Close()
	return false
}

// validNoteName checks that a container id can name a note's file.
func validNoteName(id string) error {
	if id == "" || strings.HasPrefix(id, ".") || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("container id %q cannot name a file", id)
	}
	return nil
}
