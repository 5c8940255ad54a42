package plugin

import (
	"net"
	"path/filepath"
	"testing"
)

// TestPeerGoneSeesACloseBehindUnreadData: the runtime's close is seen at
// once, while a request it sent before is still unread (a handler that
// would run late, for a request read after the process was resumed).
func TestPeerGoneSeesACloseBehindUnreadData(t *testing.T) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	w := newWatchedSocket(c)
	defer w.Close()
	runtime, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Write([]byte("a request")); err != nil {
		t.Fatal(err)
	}
	if w.peerGone() {
		t.Fatal("peer gone while the runtime's side is open")
	}
	runtime.Close()
	if !w.peerGone() {
		t.Fatal("the runtime closed its side with a request unread: not seen")
	}
}
