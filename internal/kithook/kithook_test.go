package kithook

import (
	"context"
	"testing"
)

// A killed process's writes stop at the instant its sockets close, so no
// peer can see it gone while it still writes: Crash runs the OnCrash hooks
// (which stop the instance's writes to shared files) before it ends the
// requests its handover service is handling and the waits in Wait.
func TestCrashStopsTheWritesBeforeThePeersSeeIt(t *testing.T) {
	socket := t.TempDir() + "/i.sock"
	h := Register(socket)
	defer Unregister(socket)
	ran := false
	h.OnCrash(func() {
		ran = true
		if !h.Crashed() {
			t.Error("OnCrash ran before the instance was marked crashed")
		}
		select {
		case <-h.dead:
			t.Error("OnCrash ran after the instance's requests were ended: a peer could see it gone while it still wrote")
		default:
		}
	})
	h.Freeze()
	h.Crash()
	if !ran {
		t.Fatal("OnCrash did not run")
	}
	select {
	case <-h.dead:
	default:
		t.Fatal("Crash did not end the instance's requests")
	}
	h.Wait(context.Background()) // a crash ends a freeze: returns at once
}
