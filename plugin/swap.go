package plugin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"
)

// A runtime connection is closed without the runtime ever seeing a request
// fail only if no request to it is in flight, and none is sent before the
// runtime has noticed the close. The one moment the runtime sends no event
// to any plugin is while it synchronizes a newly connected one (it holds
// its sync lock; containerd's CRI paths block plugin sync around every
// event, CRI-O serializes its NRI calls with the sync). So the harness
// closes an old connection from inside the Synchronize of a new one: the
// old connection is replaced "make before break".
//
//   - catch-up: after this instance became owner outside any Synchronize
//     (its previous owner died or hung), a new connection claims (the owner
//     keeps its role), hands the author's Synchronize every container no
//     instance stamped (those created while nobody acted), and closes the
//     old connection; the runtime then sends every event to the new one.
//   - quiet stop: a stopping instance opens a connection subscribed to one
//     rare event (quietEvent) whose Synchronize closes the main connection,
//     then closes that one too, once the runtime has taken its answer
//     (closeAfterAnswer).

// quietEvent is the one event a connection used only to close another one
// subscribes to (a plugin must subscribe to some): containerd sends it only
// after an in-place resize of a pod's resources.
const quietEvent = api.Event_POST_UPDATE_POD_SANDBOX

// replace opens a new runtime connection that takes over from old inside
// its Synchronize. quiet: the new connection acts on nothing and is
// subscribed to quietEvent only (to stop); otherwise it claims as any
// connection does and hands the author the unstamped containers (to catch
// up). It returns the new connection once old is closed, or an error (old
// is then still in use).
func (p *Plugin) replace(ctx context.Context, old *conn, quiet bool) (*conn, error) {
	if quiet {
		return p.replaceAlso(ctx, old, nil)
	}
	return p.replaceWith(ctx, old, false, nil)
}

// replaceAlso is a quiet replace that also closes also (if not nil) from
// inside the quiet connection's Synchronize.
func (p *Plugin) replaceAlso(ctx context.Context, old, also *conn) (*conn, error) {
	return p.replaceWith(ctx, old, true, also)
}

