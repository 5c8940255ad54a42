// Package kithook lets the test kit (plugin/plugintest) crash and freeze
// plugin instances that run in the test process, as SIGKILL and SIGSTOP
// would a plugin's process. The harness (package plugin) and the handover
// service (package internal/protocol) look their instance up here by its handover
// socket path; in a production binary nothing is registered, every lookup
// returns nil, and the methods of a nil *Instance do nothing.
package kithook

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/containerd/ttrpc"
)

// Instance is the kit's control over one plugin instance.
type Instance struct {
	crashed atomic.Bool
	dead    chan struct{} // closed by Crash
	kill    sync.Once

	mu      sync.Mutex
	thawed  chan struct{}                    // nil when not frozen; closed by Thaw or Crash
	wrap    func(net.Conn) (net.Conn, error) // see WrapConn
	onCrash []func()                         // see OnCrash
}

// OnCrash registers f to run when the instance crashes, right after it is
// marked crashed and before its sockets close (see Crash): what a killed
// process's memory stops doing at once (its writes to shared files) goes
// through it.
func (h *Instance) OnCrash(f func()) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onCrash = append(h.onCrash, f)
}

var registry sync.Map // handover socket path -> *Instance

// Register returns the control of the instance whose handover socket is
// at socket, registering it first if needed. Register before the instance
// is created: its handover service is set up once, at creation.
func Register(socket string) *Instance {
	h, _ := registry.LoadOrStore(socket, &Instance{dead: make(chan struct{})})
	return h.(*Instance)
}

// Unregister forgets the instance at socket.
func Unregister(socket string) { registry.Delete(socket) }

// Lookup returns the control of the instance at socket, nil if none.
func Lookup(socket string) *Instance {
	if h, ok := registry.Load(socket); ok {
		return h.(*Instance)
	}
	return nil
}

// SetConnWrapper sets what WrapConn does with the instance's runtime
// connections.
func (h *Instance) SetConnWrapper(w func(net.Conn) (net.Conn, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wrap = w
}

// WrapConn passes a runtime connection the harness has just dialed through
// the kit (which can then cut or freeze it); for a nil instance, or with no
// wrapper set, it returns c.
func (h *Instance) WrapConn(c net.Conn) (net.Conn, error) {
	if h == nil {
		return c, nil
	}
	h.mu.Lock()
	w := h.wrap
	h.mu.Unlock()
	if w == nil {
		return c, nil
	}
	return w(c)
}

// ErrCrashed is returned by the handover service of a crashed instance.
var ErrCrashed = errors.New("instance crashed (test kit)")

// Crash marks the instance as crashed: it must end without a handover
// (Crashed), its writes to shared files stop (OnCrash), then every wait in
// Wait ends, and every request its handover service is handling ends with
// ErrCrashed at once, as the sockets of a killed process close (a peer's
// Watch learns of the crash then, not when the instance's Run has wound
// down). The writes stop first: a killed process writes nothing after its
// peers can see it gone. (In the other order a handler of the instance
// recorded a pod's run in the lifecycle record after a survivor, promoted
// by its Watch, had noted the gap: the gap's catch-up read the pod as
// recorded after the gap and handed its run to nobody, the demo, -faults
// 10: containerd 6075, gap 4162 and 4183.)
func (h *Instance) Crash() {
	if h == nil {
		return
	}
	h.crashed.Store(true)
	h.mu.Lock()
	fs := h.onCrash
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
	h.kill.Do(func() { close(h.dead) })
	h.Thaw()
}

// Crashed reports whether Crash was called.
func (h *Instance) Crashed() bool { return h != nil && h.crashed.Load() }

// Freeze makes Wait block until Thaw or Crash.
func (h *Instance) Freeze() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.thawed == nil {
		h.thawed = make(chan struct{})
	}
}

// Thaw ends a Freeze.
func (h *Instance) Thaw() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.thawed != nil {
		close(h.thawed)
		h.thawed = nil
	}
}

// Frozen reports whether the instance is frozen.
func (h *Instance) Frozen() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.thawed != nil
}

// Wait blocks while the instance is frozen, or until ctx ends.
func (h *Instance) Wait(ctx context.Context) {
	if h == nil {
		return
	}
	h.mu.Lock()
	ch := h.thawed
	h.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// Step wraps a protocol step callback (protocol.Config.Failpoint): while
// the instance is frozen a step waits, as the frozen process would, then
// next runs (if set). For a nil instance it returns next.
func Step[S any](h *Instance, next func(S)) func(S) {
	if h == nil {
		return next
	}
	return func(s S) {
		h.Wait(context.Background())
		if next != nil {
			next(s)
		}
	}
}

// ServerOptions are the options of the instance's handover ttrpc server:
// while frozen, requests are neither handled nor answered. None for a nil
// instance.
func (h *Instance) ServerOptions() []ttrpc.ServerOpt {
	if h == nil {
		return nil
	}
	return []ttrpc.ServerOpt{ttrpc.WithUnaryServerInterceptor(
		func(ctx context.Context, um ttrpc.Unmarshaler, _ *ttrpc.UnaryServerInfo, m ttrpc.Method) (interface{}, error) {
			// A frozen process reads no request, even one its caller gave
			// up on, and answers none.
			h.Wait(context.Background())
			if h.Crashed() {
				return nil, ErrCrashed
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { // a crash ends the request at once
				select {
				case <-h.dead:
					cancel()
				case <-ctx.Done():
				}
			}()
			resp, err := m(ctx, um)
			h.Wait(context.Background())
			if h.Crashed() {
				return nil, ErrCrashed
			}
			return resp, err
		})}
}
