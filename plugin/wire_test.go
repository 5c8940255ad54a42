package plugin

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair returns the two ends of a unix stream socket: the stub's,
// watched, and the runtime's.
func socketPair(t *testing.T) (*watchedSocket, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	stub, runtime := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { stub.Close(); runtime.Close() })
	return newWatchedSocket(stub), runtime
}

func muxFrame(id uint32, payload []byte) []byte {
	b := make([]byte, muxHeaderLen, muxHeaderLen+len(payload))
	binary.BigEndian.PutUint32(b[0:4], id)
	binary.BigEndian.PutUint32(b[4:8], uint32(len(payload)))
	return append(b, payload...)
}

// TestHeldHeaderGoesWithItsPayload: a frame's header, written alone as
// the multiplexer does, is sent with its payload, and the end frame waits
// for that payload as for a frame in progress: the runtime reads the
// stub's frame whole, then the end frame.
func TestHeldHeaderGoesWithItsPayload(t *testing.T) {
	w, runtime := socketPair(t)
	first := muxFrame(muxPluginService, []byte("first frame"))
	if n, err := w.Write(first[:muxHeaderLen]); n != muxHeaderLen || err != nil {
		t.Fatalf("header write: %d, %v", n, err)
	}
	ended := make(chan error, 1)
	go func() { ended <- w.endAtRuntime(0, 5*time.Second) }()
	waitFor(t, "the end frame to wait for the held header's payload", func() bool {
		w.sem <- struct{}{}
		defer func() { <-w.sem }()
		return w.boundary != nil
	})
	runtime.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := runtime.Read(make([]byte, 64)); n != 0 {
		t.Fatalf("the runtime read %d bytes of a header held back", n)
	}
	runtime.SetReadDeadline(time.Time{})
	if n, err := w.Write(first[muxHeaderLen:]); n != len(first)-muxHeaderLen || err != nil {
		t.Fatalf("payload write: %d, %v", n, err)
	}
	want := append(append([]byte(nil), first...), endFrame...)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(runtime, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the runtime did not read the stub's frame, then the end frame")
	}
	runtime.Close() // the runtime ends its side
	go io.Copy(io.Discard, w)
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if w.framer.plugin != 1 {
		t.Fatalf("%d of the stub's frames counted, want 1", w.framer.plugin)
	}
}

// TestReadAheadHandsTheSameBytes: reads of a frame's header and then its
// payload get what the runtime wrote, in order, whatever one read of the
// socket brought; requests are counted as the stub reads them; the end of
// the runtime's side comes after the last byte.
func TestReadAheadHandsTheSameBytes(t *testing.T) {
	w, runtime := socketPair(t)
	msg := func(typ byte, payload int) []byte {
		b := make([]byte, ttrpcHeaderLen+payload)
		binary.BigEndian.PutUint32(b[0:4], uint32(payload))
		b[8] = typ
		for i := ttrpcHeaderLen; i < len(b); i++ {
			b[i] = byte(i)
		}
		return b
	}
	var sent []byte
	for _, n := range []int{0, 100, 3000, 9000} {
		sent = append(sent, muxFrame(muxPluginService, msg(ttrpcRequest, n))...)
	}
	go func() {
		for len(sent) > 0 { // in uneven pieces
			k := min(len(sent), 777)
			runtime.Write(sent[:k])
			sent = sent[k:]
			time.Sleep(time.Millisecond)
		}
		runtime.CloseWrite()
	}()
	var got []byte
	for i := 0; i < 4; i++ { // as the multiplexer reads
		hdr := make([]byte, muxHeaderLen)
		if _, err := io.ReadFull(w, hdr); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, binary.BigEndian.Uint32(hdr[4:8]))
		if _, err := io.ReadFull(w, p); err != nil {
			t.Fatal(err)
		}
		got = append(append(got, hdr...), p...)
		if n := w.requests.Load(); n != uint64(i+1) {
			t.Fatalf("%d requests counted after %d read, want %d", n, i+1, i+1)
		}
	}
	select {
	case <-w.peerClosed:
		t.Fatal("the end of the runtime's side noted before the stub read it")
	default:
	}
	if n, err := w.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after the last frame: %d, %v; want the end", n, err)
	}
	<-w.peerClosed
	var want []byte
	for _, n := range []int{0, 100, 3000, 9000} {
		want = append(want, muxFrame(muxPluginService, msg(ttrpcRequest, n))...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the stub read other bytes than the runtime wrote")
	}
}

// TestReadAheadEmptyRead: a read of nothing returns at once, as the
// socket's does, with nothing sent.
func TestReadAheadEmptyRead(t *testing.T) {
	w, _ := socketPair(t)
	done := make(chan struct{})
	go func() {
		w.Read(nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a read of nothing waited for data")
	}
}