// replaceWith is replace; a quiet connection also closes also.
func (p *Plugin) replaceWith(ctx context.Context, old *conn, quiet bool, also *conn) (*conn, error) {
	c, err := p.connectWith(ctx, func(a *adapter) {
		a.replaces = old
		a.also = also
		if quiet {
			a.quiet = true
			a.closed.Store(true) // acts on nothing, whatever the role
		}
	})
	if err != nil {
		p.keepServing(old)
		return nil, err
	}
	bound := replaceWait
	if quiet {
		bound = quietSyncWait // a stop must end soon
	}
	wait := time.NewTimer(bound)
	defer wait.Stop()
	slow := time.NewTimer(p.registrationTimeout())
	defer slow.Stop()
	var stopping, syncedAtStop <-chan struct{} // see catchUpNow
	if !quiet && p.runCtx != nil {
		stopping = p.runCtx.Done()
	}
	// synced: c's Synchronize returned. If it left old to close inside
	// c's first event and old owns no register (closeRetiring), c serves
	// from here on: old goes with c's first event, or with c (a stop,
	// stopQuietly; c lost, Run serves old again).
	var synced <-chan struct{}
	if !quiet {
		synced = c.synced
	}
	registered := time.Now() // the stub's Start returns once the runtime configured c
	var queued <-chan time.Time
	if !quiet {
		t := time.NewTimer(queuedAfter)
		defer t.Stop()
		queued = t.C
	}
	for err == nil {
		select {
		case <-queued:
			// Registered, not synchronized: the runtime holds c's
			// Synchronize back. A leaving owner may be what it waits
			// for (see protocol's TakeOverQueued): ask it to yield now.
			queued = nil
			go p.takeOverQueued(c, registered)
		case <-stopping:
			// Stopping: the catch-up's work is done once the new
			// connection's Synchronize has returned; the old one may
			// still own the cut (closed at the stop, see stopQuietly).
			stopping, syncedAtStop = nil, c.synced
		case <-syncedAtStop:
			return c, nil
		case <-synced:
			synced = nil
			if c.adapter.retiring.Load() == old && !p.coord.OwnsCut(old.adapter.tag) {
				return c, nil
			}
		case <-old.closed:
			// Replaced; the new connection's Synchronize is returning.
			select {
			case <-c.synced:
				return c, nil
			case <-c.closed:
				err = fmt.Errorf("the new connection closed while it replaced the old one")
			case <-wait.C:
				err = fmt.Errorf("the new connection was not synchronized within %v", bound)
			}
		case <-c.closed:
			err = fmt.Errorf("the new connection closed before it replaced the old one")
		case <-slow.C:
			p.log.WithField("waited", p.registrationTimeout().String()).Warn(
				"the runtime has not synchronized the new connection yet (a CRI call holds its plugin sync); the old one keeps serving meanwhile")
		case <-wait.C:
			err = fmt.Errorf("the new connection was not synchronized within %v", bound)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	p.disconnect(c)
	p.keepServing(old)
	return nil, err
}

// replaceWait bounds how long a replacement waits for the runtime to
// synchronize it while the old connection serves on. The runtime registers
// a connection at once but synchronizes it only once no CRI call holds its
// plugin-sync block, and containerd's CRI StopContainer holds that block
// for a container's whole grace period (containerd issue 14083): on a busy
// node a Synchronize queues for tens of seconds (17 s measured in the
// Kubernetes suite). Giving up sooner gains nothing and loses much: the old
// connection serves meanwhile, and a new attempt queues behind the same
// stops, stalling the node's CRI calls once more.
const replaceWait = 2 * time.Minute

// queuedAfter is how long a replacement connection that the runtime has
// registered waits for its Synchronize before this instance tells a
// leaving owner that it is queued (see takeOverQueued). The runtime
// synchronizes a connection right after registering it unless a CRI call
// holds its plugin-sync block; the owner then yields and exits without
// waiting for a claim that may need its exit first. Shorter is less of a
// CRI stall on the node; long enough that a runtime that is merely slow
// still synchronizes first and the handover is the usual fenced one.
const queuedAfter = 250 * time.Millisecond

// takeOverQueued tells a leaving owner, if there is one, that c has waited
// since registered for its Synchronize: see queuedAfter. c may have been
// synchronized meanwhile (the coordinator then finds the claim begun or
// made, and does nothing).
func (p *Plugin) takeOverQueued(c *conn, registered time.Time) {
	select {
	case <-c.synced:
		return
	case <-c.closed:
		return
	default:
	}
	if p.coord.TakeOverQueued(context.Background(), c.adapter.tag, time.Since(registered)) {
		p.log.WithField("waited", time.Since(registered).Round(time.Millisecond).String()).Info(
			"owner: the leaving owner yielded while the runtime holds this instance's new connection back; the connection in the runtime's chain acts until the new one is synchronized")
	}
}

// keepServing makes old, still open after a replacement failed, the
// connection the plugin's own calls (UpdateContainers, readiness) use
// again: connectWith made the replacement that connection, and its
// disconnect left none.
func (p *Plugin) keepServing(old *conn) {
	select {
	case <-old.closed:
		return
	default:
	}
	p.stubMu.Lock()
	if p.stub == nil {
		p.stub = old.stub
		p.configured = true
	}
	p.stubMu.Unlock()
}

// quietSyncWait bounds a stopping instance's wait for the runtime to
// synchronize its quiet connection. On containerd under Kubernetes the wait
// is usually futile and harmful: the kubelet's CRI StopContainer of the
// stopping pod's own container holds the plugin-sync block until the
// process exits (containerd issue 14083), so the quiet connection cannot
// be synchronized before the stop ends, and its queued synchronization
// stalls every CRI call on the node meanwhile (the Kubernetes suite
// measured RunPodSandbox at 3.1 s mean during rollouts, 0.13 s without).
// So the stop gives up soon and closes the connection plainly; where the
// runtime can synchronize (a process stopped by a signal, not through CRI)
// it takes milliseconds.
const quietSyncWait = 2 * time.Second

// registrationTimeout bounds how long a replacement may take to be
// synchronized.
func (p *Plugin) registrationTimeout() time.Duration { return 2 * api.DefaultPluginRegistrationTimeout }

// stopQuietly closes c so that the runtime sees no request fail: from
// inside the Synchronize of a quiet connection q, which it then closes
// behind q's answer (closeAfterAnswer). If that cannot be done, c is
// closed plainly. After a yield to a successor whose connection the
// runtime holds back (the coordinator's YieldedToQueued) no quiet
// connection is tried: c is closed once its requests are answered
// (closeAnswered). When it returns, the process may exit.
//
// That is what keeps c out of the runtime's chain: the runtime marks c
// closed inside q's Synchronize, but drops closed plugins from its chain
// only when it appends a synchronized one (or at the end of an event). An
// instance that exited as soon as its Synchronize handler returned lost
// the answer with the process; the runtime failed q's Synchronize ("failed
// to synchronize plugin: ttrpc: closed"), appended nothing, and sent its
// next event of any kind to the closed c: "closing plugin ..., failed to
// handle ... request: ttrpc: closed" (each of the 9 such lines in 70
// handovers on containerd v2.2.9 followed a failed quiet Synchronize).
func (p *Plugin) stopQuietly(ctx context.Context, c *conn) {
	select {
	case <-c.closed: // already gone
		p.disconnect(c)
		return
	default:
	}
	// A connection c replaced but that still owned the cut (a catch-up
	// made at the stop, see replace) is closed with c.
	also := c.adapter.retiring.Swap(nil)
	if p.coord.YieldedToQueued() {
		// The successor's new connection is queued at the runtime ahead of
		// any quiet one (containerd registers one connection at a time and
		// the next only after the previous is synchronized), and its
		// synchronization may wait for this very process to exit (its
		// pod's CRI StopContainer): a quiet stop could only wait
		// quietSyncWait in vain. While a synchronization is queued, no CRI
		// call sends the plugins an event, so a plain close disturbs none.
		p.log.Info("stopping: the successor's runtime connection is queued; closing this one without a quiet connection")
		p.closeAnswered(c)
		if also != nil {
			p.closeAnswered(also)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, quietSyncWait)
	defer cancel()
	q, err := p.replaceAlso(ctx, c, also)
	if err != nil {
		p.log.WithError(err).Warn("could not close the runtime connection quietly; closing it plainly")
		p.disconnect(c)
		if also != nil {
			p.disconnect(also)
		}
		return
	}
	p.disconnect(c)
	if also != nil {
		p.disconnect(also)
	}
	p.closeAfterAnswer(q)
}

// closeAnswered closes c outside any Synchronize once the stub has
// answered every request of the runtime's it has read: an answer of a
// handler that acted (a stamp, an adjustment) is never cut off. c acts on
// nothing from the start, so a request that arrives while it waits, or
// that the close cuts off (the runtime then logs "closing plugin ...";
// containerd sends none while a synchronization is queued but its
// task-exit StopContainer), loses nothing. The runtime ends c from its
// request client (endAtRuntime), as closeQuietly does, so that it marks c
// closed before the socket ends.
func (p *Plugin) closeAnswered(c *conn) {
	c.adapter.closed.Store(true)
	if sock := c.socket.Load(); sock != nil {
		if err := sock.awaitAnswered(quietCloseWait); err != nil {
			p.log.WithError(err).Warn("closing a runtime connection with a request unanswered")
		}
		if err := sock.endAtRuntime(0, quietCloseWait); err != nil {
			p.log.WithError(err).Warn("the runtime did not end a connection from its request client; closing it at the socket")
			sock.closeAtSocket(quietCloseWait, closeSettle)
		}
	}
	p.disconnect(c)
}

// closeAfterAnswer closes the quiet connection q once the runtime has had
// time to take its Synchronize answer, with q's end frame (endAtRuntime)
// behind the answer, so that the runtime marks q closed before its socket
// ends. q is subscribed to quietEvent only: closing it between events
// disturbs nothing.
//
// The runtime sends a plugin nothing after its Synchronize, so no signal
// says that its Synchronize call has taken the answer: the end frame right
// behind the answer is read after it, but if the runtime's goroutine
// waiting for the answer is not yet waiting when its ttrpc client reads
// both, it sees the answer and the ended client at once and may pick the
// latter ("failed to synchronize plugin: ttrpc: closed"; seen in-process at
// load 40). So q lingers quietLinger after its answer was written. (An
// empty UpdateContainers would prove the answer taken on containerd, whose
// plugin sync holds the NRI lock that updateFromPlugin takes, but NRI
// v0.11.0 takes its own lock before containerd's there, while every event
// takes them the other way round: it deadlocked containerd v2.2.9 in the
// e2e run.)
func (p *Plugin) closeAfterAnswer(q *conn) {
	q.adapter.closed.Store(true)
	sock := q.socket.Load()
	if sock == nil {
		time.Sleep(quietLinger)
		p.disconnect(q)
		return
	}
	if err := sock.awaitFrames(q.adapter.answerFrames.Load(), quietCloseWait); err != nil {
		p.log.WithError(err).Warn("a quiet connection's Synchronize answer was not written in time")
	}
	time.Sleep(quietLinger)
	if err := sock.endAtRuntime(0, quietCloseWait); err != nil {
		p.log.WithError(err).Warn("the runtime did not end a quiet connection after its Synchronize; closing it at the socket")
		sock.closeAtSocket(quietCloseWait, 0)
	}
	p.disconnect(q)
}

// quietLinger is how long a quiet connection stays after its Synchronize
// answer was written, for the runtime's Synchronize call to take it.
const quietLinger = 100 * time.Millisecond

// awaitFrames waits, up to timeout, until the stub has written more than
// after frames on the plugin service's stream.
func (w *watchedSocket) awaitFrames(after uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if w.pluginFrames() > after {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d frames after %v", w.pluginFrames(), timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// closeQuietly closes c from inside the Synchronize of another connection,
// or from inside an event of another one that the runtime called after c
// (no request to c is in flight then), and returns once the runtime has
// marked c closed. That mark must come before the runtime ends the
// Synchronize or event in progress: containerd's NRI (v0.11.0 in v2.2.9,
// v0.12.3 in v2.4.2) drops closed plugins from its chain only at the end of
// an event or when it appends a synchronized plugin, and it still sends
// every later event to a plugin that is closed but not yet dropped, which
// fails at once with "ttrpc: closed" and is logged as an error ("closing
// plugin ..., failed to handle ... request"), or fails the request with
// NRI's FailRequest policy.
//
// So the runtime is made to end the connection from its request client,
// not from its multiplexer: endAtRuntime sends a frame on the plugin
// service's stream that the runtime's ttrpc client cannot read, which ends
// that client; its on-close marks the plugin closed and only then closes
// the runtime's multiplexer and socket. The end of c's socket, read here,
// therefore follows the mark. Shutting down the socket's sending side
// instead (what the fallback does) lets the multiplexer close the socket
// first, and the mark comes when the request client's reader is
// scheduled: later, on a loaded node, than the end of the Synchronize.
func (p *Plugin) closeQuietly(c *conn) {
	c.adapter.closed.Store(true)
	if sock := c.socket.Load(); sock != nil {
		if err := sock.endAtRuntime(0, quietCloseWait); err != nil {
			p.log.WithError(err).Warn("the runtime did not end a replaced connection from its request client; closing it at the socket")
			sock.closeAtSocket(quietCloseWait, closeSettle)
		}
	}
	p.disconnect(c)
}

// watchedSocket is a runtime connection's socket that tells when the
// runtime has closed its side (the stub's reads then end), and that can
// end the runtime's request client (endAtRuntime). It follows the
// multiplexer's framing of what the stub writes, so that a frame of its
// own goes in between two of the stub's.
//
// The multiplexer writes a frame as two writes, its header and then its
// payload, under its own write lock. The header is held back and goes out
// with the payload in one system call (writeHeld): the same bytes in the
// same order, one write instead of two, and the runtime reads the frame
// at once instead of waking for the header alone.
type watchedSocket struct {
	*net.UnixConn
	peerClosed chan struct{}
	once       sync.Once

	sem      chan struct{} // held while writing: one slot
	framer   muxFramer     // the stub's frames written so far
	boundary chan struct{} // closed at the end of the stub's frame in progress
	sealed   bool          // the runtime's client was ended: write nothing more
	// held: hdr is a frame header the stub wrote and that is not sent
	// yet (see writeHeld); out is the vector that sends it, empty between
	// writes.
	held bool
	hdr  [muxHeaderLen]byte
	out  net.Buffers
	vec  [2][]byte

	// in follows what the runtime writes (read by the multiplexer's one
	// reader goroutine only); requests and answers count the runtime's
	// requests read and the stub's answers written on the plugin
	// service's stream (see unanswered).
	in                muxFramer
	requests, answers atomic.Uint64
	// ahead is what one read of the socket brought beyond what the stub
	// asked for (the multiplexer reads a frame's header, then its
	// payload): ahead, a part of aheadBuf, is handed to the stub first,
	// then aheadErr. Read by the multiplexer's one reader goroutine only,
	// as in.
	ahead    []byte
	aheadErr error
	aheadBuf [readAhead]byte
}

// readAhead is how much Read asks of the socket for a read of less: a
// frame's header and, if it has arrived, its payload (an event's request
// is a few hundred bytes to a few KiB), with one system call.
const readAhead = 4096

// pluginFrames returns how many frames the stub has written on the plugin
// service's stream (its answers to the runtime's requests).
func (w *watchedSocket) pluginFrames() uint64 {
	w.sem <- struct{}{}
	defer func() { <-w.sem }()
	return w.framer.plugin
}

// newWatchedSocket watches conn.
func newWatchedSocket(conn *net.UnixConn) *watchedSocket {
	w := &watchedSocket{UnixConn: conn, peerClosed: make(chan struct{}), sem: make(chan struct{}, 1)}
	w.in.msgs = ttrpcCounter{count: func(typ byte) {
		if typ == ttrpcRequest {
			w.requests.Add(1)
		}
	}}
	w.framer.msgs = ttrpcCounter{count: func(typ byte) {
		if typ == ttrpcResponse {
			w.answers.Add(1)
		}
	}}
	return w
}

// Read reads as the socket does and notes the end of the runtime's side.
// A read of less than readAhead bytes (and more than none) reads up to
// readAhead from the socket and keeps the rest for the next reads (the
// stub gets the same bytes in the same order; in counts them as the stub
// gets them).
func (w *watchedSocket) Read(b []byte) (int, error) {
	if len(w.ahead) == 0 && len(b) > 0 && len(b) < readAhead {
		n, err := w.UnixConn.Read(w.aheadBuf[:])
		if n == 0 {
			return w.read(nil, n, err)
		}
		w.ahead = w.aheadBuf[:n]
		if err != nil {
			// (A socket's read returns no error with data; kept for the
			// next read, as a reader would get it.)
			w.aheadErr = err
		}
	}
	if len(w.ahead) > 0 {
		n := copy(b, w.ahead)
		w.ahead = w.ahead[n:]
		if len(w.ahead) == 0 && w.aheadErr != nil {
			err := w.aheadErr
			w.aheadErr = nil
			return w.read(b, n, err)
		}
		return w.read(b, n, nil)
	}
	n, err := w.UnixConn.Read(b)
	return w.read(b, n, err)
}

// read notes what a Read hands the stub: n bytes of b, and err.
func (w *watchedSocket) read(b []byte, n int, err error) (int, error) {
	if n > 0 {
		w.in.feed(b[:n])
	}
	if err != nil {
		w.once.Do(func() { close(w.peerClosed) })
	}
	return n, err
}

// unanswered returns how many of the runtime's requests the stub has read
// and not yet answered (the answer fully written).
func (w *watchedSocket) unanswered() int64 {
	return int64(w.requests.Load()) - int64(w.answers.Load())
}

// awaitAnswered waits, up to timeout, until the stub has answered every
// request of the runtime's that it has read: the answers of handlers that
// have returned are written before the connection is closed.
func (w *watchedSocket) awaitAnswered(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if w.unanswered() <= 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d requests of the runtime unanswered after %v", w.unanswered(), timeout)
		}
		time.Sleep(time.Millisecond) // a poll's pause, not a deadline
	}
}

// peerGone reports whether the runtime has closed its side of the
// socket, whether or not the stub has read everything before the end: a
// unix socket reports the peer's close (POLLRDHUP) at once, with data
// still queued. One poll(2) with no wait.
func (w *watchedSocket) peerGone() bool {
	select {
	case <-w.peerClosed:
		return true
	default:
	}
	raw, err := w.UnixConn.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0 {
			gone = true
		}
	})
	return gone
}

// errSealed is what the stub's writes get once the runtime's request
// client was ended.
var errSealed = errors.New("runtime connection ended by the harness")

// Write writes as the socket does, noting where the stub's frames end. A
// frame's header (8 bytes at a frame boundary, announcing a payload) is
// held back until the payload's write (see writeHeld).
func (w *watchedSocket) Write(b []byte) (int, error) {
	w.sem <- struct{}{}
	defer func() { <-w.sem }()
	if w.sealed {
		return 0, errSealed
	}
	if w.held {
		return w.writeHeld(b)
	}
	if len(b) == muxHeaderLen && w.framer.atBoundary() && binary.BigEndian.Uint32(b[4:8]) > 0 {
		copy(w.hdr[:], b)
		w.held = true
		return len(b), nil
	}
	n, err := w.UnixConn.Write(b)
	w.wrote(b[:n])
	return n, err
}

// writeHeld sends the held header and b, its frame's payload (the
// multiplexer's next write), in one system call, and reports how much of
// b was written. A write that fails part way, even within the header,
// leaves a connection the runtime has ended (a unix socket's write fails
// only then, or past endAtRuntime's deadline, after which nothing is
// written). Call with sem held.
func (w *watchedSocket) writeHeld(b []byte) (int, error) {
	w.held = false
	w.vec = [2][]byte{w.hdr[:], b}
	w.out = w.vec[:]
	sent, err := w.out.WriteTo(w.UnixConn) // writev(2)
	w.vec, w.out = [2][]byte{}, nil        // (b is the caller's)
	n := int(sent)
	w.wrote(w.hdr[:min(n, muxHeaderLen)])
	n = max(0, n-muxHeaderLen)
	w.wrote(b[:n])
	return n, err
}

// wrote follows bytes the stub's writes sent; call with sem held.
func (w *watchedSocket) wrote(b []byte) {
	if w.framer.feed(b) && w.boundary != nil {
		close(w.boundary)
		w.boundary = nil
	}
}

// endAtRuntime sends the runtime a frame that ends its request client for
// this connection (see closeQuietly), once the stub has written more than
// after frames on the plugin service's stream (see pluginFrames) and none
// is in progress, then waits until the runtime has closed its side, all
// within timeout. It fails without writing anything if those frames are
// not written in time, and if the runtime does not close its side in time.
//
// The frame: on the plugin service's stream, a payload larger than the
// buffer the runtime's ttrpc client reads into (bufio's 4 KiB); NRI's
// multiplexer fails that read (syscall.ENOMEM, pkg/net/multiplex), and
// ttrpc's client ends on any read error that is not an RPC status. It must
// be sent with no request of the runtime to this connection in flight (the
// client's read is then waiting for a message header). Should a runtime
// ever read it whole, it reads the start of a message longer than the
// frame and waits for the rest: nothing is delivered, and the caller's
// fallback ends the connection.
func (w *watchedSocket) endAtRuntime(after uint64, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case w.sem <- struct{}{}:
		case <-t.C:
			return fmt.Errorf("the stub's write did not end within %v", timeout)
		}
		if w.sealed {
			<-w.sem
			return errors.New("already ended")
		}
		if w.framer.atBoundary() && !w.held && (after == 0 || w.framer.plugin > after) {
			break
		}
		if w.boundary == nil {
			w.boundary = make(chan struct{})
		}
		ch := w.boundary
		<-w.sem
		select {
		case <-ch:
		case <-t.C:
			return fmt.Errorf("the stub's frames were not written within %v", timeout)
		}
	}
	w.sealed = true
	err := w.UnixConn.SetWriteDeadline(deadline)
	if err == nil {
		_, err = w.UnixConn.Write(endFrame)
	}
	<-w.sem
	if err != nil {
		return fmt.Errorf("write the end frame: %w", err)
	}
	select {
	case <-w.peerClosed:
		return nil
	case <-t.C:
		return fmt.Errorf("the runtime did not close its side within %v", timeout)
	}
}

