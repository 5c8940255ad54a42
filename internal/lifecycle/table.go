// Package lifecycle keeps the durable record of what a plugin's instances
// last acted on: for each pod sandbox and container an instance acted on,
// its id, its pod's id and the last lifecycle state acted on (created,
// running or stopped; running or stopped for a pod). An entry goes when
// the remove is acted on.
//
// The record lives in the handover directory (lifecycle.rec), which
// outlives every instance, so that an owner that starts after a window
// in which nobody acted can tell which lifecycle changes that window
// took from the author: Diff compares it with the runtime's list.
//
// Layout. The file is mapped shared by every instance, as owner.gen is
// (internal/protocol): a 64-byte header (the layout word, the number of
// slots, the count of objects that found no slot, the write counter,
// whether the record knows every pod, the latest gap no catch-up took
// yet) and a fixed-size
// open-addressing table of slots, each one state word followed by the
// object's id and pod id. A file of another layout is not touched: Open
// reports it (ErrLayout) and the caller runs without a record.
//
// Torn writes. A slot's id bytes are written while its state word still
// says empty or deleted, and the state word, one 64-bit atomic store that
// carries a checksum of the ids, is written last: an instance killed in
// the middle of a write leaves either the old state or a slot that reads
// empty, never a half-written entry. A state word whose checksum does not
// match its ids is counted as unreadable and ignored.
//
// Late changes. A change a catch-up handed is marked late (EndLate): the
// runtime may still send its event (it changed the state it lists before
// sending it), and Begin then reports it handed, once.
//
// Writers and locking. Each entry is written by the instance that acts on
// the event, right after the author's handler returned (the per-event cut
// guarantees one actor per event, and events are serialized by the
// runtime), or by the owner's catch-up inside its Synchronize (no event
// runs then). A state word moves only by compare-and-swap from the word
// its writer read, so a late writer (a handler thawed after its instance
// was dropped) cannot overwrite a newer entry. Within one process, Table's
// mutex serializes the writers of one mapping.
package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileName is the record's file in a plugin's handover directory.
const FileName = "lifecycle.rec"

// Layout is the record layout this build reads and writes.
const Layout = 1

// DefaultSlots is the number of slots a new record has: about 1.2 MB,
// far more pods and containers than a node runs (the kubelet's default is
// 110 pods).
const DefaultSlots = 8192

// ErrLayout is wrapped by Open's error for a record file of a layout this
// build does not speak.
var ErrLayout = errors.New("lifecycle record layout not supported by this build")

// Kind is what an entry is about.
type Kind uint8

