package stamp

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Polling bounds for a key file that a concurrent creator has not finished
// writing yet.
const (
	keyPollAttempts = 100
	keyPollInterval = time.Millisecond
)

// LoadOrCreateKey returns the key stored at path. If the file does not exist
// it is created with O_CREATE|O_EXCL and mode 0600, filled with KeySize bytes
// from crypto/rand and fsynced. An existing file is never rewritten: if it is
// not a regular file, grants any group/other permission, or does not hold
// exactly KeySize bytes, LoadOrCreateKey returns an error naming path. When
// several processes race to create the file, the losers read the winner's
// key, waiting briefly (about 100ms at most) for it to be fully written.
func LoadOrCreateKey(path string) (Key, error) {
	if path == "" {
		return Key{}, errors.New("stamp key: empty path")
	}
	key, err := createKey(path)
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return Key{}, err
	}
	return readKey(path)
}

// createKey creates a new key file at path. It returns an error wrapping
// fs.ErrExist if the path already exists.
func createKey(path string) (Key, error) {
	var key Key
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return key, err
		}
		return key, fmt.Errorf("stamp key: create %s: %w", path, err)
	}
	if err := writeKey(f, &key); err != nil {
		// The file is ours and incomplete; remove it rather than leave a
		// short key that would fail every later load.
		_ = f.Close()
		_ = os.Remove(path)
		return Key{}, fmt.Errorf("stamp key: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return Key{}, fmt.Errorf("stamp key: close %s: %w", path, err)
	}
	// Make the new directory entry durable too. Some filesystems do not
	// support fsync on directories, so this is best effort.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return key, nil
}

// writeKey fills key with random bytes, writes it to f and fsyncs f.
func writeKey(f *os.File, key *Key) error {
	if _, err := io.ReadFull(rand.Reader, key[:]); err != nil {
		return fmt.Errorf("random: %w", err)
	}
	if _, err := f.Write(key[:]); err != nil {
		return err
	}
	return f.Sync()
}

// readKey reads an existing key file, validating type, permissions and size.
func readKey(path string) (Key, error) {
	var key Key
	// O_NONBLOCK keeps a FIFO at path from blocking the open; it has no
	// effect on regular files.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return key, fmt.Errorf("stamp key: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return key, fmt.Errorf("stamp key: stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return key, fmt.Errorf("stamp key: %s is not a regular file (mode %v)", path, fi.Mode())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return key, fmt.Errorf("stamp key: %s has mode %#o, group/other access is not allowed", path, perm)
	}
	// A concurrent creator may still be writing; poll the size briefly.
	for i := 0; fi.Size() < KeySize && i < keyPollAttempts; i++ {
		time.Sleep(keyPollInterval)
		if fi, err = f.Stat(); err != nil {
			return key, fmt.Errorf("stamp key: stat %s: %w", path, err)
		}
	}
	if fi.Size() != KeySize {
		return key, fmt.Errorf("stamp key: %s is %d bytes, want %d", path, fi.Size(), KeySize)
	}
	if _, err := io.ReadFull(f, key[:]); err != nil {
		return Key{}, fmt.Errorf("stamp key: read %s: %w", path, err)
	}
	return key, nil
}