// closeAtSocket ends the connection by shutting down the socket's sending
// side: the runtime's multiplexer reads the end and closes its side. Its
// request client marks the plugin closed when its reader is scheduled,
// after that: settle is how long the caller is kept waiting for it.
func (w *watchedSocket) closeAtSocket(timeout, settle time.Duration) {
	if err := w.CloseWrite(); err != nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.peerClosed:
		time.Sleep(settle)
	case <-t.C:
	}
}

// endFrame is the frame endAtRuntime sends: NRI's multiplexer header
// (stream, length), then a payload that starts as a ttrpc message header
// announcing a message longer than the payload.
var endFrame = func() []byte {
	const payload = 64 << 10 // far beyond the runtime client's 4 KiB read buffer
	b := make([]byte, muxHeaderLen+payload)
	binary.BigEndian.PutUint32(b[0:4], muxPluginService)
	binary.BigEndian.PutUint32(b[4:8], payload)
	binary.BigEndian.PutUint32(b[8:12], 4<<20) // ttrpc: the maximum message length
	return b
}()

// NRI's multiplexer (pkg/net/multiplex): a frame is a 4-byte stream id and
// a 4-byte payload length, then the payload; the runtime is the client of
// the plugin service's stream.
const (
	muxHeaderLen     = 8
	muxPluginService = 1 // multiplex.PluginServiceConn
)

