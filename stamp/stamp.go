// Package stamp implements versioned, authenticated container stamps.
//
// A stamp is a container annotation recording which plugin, plugin version
// and plugin instance processed a container at CreateContainer. During a
// handover between two instances of an NRI plugin, the stamp tells the new
// instance which containers were already handled and by which version.
//
// The annotation key is AnnotationPrefix followed by the plugin name. The
// value has the form
//
//	v1;<version>;<instance>;<mac>
//
// where <version> is the original string of a hashicorp/go-version version,
// <instance> is the instance id and <mac> is the unpadded URL-safe base64
// encoding of the first 16 bytes of
//
//	HMAC-SHA256(key, "nri-handover/stamp/v1\x00" + plugin + "\x00" +
//	            containerID + "\x00" + version + "\x00" + instance)
//
// The MAC binds the stamp to one container, so a stamp copied from another
// container, written by a user, or made with another node's key is rejected.
package stamp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-version"
)

// AnnotationPrefix is the prefix of stamp annotation keys; the full key is
// AnnotationPrefix followed by the plugin name.
const AnnotationPrefix = "stamp.nri-handover.io/"

// FormatVersion is the version tag that starts every stamp value.
const FormatVersion = "v1"

// KeySize is the size in bytes of a stamp Key.
const KeySize = 32

// Sentinel errors returned (possibly wrapped) by Signer.Verify.
var (
	// ErrNoStamp means the container carries no stamp of this plugin.
	ErrNoStamp = errors.New("no stamp")
	// ErrMalformed means the stamp value is not syntactically valid.
	ErrMalformed = errors.New("malformed stamp")
	// ErrForged means the stamp is well formed but its MAC does not verify:
	// it was written for another container, with another key, or by hand.
	ErrForged = errors.New("stamp MAC does not verify")
)

const (
	macPrefix      = "nri-handover/stamp/" + FormatVersion + "\x00"
	macSize        = 16                  // truncated HMAC length in bytes
	macEncodedSize = (macSize*8 + 5) / 6 // 22 base64 characters, no padding
	maxValueLen    = 512                 // longest value Verify will parse
	maxPluginLen   = 63                  // Kubernetes qualified-name segment limit
	maxInstanceLen = 128                 // longest instance id
	fieldSep       = ";"                 // separates value fields
	numFields      = 4                   // format, version, instance, mac

	maxCachedVersions = 16   // versions of verified stamps kept parsed, per signer
	maxPooledMsg      = 1024 // longest MAC input buffer kept for reuse
)

// macEncoding is strict so that each MAC has exactly one accepted encoding.
var macEncoding = base64.RawURLEncoding.Strict()

// Key is the node-local secret shared by the instances of one plugin.
type Key [KeySize]byte

// AnnotationKey returns the annotation key for a plugin name. Plugin names
// must be 1..63 characters, start and end with [a-zA-Z0-9] and contain only
// [-_.a-zA-Z0-9] (a Kubernetes qualified-name segment).
func AnnotationKey(plugin string) (string, error) {
	if err := validatePlugin(plugin); err != nil {
		return "", err
	}
	return AnnotationPrefix + plugin, nil
}

// ParseVersion parses a plugin version with hashicorp/go-version. The error
// names the offending input.
func ParseVersion(s string) (*version.Version, error) {
	if s == "" {
		return nil, fmt.Errorf("invalid plugin version %q: empty", s)
	}
	v, err := version.NewVersion(s)
	if err != nil {
		return nil, fmt.Errorf("invalid plugin version %q: %w", s, err)
	}
	return v, nil
}

// Stamp is one decoded and verified stamp.
type Stamp struct {
	Plugin      string           // plugin name (annotation key suffix)
	ContainerID string           // container the stamp was verified for
	Version     *version.Version // plugin version that wrote the stamp
	Instance    string           // plugin instance that wrote the stamp
}

// Older reports whether s was written by a version older than v. It returns
// false if either version is nil.
func (s Stamp) Older(v *version.Version) bool {
	if s.Version == nil || v == nil {
		return false
	}
	return s.Version.LessThan(v)
}

// Signer creates and verifies stamps of one plugin. It is safe for
// concurrent use.
type Signer struct {
	plugin string
	annKey string
	macs   sync.Pool // of *macState; hmac instances are not concurrency safe

	// versions caches the parsed versions of stamps that verified, by their
	// original string (a handful: the versions deployed on the node), so
	// that verifying the stamps of a node's containers parses each version
	// once. Callers get copies: a Version can be overwritten (UnmarshalText).
	versions  sync.Map // string -> *version.Version
	nVersions atomic.Int32
}