// The kinds of entries.
const (
	Container Kind = 1
	Pod       Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Container:
		return "container"
	case Pod:
		return "pod"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// State is the last lifecycle state acted on.
type State uint8

// The states. Unknown is an entry whose object was recorded by a later
// event than its creation (the record had no room then, or did not exist
// yet). Removed is used only as a pending change.
const (
	Unknown State = 0
	Created State = 1
	Running State = 2
	Stopped State = 3
	Removed State = 4
)

func (s State) String() string {
	switch s {
	case Unknown:
		return "unknown"
	case Created:
		return "created"
	case Running:
		return "running"
	case Stopped:
		return "stopped"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Entry is one object in the record.
type Entry struct {
	Kind  Kind
	ID    string
	PodID string // a container's pod; empty for a pod
	// State is the last state acted on; Pending, if not Unknown, a change
	// an instance began to act on and did not finish (it died or froze
	// inside the author's handler): in doubt.
	State, Pending State
	// Late: State was handed by a catch-up (EndLate), and the runtime
	// may still send its event (Begin then reports it handed). A late
	// Removed entry stays until the next catch-up drops it.
	Late bool
	// Seq numbers the entry's last act (Begin, Set) among the record's
	// writes: compared with Table.Seq read earlier, it tells an entry
	// written since.
	Seq uint64
	// Mine: Pending was begun through this Table (this process) and not
	// ended yet: a handler of this process is inside the change, alive,
	// and ends it. Not in doubt.
	Mine bool
}

// Slot is where an entry is, for End.
type Slot struct {
	i      int
	word   uint64 // the word Begin wrote
	handed bool
	closed bool
}

// Closed reports that Begin found the record closed (Close): the
// instance that holds it is winding down, and an act it began cannot be
// recorded any more. Its caller must not hand the change to the author:
// the change stays as the record had it, and a later catch-up hands it.
func (s Slot) Closed() bool { return s.closed }

// Handed reports that Begin found the change already handed to the
// author by a catch-up (EndLate): the runtime sent the event after all,
// and it must not reach the author again.
func (s Slot) Handed() bool { return s.handed }

// Valid reports whether Begin recorded the change (false: no record, or
// no room).
func (s Slot) Valid() bool { return s.word != 0 }

// Layout of the file.
const (
	headerSize   = 64
	offLayout    = 0
	offSlots     = 8
	offOverflows = 16
	offWrites    = 24 // the write counter (see Entry.Seq)
	offPods      = 32 // nonzero while the record knows every pod (see PodsTracked)
	offGap       = 40 // 1 + the Seq at the latest gap no catch-up took yet (see NoteGap)
	maxID        = 64
	slotSize     = 8 + 2 + maxID + maxID + 6 // word, lengths, ids, padding to 8
	maxProbe     = 64
)

// The state word: 0 empty, 1 deleted, else live: bit 1 set, kind in bits
// 2-3, state in bits 4-7, pending in bits 8-11, late in bit 12, the
// write's sequence number in bits 13-47, the ids' checksum in bits 48-63.
const (
	wordEmpty   = 0
	wordDeleted = 1
	liveBit     = 2
	lateBit     = 1 << 12
	seqShift    = 13
	seqMask     = 1<<35 - 1
)

func makeWord(k Kind, st, pend State, sum uint32) uint64 {
	return liveBit | uint64(k&3)<<2 | uint64(st&15)<<4 | uint64(pend&15)<<8 | uint64(sum&0xffff)<<48
}

func wordSeq(w uint64) uint64 { return w >> seqShift & seqMask }

// withSeq is w stamped with the next write's sequence number, noted as
// this mapping's (see PodsRemovedSince). Call with mu and mem mapped.
func (t *Table) withSeq(w uint64) uint64 { return stamped(w, t.nextSeq("")) }

// stamped is w with the write's sequence number n.
func stamped(w, n uint64) uint64 { return w&^(seqMask<<seqShift) | n<<seqShift }

// removedPod is the pod whose removal a change to of (k, id) begins, if
// it is one (see PodsRemovedSince).
func removedPod(k Kind, id string, to State) string {
	if k == Pod && to == Removed {
		return id
	}
	return ""
}

// nextSeq takes the next write's sequence number for a write of this
// mapping, which begins or makes the removal of pod if not empty. Call
// with mu and mem mapped.
func (t *Table) nextSeq(pod string) uint64 {
	n := atomic.AddUint64(t.hword(offWrites), 1) & seqMask
	t.own.wrote(n, pod)
	return n
}

// PodsRemovedSince reports the pods whose removal this Table (this
// process) began or made in the writes after seq (a Seq read earlier),
// and whether it made every write to the record since: only then are
// they all the pods removed since. A write it made is one it began,
// whether or not it ended it; a pod's removal counts from its Begin,
// also of a pod the record did not hold.
func (t *Table) PodsRemovedSince(seq uint64) (pods map[string]bool, onlyMine bool) {
	if !t.lock() {
		return nil, false
	}
	defer t.mu.Unlock()
	now := atomic.LoadUint64(t.hword(offWrites)) & seqMask
	if now < seq {
		return nil, false
	}
	seqs := t.own.seqs
	i, _ := slices.BinarySearch(seqs, seq+1)
	if uint64(len(seqs)-i) != now-seq {
		return nil, false // another writer, or more of this one's than kept
	}
	pods = map[string]bool{}
	for _, s := range seqs[i:] {
		if pod, ok := t.own.podsRemoved[s]; ok {
			pods[pod] = true
		}
	}
	return pods, true
}

// Seq is the sequence number of the last write to the record (by any
// instance): an entry whose Seq is larger was written after it.
func (t *Table) Seq() uint64 {
	if !t.lock() {
		return 0
	}
	defer t.mu.Unlock()
	return atomic.LoadUint64(t.hword(offWrites)) & seqMask
}

func wordKind(w uint64) Kind     { return Kind(w>>2) & 3 }
func wordState(w uint64) State   { return State(w>>4) & 15 }
func wordPending(w uint64) State { return State(w>>8) & 15 }
func wordSum(w uint64) uint32    { return uint32(w >> 48) }

// Table is an open record. Its methods are safe for concurrent use; a nil
// *Table records nothing.
type Table struct {
	mu    sync.Mutex // serializes this mapping's writers; guards mem and own against Close
	mem   []byte
	slots int
	path  string
	own   ownWrites // what this mapping wrote: see Entry.Mine and PodsRemovedSince
}

// ownWrites is what one mapping (one process) knows of its own writes,
// which the shared file does not say: the record's writes it made, and
// the changes it began and has not ended. Guarded by Table.mu.
type ownWrites struct {
	// seqs: the sequence numbers of this mapping's latest writes, oldest
	// first, at most maxOwnWrites; podsRemoved: those that began a pod's
	// removal, with its id.
	seqs        []uint64
	podsRemoved map[uint64]string
	// begun: the slots this mapping began a change in (Begin) and has
	// not ended, with the word Begin wrote.
	begun map[int]uint64
}

// maxOwnWrites bounds ownWrites.seqs: a catch-up asks about the writes
// since its connection's Configure, a request timeout earlier, far fewer
// than this under any load an NRI runtime sends.
const maxOwnWrites = 4096

// wrote notes this mapping's write seq, which began the removal of pod
// if not empty. Call with mu.
func (o *ownWrites) wrote(seq uint64, pod string) {
	if len(o.seqs) == maxOwnWrites {
		n := copy(o.seqs, o.seqs[maxOwnWrites/2:])
		o.seqs = o.seqs[:n]
		for s := range o.podsRemoved {
			if s < o.seqs[0] {
				delete(o.podsRemoved, s)
			}
		}
	}
	o.seqs = append(o.seqs, seq)
	if pod != "" {
		if o.podsRemoved == nil {
			o.podsRemoved = map[uint64]string{}
		}
		o.podsRemoved[seq] = pod
	}
}

// began notes that this mapping began a change in slot i, writing w.
// Call with mu.
func (o *ownWrites) began(i int, w uint64) {
	if o.begun == nil {
		o.begun = map[int]uint64{}
	}
	o.begun[i] = w
}

// Open maps the record under dir, creating it with DefaultSlots slots if
// it does not exist.
func Open(dir string) (*Table, error) { return OpenSlots(dir, DefaultSlots) }

// OpenSlots is Open with the number of slots a new record gets (an
// existing record keeps its own).
func OpenSlots(dir string, slots int) (*Table, error) {
	if slots <= 0 {
		return nil, fmt.Errorf("lifecycle record: %d slots", slots)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lifecycle record: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("lifecycle record: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("lifecycle record %s: not a regular file", path)
	}
	size := int64(headerSize + slots*slotSize)
	if st.Size() < headerSize {
		// New (or never sized): a concurrent instance truncating to the
		// same size changes nothing; the header is then read below.
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("lifecycle record: size: %w", err)
		}
	}
	hdr, err := unix.Mmap(int(f.Fd()), 0, headerSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("lifecycle record: map: %w", err)
	}
	lw := (*uint64)(unsafe.Pointer(&hdr[offLayout]))
	sw := (*uint64)(unsafe.Pointer(&hdr[offSlots]))
	// The slot count first, then the layout: a reader that sees the
	// layout sees the count.
	atomic.CompareAndSwapUint64(sw, 0, uint64(slots))
	atomic.CompareAndSwapUint64(lw, 0, Layout)
	layout, n := atomic.LoadUint64(lw), atomic.LoadUint64(sw)
	_ = unix.Munmap(hdr)
	if layout != Layout {
		return nil, fmt.Errorf("lifecycle record %s has layout %d, this build speaks layout %d: %w", path, layout, Layout, ErrLayout)
	}
	size = int64(headerSize + int(n)*slotSize)
	if n == 0 || n > 1<<20 || st.Size() > size && st.Size() != size {
		return nil, fmt.Errorf("lifecycle record %s: %d slots in a file of %d bytes: %w", path, n, st.Size(), ErrLayout)
	}
	if fst, err := f.Stat(); err == nil && fst.Size() < size {
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("lifecycle record: size: %w", err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("lifecycle record: map: %w", err)
	}
	return &Table{mem: mem, slots: int(n), path: path}, nil
}

// Path is the record's file.
func (t *Table) Path() string { return t.path }

// Slots is the record's number of slots.
func (t *Table) Slots() int { return t.slots }

// Close unmaps the record; the file stays.
func (t *Table) Close() error {
	if !t.lock() {
		return nil
	}
	defer t.mu.Unlock()
	err := unix.Munmap(t.mem)
	t.mem = nil
	return err
}

// Overflows counts the objects (over the record's life, by every
// instance) that could not be recorded: no free slot within the probe
// bound, or an id longer than 64 bytes. Their lifecycle changes in a gap
// cannot be known.
func (t *Table) Overflows() uint64 {
	if !t.lock() {
		return 0
	}
	defer t.mu.Unlock()
	return atomic.LoadUint64(t.hword(offOverflows))
}

// PodsTracked reports whether the record knows every pod of the node, so
// that a listed pod it lacks was run while no instance acted: set by
// SetPodsTracked once an owner recorded the runtime's list of pods with
// no act since it was taken, cleared by SetPodsTracked(false) (an owner
// that records no pod) and by Drop.
func (t *Table) PodsTracked() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mem != nil && atomic.LoadUint64(t.hword(offPods)) != 0
}

// SetPodsTracked sets or clears what PodsTracked reports.
func (t *Table) SetPodsTracked(on bool) {
	if !t.lock() {
		return
	}
	defer t.mu.Unlock()
	v := uint64(0)
	if on {
		v = 1
	}
	atomic.StoreUint64(t.hword(offPods), v)
}

// NoteGap records that an instance declared a gap (a window in which no
// instance acted) when the record's Seq was seq: the next lifecycle
// catch-up of any owner takes it (TakeGap), also when the instance that
// declared it yields before it made its own. A later gap's Seq replaces an
// earlier one's.
func (t *Table) NoteGap(seq uint64) {
	if !t.lock() {
		return
	}
	defer t.mu.Unlock()
	w := t.hword(offGap)
	for {
		old := atomic.LoadUint64(w)
		if old >= seq+1 || atomic.CompareAndSwapUint64(w, old, seq+1) {
			return
		}
	}
}

// TakeGap returns the Seq NoteGap noted, if a gap is noted, and clears
// it: the caller's lifecycle catch-up covers it.
func (t *Table) TakeGap() (seq uint64, ok bool) {
	if !t.lock() {
		return 0, false
	}
	defer t.mu.Unlock()
	v := atomic.SwapUint64(t.hword(offGap), 0)
	if v == 0 {
		return 0, false
	}
	return v - 1, true
}

// lock takes mu and reports whether the record is mapped (not nil, not
// closed); if it is, the caller unlocks mu.
func (t *Table) lock() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	if t.mem == nil {
		t.mu.Unlock()
		return false
	}
	return true
}

func (t *Table) hword(off int) *uint64 { return (*uint64)(unsafe.Pointer(&t.mem[off])) }

func (t *Table) word(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&t.mem[headerSize+i*slotSize]))
}

