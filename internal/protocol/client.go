package protocol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/containerd/ttrpc"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// ErrNoInstance means nothing serves a socket path: the file is missing, or
// it is a stale socket left by an instance that is gone.
var ErrNoInstance = errors.New("no instance serves this socket")

// Client is a connection to one instance's handover service.
type Client struct {
	api.HandoverService
	rpc    *ttrpc.Client
	closed chan struct{}
}

// Dial connects to the handover service at path. It returns an error
// wrapping ErrNoInstance when no instance listens there.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) ||
			errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("dial %s: %w (%v)", path, ErrNoInstance, err)
		}
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	c := &Client{closed: make(chan struct{})}
	c.rpc = ttrpc.NewClient(conn, ttrpc.WithOnClose(func() { close(c.closed) }))
	c.HandoverService = api.NewHandoverClient(c.rpc)
	return c, nil
}

// Closed is closed when the connection ends, for example because the serving
// instance exited.
func (c *Client) Closed() <-chan struct{} { return c.closed }

// Close ends the connection.
func (c *Client) Close() error { return c.rpc.Close() }