// macState is a keyed HMAC with the buffers one MAC computation needs, so
// that computing a MAC allocates nothing.
type macState struct {
	h   hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// NewSigner validates plugin (as AnnotationKey does) and returns a signer
// that authenticates stamps with key.
func NewSigner(plugin string, key Key) (*Signer, error) {
	annKey, err := AnnotationKey(plugin)
	if err != nil {
		return nil, err
	}
	s := &Signer{plugin: plugin, annKey: annKey}
	s.macs.New = func() any { return &macState{h: hmac.New(sha256.New, key[:])} }
	return s, nil
}

// Key returns the annotation key this signer writes.
func (s *Signer) Key() string { return s.annKey }

// Sign returns the annotation value for containerID processed by instance
// at version v. The container id must be non-empty, v's original string must
// re-parse to a version (it cannot contain ';'), and instance ids must be
// 1..128 characters of [-_.a-zA-Z0-9]. Values that would exceed the length
// Verify accepts are rejected.
func (s *Signer) Sign(containerID string, v *version.Version, instance string) (string, error) {
	if containerID == "" {
		return "", errEmptyContainer
	}
	st, err := s.Stamper(v, instance)
	if err != nil {
		return "", err
	}
	return st.Sign(containerID)
}

var errEmptyContainer = errors.New("stamp: empty container id")

// Stamper signs the stamps of one version and instance: it makes the checks
// of Sign on them once, so that each stamp costs only its MAC. Make one
// with Signer.Stamper; it is safe for concurrent use.
type Stamper struct {
	s        *Signer
	ver      string // the version's original string
	instance string
	prefix   string // "v1;<version>;<instance>;"
}

// Stamper returns a Stamper for stamps of version v written by instance.
// It fails, with the error Sign would return, where Sign would fail for
// every container.
func (s *Signer) Stamper(v *version.Version, instance string) (*Stamper, error) {
	if v == nil {
		return nil, errors.New("stamp: nil version")
	}
	orig := v.Original()
	if strings.Contains(orig, fieldSep) {
		return nil, fmt.Errorf("stamp: version %q contains %q", orig, fieldSep)
	}
	// Verify re-parses the original string, so it must parse on its own
	// (e.g. a version built with version.WithPrefix may not).
	if _, err := ParseVersion(orig); err != nil {
		return nil, fmt.Errorf("stamp: %w", err)
	}
	if err := validateInstance(instance); err != nil {
		return nil, fmt.Errorf("stamp: %w", err)
	}
	n := len(FormatVersion) + len(orig) + len(instance) + macEncodedSize + numFields - 1
	if n > maxValueLen {
		return nil, fmt.Errorf("stamp: value would be %d bytes, limit is %d", n, maxValueLen)
	}
	prefix := FormatVersion + fieldSep + orig + fieldSep + instance + fieldSep
	return &Stamper{s: s, ver: orig, instance: instance, prefix: prefix}, nil
}

// Sign returns the annotation value for containerID, as Signer.Sign does
// for the Stamper's version and instance. The container id must be
// non-empty.
func (st *Stamper) Sign(containerID string) (string, error) {
	if containerID == "" {
		return "", errEmptyContainer
	}
	var mac [macSize]byte
	st.s.mac(&mac, containerID, st.ver, st.instance)
	var b strings.Builder
	b.Grow(len(st.prefix) + macEncodedSize)
	b.WriteString(st.prefix)
	var enc [macEncodedSize]byte
	macEncoding.Encode(enc[:], mac[:])
	b.Write(enc[:])
	return b.String(), nil
}

// Verify reads the stamp of this plugin from annotations (which may be nil)
// and checks it for containerID. It returns ErrNoStamp if the annotation is
// absent, an error wrapping ErrMalformed if the value is not a syntactically
// valid stamp, and an error wrapping ErrForged if the MAC does not match.
func (s *Signer) Verify(containerID string, annotations map[string]string) (Stamp, error) {
	return s.verify(containerID, annotations, true)
}

// Check is Verify without the decoded stamp: it returns the same errors,
// and nil where Verify returns a stamp. It spares the Version that Verify
// makes for each stamp, for callers that check many containers and need
// only to know which carry a valid stamp.
func (s *Signer) Check(containerID string, annotations map[string]string) error {
	_, err := s.verify(containerID, annotations, false)
	return err
}

// verify implements Verify, and Check if !decode (the Stamp is then zero).
func (s *Signer) verify(containerID string, annotations map[string]string, decode bool) (Stamp, error) {
	value, ok := annotations[s.annKey]
	if !ok {
		return Stamp{}, ErrNoStamp
	}
	// Bound the work done on untrusted input before any parsing.
	if len(value) > maxValueLen {
		return Stamp{}, s.malformed("value is %d bytes, limit is %d", len(value), maxValueLen)
	}
	if n := strings.Count(value, fieldSep) + 1; n != numFields {
		return Stamp{}, s.malformed("%d fields, want %d", n, numFields)
	}
	// Exactly numFields fields: format;version;instance;mac.
	format, rest, _ := strings.Cut(value, fieldSep)
	ver, rest, _ := strings.Cut(rest, fieldSep)
	instance, encMAC, _ := strings.Cut(rest, fieldSep)
	if format != FormatVersion {
		return Stamp{}, s.malformed("unknown format version %q", format)
	}
	v, cached := s.cachedVersion(ver, decode)
	if !cached {
		var err error
		if v, err = ParseVersion(ver); err != nil {
			return Stamp{}, s.malformed("%v", err)
		}
	}
	if err := validateInstance(instance); err != nil {
		return Stamp{}, s.malformed("%v", err)
	}
	if len(encMAC) != macEncodedSize {
		return Stamp{}, s.malformed("MAC is %d characters, want %d", len(encMAC), macEncodedSize)
	}
	var got [macSize]byte // 22 characters decode to at most 16 bytes
	n, err := macEncoding.Decode(got[:], []byte(encMAC))
	if err != nil || n != macSize {
		return Stamp{}, s.malformed("MAC is not valid base64url")
	}
	var want [macSize]byte
	s.mac(&want, containerID, ver, instance)
	if !hmac.Equal(got[:n], want[:]) {
		return Stamp{}, fmt.Errorf("%w: %s on container %q", ErrForged, s.annKey, containerID)
	}
	if !cached {
		s.cacheVersion(ver, v)
	}
	if !decode {
		return Stamp{}, nil
	}
	return Stamp{Plugin: s.plugin, ContainerID: containerID, Version: v, Instance: instance}, nil
}

// cachedVersion reports whether the parse of the version string ver is
// cached and, if want, returns a copy of it.
func (s *Signer) cachedVersion(ver string, want bool) (*version.Version, bool) {
	c, ok := s.versions.Load(ver)
	if !ok || !want {
		return nil, ok
	}
	v := *c.(*version.Version) // its slices are never written to
	return &v, true
}

// cacheVersion keeps a copy of v, the parse of ver from a stamp that
// verified, unless the cache is full.
func (s *Signer) cacheVersion(ver string, v *version.Version) {
	if s.nVersions.Load() >= maxCachedVersions {
		return
	}
	c := *v
	if _, loaded := s.versions.LoadOrStore(ver, &c); !loaded {
		s.nVersions.Add(1)
	}
}

// malformed returns an error wrapping ErrMalformed that names the annotation.
func (s *Signer) malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, s.annKey, fmt.Sprintf(format, args...))
}