func (t *Table) ids(i int) (id, pod []byte) {
	b := t.mem[headerSize+i*slotSize+8:]
	il, pl := int(b[0]), int(b[1])
	if il > maxID {
		il = maxID
	}
	if pl > maxID {
		pl = maxID
	}
	return b[2 : 2+il], b[2+maxID : 2+maxID+pl]
}

func (t *Table) setIDs(i int, id, pod string) {
	b := t.mem[headerSize+i*slotSize+8:]
	b[0], b[1] = byte(len(id)), byte(len(pod))
	copy(b[2:2+maxID], id)
	copy(b[2+maxID:2+2*maxID], pod)
}

func checksum(k Kind, id, pod []byte) uint32 {
	return sumPod(sumID(k, id), pod)
}

// The slot checksum is FNV-1a (32 bits) of the kind's byte, id, a zero byte
// and pod, folded to 16 bits (never 0), inline: the values of hash/fnv's,
// without its interface calls per event. sumID is its state after the
// kind and id, sumPod the checksum from there.
const sumPrime = 16777619

func sumID[T string | []byte](k Kind, id T) uint32 {
	s := (uint32(2166136261) ^ uint32(byte(k))) * sumPrime
	for i := 0; i < len(id); i++ {
		s = (s ^ uint32(id[i])) * sumPrime
	}
	return s
}