// muxFramer follows the multiplexer's frames through a stream of writes.
type muxFramer struct {
	hdr    [muxHeaderLen]byte
	n      int          // header bytes seen of the frame in progress
	left   uint32       // payload bytes still to come
	id     uint32       // the stream of the frame in progress
	plugin uint64       // frames completed on the plugin service's stream
	msgs   ttrpcCounter // the plugin service's stream's messages
}

// feed takes the bytes written next and reports whether they end at a
// frame boundary.
func (f *muxFramer) feed(b []byte) bool {
	for len(b) > 0 {
		if f.left > 0 {
			k := min(uint32(len(b)), f.left)
			if f.id == muxPluginService {
				f.msgs.feed(b[:k])
			}
			f.left -= k
			b = b[k:]
			f.ended()
			continue
		}
		k := copy(f.hdr[f.n:], b)
		f.n += k
		b = b[k:]
		if f.n == muxHeaderLen {
			f.n, f.left = 0, binary.BigEndian.Uint32(f.hdr[4:8])
			f.id = binary.BigEndian.Uint32(f.hdr[0:4])
			f.ended()
		}
	}
	return f.atBoundary()
}

// ended counts the frame in progress if it has just ended.
func (f *muxFramer) ended() {
	if f.left == 0 && f.id == muxPluginService {
		f.plugin++
	}
}