// mac writes the truncated HMAC of the stamp fields into out.
func (s *Signer) mac(out *[macSize]byte, containerID, ver, instance string) {
	m := s.macs.Get().(*macState)
	// Every field but containerID excludes NUL, so the encoding is unambiguous.
	msg := append(m.msg[:0], macPrefix...)
	msg = append(msg, s.plugin...)
	msg = append(msg, 0)
	msg = append(msg, containerID...)
	msg = append(msg, 0)
	msg = append(msg, ver...)
	msg = append(msg, 0)
	msg = append(msg, instance...)
	m.h.Reset()
	m.h.Write(msg) // hash.Hash.Write never fails
	copy(out[:], m.h.Sum(m.sum[:0]))
	if cap(msg) <= maxPooledMsg {
		m.msg = msg
	} else {
		m.msg = nil // an unusually long container id: do not keep its buffer
	}
	s.macs.Put(m)
}

// validatePlugin checks a plugin name is a Kubernetes qualified-name segment.
func validatePlugin(plugin string) error {
	if l := len(plugin); l == 0 || l > maxPluginLen {
		return fmt.Errorf("invalid plugin name %q: length must be 1..%d", plugin, maxPluginLen)
	}
	if !isAlnum(plugin[0]) || !isAlnum(plugin[len(plugin)-1]) {
		return fmt.Errorf("invalid plugin name %q: must start and end with [a-zA-Z0-9]", plugin)
	}
	for i := 0; i < len(plugin); i++ {
		if !isNameChar(plugin[i]) {
			return fmt.Errorf("invalid plugin name %q: only [-_.a-zA-Z0-9] allowed", plugin)
		}
	}
	return nil
}

// validateInstance checks an instance id is 1..128 characters of [-_.a-zA-Z0-9].
// ValidateInstance checks an instance id: 1..128 characters of
// [-_.a-zA-Z0-9], the ids a stamp can carry. Instances check their id at
// start with it, and the handover protocol checks the ids peers send.
func ValidateInstance(instance string) error { return validateInstance(instance) }

func validateInstance(instance string) error {
	if l := len(instance); l == 0 || l > maxInstanceLen {
		return fmt.Errorf("invalid instance id %q: length must be 1..%d", instance, maxInstanceLen)
	}
	for i := 0; i < len(instance); i++ {
		if !isNameChar(instance[i]) {
			return fmt.Errorf("invalid instance id %q: only [-_.a-zA-Z0-9] allowed", instance)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isNameChar(c byte) bool {
	return isAlnum(c) || c == '-' || c == '_' || c == '.'
}