func sumPod(s uint32, pod []byte) uint32 {
	s *= sumPrime // the zero byte
	for _, b := range pod {
		s = (s ^ uint32(b)) * sumPrime
	}
	s = (s ^ s>>16) & 0xffff
	if s == 0 {
		s = 1
	}
	return s
}

// The home slot is FNV-1a (64 bits) of the kind's byte and id, modulo the
// number of slots.
const (
	homeOffset = 14695981039346656037
	homePrime  = 1099511628211
)

func home(k Kind, id string, n int) int {
	h := (uint64(homeOffset) ^ uint64(k)) * homePrime
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * homePrime
	}
	return int(h % uint64(n))
}

// hashKey is home and sumID of (k, id) in one pass over id: the two
// hashes' multiplications do not wait for each other, so together they
// take about the time of one (an event's Begin needs both).
func hashKey(k Kind, id string, n int) (at int, sum uint32) {
	h := (uint64(homeOffset) ^ uint64(k)) * homePrime
	s := (uint32(2166136261) ^ uint32(byte(k))) * sumPrime
	for i := 0; i < len(id); i++ {
		b := id[i]
		h = (h ^ uint64(b)) * homePrime
		s = (s ^ uint32(b)) * sumPrime
	}
	return int(h % uint64(n)), s
}