// atBoundary reports whether no frame is in progress.
func (f *muxFramer) atBoundary() bool { return f.n == 0 && f.left == 0 }

// ttrpc's message header (github.com/containerd/ttrpc, channel.go): the
// payload's length, the stream id, the message type and flags, then the
// payload.
const (
	ttrpcHeaderLen = 10
	ttrpcRequest   = 1
	ttrpcResponse  = 2
)

// ttrpcCounter follows ttrpc messages through the bytes of one stream,
// however they are split, and tells count each message's type once its
// header is complete. A zero counter counts nothing.
type ttrpcCounter struct {
	hdr   [ttrpcHeaderLen]byte
	n     int    // header bytes seen of the message in progress
	left  uint32 // payload bytes still to come
	count func(typ byte)
}

func (t *ttrpcCounter) feed(b []byte) {
	if t.count == nil {
		return
	}
	for len(b) > 0 {
		if t.left > 0 {
			k := min(uint32(len(b)), t.left)
			t.left -= k
			b = b[k:]
			continue
		}
		k := copy(t.hdr[t.n:], b)
		t.n += k
		b = b[k:]
		if t.n == ttrpcHeaderLen {
			t.n, t.left = 0, binary.BigEndian.Uint32(t.hdr[0:4])
			t.count(t.hdr[8])
		}
	}
}

// closeSettle is how long the fallback (closeAtSocket) keeps the runtime
// waiting for its request client to mark a closed connection closed: a
// goroutine's scheduling, milliseconds on a loaded machine. Only the
// fallback waits; endAtRuntime knows.
const closeSettle = 20 * time.Millisecond

// quietCloseWait bounds each wait for the runtime to end a connection: it
// ends it within a millisecond (p50 0.3 ms, max 12 ms over 520 closes at
// load 33-41 on 2 cores; once more than 100 ms), and a wait inside a
// Synchronize or an event must stay well below the runtime's request
// timeout (2 s by default).
const quietCloseWait = 500 * time.Millisecond

// requestCatchUp asks Run to replace the connection so that the author
// gets the containers nobody processed (see replace). Must not block.
func (p *Plugin) requestCatchUp() {
	select {
	case p.catchUp <- struct{}{}:
	default: // one is pending already
	}
}
