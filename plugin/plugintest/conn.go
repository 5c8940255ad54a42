package plugintest

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/nri-handover/nri-handover/internal/kithook"
)

// conns dials an instance's runtime connections and can cut them (a crash)
// or stop their traffic (a freeze): a frozen connection reads and writes
// nothing until thawed, as the connection of a stopped process.
type conns struct {
	h *kithook.Instance

	mu   sync.Mutex
	open []net.Conn
}

// dial is the NRI stub's dialer (stub.WithDialer).
func (cs *conns) dial(path string) (net.Conn, error) {
	if cs.h.Crashed() {
		return nil, fmt.Errorf("plugintest: dial %s: instance crashed", path)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("plugintest: dial %s: %w", path, err)
	}
	fc := &freezableConn{Conn: c, h: cs.h}
	cs.mu.Lock()
	cs.open = append(cs.open, fc)
	cs.mu.Unlock()
	if cs.h.Crashed() { // crashed meanwhile
		fc.Close()
	}
	return fc, nil
}

// cut closes every connection, as the kernel does when a process dies.
func (cs *conns) cut() {
	cs.mu.Lock()
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

type freezableConn struct {
	net.Conn
	h *kithook.Instance
}

func (c *freezableConn) Read(b []byte) (int, error) {
	c.h.Wait(context.Background())
	n, err := c.Conn.Read(b)
	c.h.Wait(context.Background()) // what arrived meanwhile is read after the thaw
	if c.h.Crashed() {
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *freezableConn) Write(b []byte) (int, error) {
	c.h.Wait(context.Background())
	if c.h.Crashed() {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}
