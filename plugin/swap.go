package plugin

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
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
//     then closes that one too.

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
	c, err := p.connectWith(ctx, func(a *adapter) {
		a.replaces = old
		if quiet {
			a.quiet = true
			a.closed.Store(true) // acts on nothing, whatever the role
		}
	})
	if err != nil {
		return nil, err
	}
	wait := time.NewTimer(p.registrationTimeout())
	defer wait.Stop()
	select {
	case <-old.closed:
		// Replaced; the new connection's Synchronize is returning.
		select {
		case <-c.synced:
			return c, nil
		case <-c.closed:
			err = fmt.Errorf("the new connection closed while it replaced the old one")
		case <-wait.C:
			err = fmt.Errorf("the new connection was not synchronized within %v", p.registrationTimeout())
		}
	case <-c.closed:
		err = fmt.Errorf("the new connection closed before it replaced the old one")
	case <-wait.C:
		err = fmt.Errorf("the new connection was not synchronized within %v", p.registrationTimeout())
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.disconnect(c)
	return nil, err
}

// registrationTimeout bounds how long a replacement may take to be
// synchronized.
func (p *Plugin) registrationTimeout() time.Duration { return 2 * api.DefaultPluginRegistrationTimeout }

// stopQuietly closes c so that the runtime sees no request fail: from
// inside the Synchronize of a quiet connection, which it then closes. If
// that cannot be done, c is closed plainly.
func (p *Plugin) stopQuietly(ctx context.Context, c *conn) {
	select {
	case <-c.closed: // already gone
		p.disconnect(c)
		return
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, p.registrationTimeout())
	defer cancel()
	q, err := p.replace(ctx, c, true)
	if err != nil {
		p.log.WithError(err).Warn("could not close the runtime connection quietly; closing it plainly")
		p.disconnect(c)
		return
	}
	p.disconnect(c)
	// The runtime has q's Synchronize answer in a moment and appends it;
	// closing q before would fail that request. q is subscribed to
	// quietEvent only, so closing it later disturbs nothing.
	time.AfterFunc(quietLinger, func() { p.closeQuietly(q) })
}

// quietLinger is how long a quiet connection stays after its Synchronize
// returned, for the runtime to take the answer.
const quietLinger = 100 * time.Millisecond

// closeQuietly closes c from inside the Synchronize of another connection
// (no request to c can be in flight then) and returns once the runtime has
// marked c closed, so that it sends c no further request. It shuts down
// only the sending side of c's socket: the runtime reads the end, marks the
// plugin closed, then closes its side, which c's socket reads as its end
// (watchedSocket). Without the socket (an author's dialer), or
// if the runtime does not answer in time, c is closed plainly.
func (p *Plugin) closeQuietly(c *conn) {
	c.adapter.closed.Store(true)
	if sock := c.socket.Load(); sock != nil {
		if err := sock.CloseWrite(); err == nil {
			t := time.NewTimer(quietCloseWait)
			select {
			case <-sock.peerClosed:
				// The runtime's multiplexer closed its side; its request
				// client marks the plugin closed a moment later, when its
				// reader is scheduled. Keep the runtime waiting for this
				// Synchronize that long, so no event is sent to c first.
				time.Sleep(closeSettle)
			case <-t.C:
				p.log.Warn("the runtime did not close a replaced connection in time")
			}
			t.Stop()
		}
	}
	p.disconnect(c)
}

// watchedSocket is a runtime connection's socket that tells when the
// runtime has closed its side: the stub's reads then end.
type watchedSocket struct {
	*net.UnixConn
	peerClosed chan struct{}
	once       sync.Once
}

// Read reads as the socket does and notes the end of the runtime's side.
func (w *watchedSocket) Read(b []byte) (int, error) {
	n, err := w.UnixConn.Read(b)
	if err != nil {
		w.once.Do(func() { close(w.peerClosed) })
	}
	return n, err
}

// closeSettle is how long the runtime gets to mark a closed connection
// closed (see closeQuietly); scheduling a goroutine takes microseconds,
// milliseconds on a loaded machine (at load 50 on 2 cores, 5 ms was
// once too short: the runtime sent one more request and logged it failed).
const closeSettle = 20 * time.Millisecond

// quietCloseWait bounds the wait for the runtime to notice a quiet close;
// it notices as soon as its reader is scheduled.
const quietCloseWait = 100 * time.Millisecond

// requestCatchUp asks Run to replace the connection so that the author
// gets the containers nobody processed (see replace). Must not block.
func (p *Plugin) requestCatchUp() {
	select {
	case p.catchUp <- struct{}{}:
	default: // one is pending already
	}
}