// find returns the slot of (k, id) and its word, or -1; free is the first
// deleted or empty slot on its probe path (-1 if none); sum is sumID(k,
// id), for the checksum of an entry inserted for it. Call with mu.
func (t *Table) find(k Kind, id string) (at int, w uint64, free int, sum uint32) {
	free = -1
	i, sum := hashKey(k, id, t.slots)
	for p := 0; p < maxProbe && p < t.slots; p++ {
		w := atomic.LoadUint64(t.word(i))
		switch {
		case w == wordEmpty:
			if free < 0 {
				free = i
			}
			return -1, 0, free, sum
		case w == wordDeleted:
			if free < 0 {
				free = i
			}
		case wordKind(w) == k:
			sid, spod := t.ids(i)
			// (sid is id: the checksum's start over it is sum.)
			if string(sid) == id && wordSum(w) == sumPod(sum, spod) {
				return i, w, free, sum
			}
		}
		if i++; i == t.slots {
			i = 0
		}
	}
	return -1, 0, free, sum
}

// overflow counts an object that found no slot.
func (t *Table) overflow() { atomic.AddUint64(t.hword(offOverflows), 1) }

// Begin records that an instance is about to hand the author the change
// of (k, id) to state to (Removed for a remove): the entry's pending state,
// cleared by End. A new object is inserted (its state Unknown until End,
// Created for a creation). pod is a container's pod id. The returned slot
// is for End; it is not Valid if nothing could be recorded (counted in
// Overflows when for lack of room; Closed when the record is).
func (t *Table) Begin(k Kind, id, pod string, to State) Slot {
	if t == nil {
		return Slot{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil {
		return Slot{closed: true}
	}
	at, w, free, sum := t.find(k, id)
	if at < 0 {
		return t.beginNew(k, id, pod, to, free, sum)
	}
	if w&lateBit != 0 && to != Unknown && wordState(w) >= to {
		return t.beginHanded(at, w, to)
	}
	nw := stamped(w&^(15<<8)|uint64(to&15)<<8, t.nextSeq(removedPod(k, id, to)))
	if !atomic.CompareAndSwapUint64(t.word(at), w, nw) {
		return Slot{}
	}
	t.own.began(at, nw)
	return Slot{i: at, word: nw}
}

// beginNew is Begin for an object the record does not hold: inserted in
// slot free (its probe path's first free slot, -1 if none), sum being
// sumID(k, id). Call with mu.
func (t *Table) beginNew(k Kind, id, pod string, to State, free int, sum uint32) Slot {
	if to == Removed {
		if k == Pod {
			t.nextSeq(id) // nothing to remove, but a pod goes: a write (see PodsRemovedSince)
		}
		return Slot{}
	}
	if free < 0 || len(id) > maxID || len(pod) > maxID {
		t.overflow()
		return Slot{}
	}
	t.setIDs(free, id, pod)
	_, spod := t.ids(free) // (the id written is id: sum is over it)
	nw := t.withSeq(makeWord(k, Unknown, to, sumPod(sum, spod)))
	atomic.StoreUint64(t.word(free), nw) // last: the ids are in place
	t.own.began(free, nw)
	return Slot{i: free, word: nw}
}

// beginHanded is Begin for the change to of the entry in slot at (word
// w) that a catch-up handed (w is late, its state to or later): reported
// handed. Call with mu.
func (t *Table) beginHanded(at int, w uint64, to State) Slot {
	// A catch-up handed this change (or a later one) already.
	if wordState(w) != to {
		return Slot{handed: true}
	}
	nw := t.withSeq(w&^(lateBit|15<<8) | uint64(to&15)<<8)
	if !atomic.CompareAndSwapUint64(t.word(at), w, nw) {
		return Slot{handed: true}
	}
	t.own.began(at, nw)
	return Slot{i: at, word: nw, handed: true}
}

// EndLate is End for a change a catch-up handed: the entry is marked
// late (see Entry.Late), and a removed one stays, as Removed, until the
// next catch-up drops it.
func (t *Table) EndLate(s Slot) {
	if t == nil || !s.Valid() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil {
		return
	}
	delete(t.own.begun, s.i)
	w := s.word
	nw := w&^(15<<8|15<<4) | uint64(wordPending(w)&15)<<4 | lateBit
	atomic.CompareAndSwapUint64(t.word(s.i), w, nw)
}

// End records that the change Begin recorded was acted on: the entry's
// state becomes the pending one, or the entry goes for a remove. It does
// nothing if the entry changed since Begin (another instance moved it on).
func (t *Table) End(s Slot) {
	if t == nil || !s.Valid() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil {
		return
	}
	delete(t.own.begun, s.i)
	t.settle(s.i, s.word)
}

// settle makes the pending change of slot i (word w) its state, or frees
// it for a remove. Call with mu.
func (t *Table) settle(i int, w uint64) bool {
	to := wordPending(w)
	var nw uint64
	if to == Removed {
		nw = t.freed(i)
	} else {
		nw = w&^(15<<8|15<<4) | uint64(to&15)<<4
	}
	return atomic.CompareAndSwapUint64(t.word(i), w, nw)
}

// freed is the word for a slot that goes: empty if the next slot is
// empty (no probe path goes through it), else deleted.
func (t *Table) freed(i int) uint64 {
	next := i + 1
	if next == t.slots {
		next = 0
	}
	if atomic.LoadUint64(t.word(next)) == wordEmpty {
		return wordEmpty
	}
	return wordDeleted
}

// Resolve settles the pending change of (k, id), as End would: the
// instance that took over from one that died inside that change's handler
// decided it (acted on it again, or declared it in doubt and did not).
// It reports whether there was such a change.
func (t *Table) Resolve(k Kind, id string) bool {
	if !t.lock() {
		return false
	}
	defer t.mu.Unlock()
	at, w, _, _ := t.find(k, id)
	if at < 0 || wordPending(w) == Unknown {
		return false
	}
	delete(t.own.begun, at)
	return t.settle(at, w)
}

// Set makes (k, id)'s state st (inserting it with pod if absent), or
// removes it for Removed: the catch-up bringing the record in line with
// the runtime's list. A state only moves forward (created, running,
// stopped); Set to an earlier state than the recorded one does nothing.
// It reports false if the object could not be recorded.
func (t *Table) Set(k Kind, id, pod string, st State) bool {
	if !t.lock() {
		return false
	}
	defer t.mu.Unlock()
	at, w, free, sum := t.find(k, id)
	if at < 0 {
		if st == Removed {
			return true
		}
		if free < 0 || len(id) > maxID || len(pod) > maxID {
			t.overflow()
			return false
		}
		t.setIDs(free, id, pod)
		_, spod := t.ids(free) // (the id written is id: sum is over it)
		atomic.StoreUint64(t.word(free), t.withSeq(makeWord(k, st, Unknown, sumPod(sum, spod))))
		return true
	}
	if st != Removed && wordState(w) >= st {
		if wordPending(w) != Unknown && wordPending(w) <= wordState(w) {
			atomic.CompareAndSwapUint64(t.word(at), w, w&^(15<<8))
		}
		return true
	}
	var nw uint64
	if st == Removed {
		t.nextSeq(removedPod(k, id, st)) // a write: see PodsRemovedSince
		nw = t.freed(at)
	} else {
		nw = t.withSeq(w&^(15<<8|15<<4) | uint64(st&15)<<4)
	}
	atomic.CompareAndSwapUint64(t.word(at), w, nw)
	return true
}

// Entries returns every live entry, and how many slots were unreadable
// (a state word whose checksum does not match its ids: a write this
// build cannot explain). The order is the table's.
func (t *Table) Entries() (entries []Entry, unreadable int) {
	if !t.lock() {
		return nil, 0
	}
	defer t.mu.Unlock()
	for i := 0; i < t.slots; i++ {
		w := atomic.LoadUint64(t.word(i))
		if w == wordEmpty || w == wordDeleted {
			continue
		}
		id, pod := t.ids(i)
		k := wordKind(w)
		if w&liveBit == 0 || (k != Container && k != Pod) || wordSum(w) != checksum(k, id, pod) {
			unreadable++
			continue
		}
		e := Entry{Kind: k, ID: string(id), PodID: string(pod),
			State: wordState(w), Pending: wordPending(w), Late: w&lateBit != 0, Seq: wordSeq(w)}
		e.Mine = e.Pending != Unknown && t.own.begun[i] == w
		entries = append(entries, e)
	}
	return entries, unreadable
}

// Drop frees every unreadable slot (see Entries); the catch-up calls it
// once it has declared them.
func (t *Table) Drop() {
	if !t.lock() {
		return
	}
	defer t.mu.Unlock()
	atomic.StoreUint64(t.hword(offPods), 0) // a pod dropped is not known any more
	for i := 0; i < t.slots; i++ {
		w := atomic.LoadUint64(t.word(i))
		if w == wordEmpty || w == wordDeleted {
			continue
		}
		id, pod := t.ids(i)
		k := wordKind(w)
		if w&liveBit == 0 || (k != Container && k != Pod) || wordSum(w) != checksum(k, id, pod) {
			atomic.CompareAndSwapUint64(t.word(i), w, wordDeleted)
		}
	}
}
