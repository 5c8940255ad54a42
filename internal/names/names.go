// Package names maps the plugin names NRI accepts onto the names the
// harness can use for a stamp's annotation key and for the plugin's
// handover directory.
//
// NRI accepts any non-empty name of [a-zA-Z0-9_.+-] (api.CheckPluginName).
// An annotation key's name segment is narrower: at most 63 characters of
// [-_.a-zA-Z0-9] that start and end alphanumeric. A name that already fits
// is used unchanged (so stamps and directories of existing plugins keep
// their names); any other is mapped to a name that fits and ends in a hash
// of the whole original name.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

const (
	maxLen  = 63 // Kubernetes qualified-name segment limit
	hashLen = 16 // hex digits of the SHA-256 of the original name
	// marker precedes the hash. A name that fits is never mapped, so a
	// mapped name can only equal a name that fits if that name ends in
	// this marker and the 64-bit hash of another name: chosen on purpose.
	marker = "-x"
)

// Key returns the name the harness uses for plugin name: name itself if it
// is a valid annotation key segment, else a valid one derived from it. Key
// is deterministic: every instance and the operator's CLI compute the same
// for the same name. Two different names map to two different keys unless
// their 64-bit hashes collide.
func Key(name string) string {
	if Valid(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := marker + hex.EncodeToString(sum[:])[:hashLen]
	b := []byte(name)
	for i, c := range b {
		if !nameChar(c) {
			b[i] = '-'
		}
	}
	prefix := strings.TrimFunc(string(b), func(r rune) bool { return r > 127 || !alnum(byte(r)) })
	if room := maxLen - len(suffix); len(prefix) > room {
		prefix = strings.TrimRightFunc(prefix[:room], func(r rune) bool { return !alnum(byte(r)) })
	}
	if prefix == "" {
		return "p" + suffix
	}
	return prefix + suffix
}

// Valid reports whether name is usable unchanged: 1..63 characters of
// [-_.a-zA-Z0-9] that start and end with [a-zA-Z0-9].
func Valid(name string) bool {
	if len(name) == 0 || len(name) > maxLen || !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !nameChar(name[i]) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func nameChar(c byte) bool { return alnum(c) || c == '-' || c == '_' || c == '.' }
