package protocol

import (
	"context"
	"net"
	"testing"
)

// A note is read back whole, by container id, until it is dropped; ids
// that cannot name a file are refused, and dropping a missing note is no
// error.
func TestMissedNotesRoundTrip(t *testing.T) {
	d, err := OpenDir(t.TempDir(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got, err := d.NotedMissed(); err != nil || len(got) != 0 {
		t.Fatalf("no notes yet: got %v, %v", got, err)
	}
	body := []byte("a\nbinary\x00body")
	if err := d.NoteMissed("ctr-1", "i01", body); err != nil {
		t.Fatal(err)
	}
	if err := d.NoteMissed("ctr-2", "i02", nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", ".hidden", "a/b"} {
		if err := d.NoteMissed(bad, "i01", body); err == nil {
			t.Errorf("NoteMissed(%q) accepted", bad)
		}
	}
	if err := d.NoteMissed("ctr-3", "bad\ninstance", body); err == nil {
		t.Error("an instance id with a newline was accepted")
	}
	got, err := d.NotedMissed()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["ctr-1"].Instance != "i01" || string(got["ctr-1"].Container) != string(body) || got["ctr-2"].Instance != "i02" {
		t.Fatalf("notes %q", got)
	}
	if err := d.DropMissed([]string{"ctr-1", "ctr-9"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.NotedMissed(); len(got) != 1 || got["ctr-2"].Instance != "i02" {
		t.Fatalf("after dropping ctr-1: %q", got)
	}
}

// An instance is gone when its socket is missing or refuses connections,
// not while it listens.
func TestInstanceGone(t *testing.T) {
	d, err := OpenDir(t.TempDir(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if !d.InstanceGone(ctx, "never") {
		t.Error("an instance without a socket is not gone")
	}
	l, err := net.Listen("unix", d.InstanceSocket("live"))
	if err != nil {
		t.Fatal(err)
	}
	if d.InstanceGone(ctx, "live") {
		t.Error("a listening instance is gone")
	}
	// Closed without removing the file, as a killed process leaves it.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if !d.InstanceGone(ctx, "live") {
		t.Error("an instance whose socket refuses connections is not gone")
	}
}

// A note is taken by one caller only; another finds it busy until it is
// returned or dropped; a missing note is neither taken nor busy.
func TestTakeMissedIsExclusive(t *testing.T) {
	d := dirWithANote(t)
	check := func(what string, wantTaken, wantBusy bool) {
		t.Helper()
		taken, busy, err := d.TakeMissed("ctr-1")
		if err != nil || taken != wantTaken || busy != wantBusy {
			t.Fatalf("%s: taken %v busy %v err %v; want %v, %v", what, taken, busy, err, wantTaken, wantBusy)
		}
	}
	check("first take", true, false)
	check("second take", false, true)
	if got, _ := d.NotedMissed(); len(got) != 0 {
		t.Fatalf("a taken note is still listed: %v", got)
	}
	if err := d.ReturnMissed("ctr-1"); err != nil {
		t.Fatal(err)
	}
	check("take after return", true, false)
	if err := d.DropMissed([]string{"ctr-1"}); err != nil {
		t.Fatal(err)
	}
	check("take after drop", false, false)
}

// A container noted again while its note is taken (another instance saw a
// later event of it while one hands it) is not taken a second time: it was,
// a rename replacing the taken note, and both instances handed it (the
// demo, mode containerd, -faults 10 -seed 3098). A note taken long ago
// (its taker died in the hand) is replaced.
func TestTakeMissedLeavesANoteNotedAgainWhileTaken(t *testing.T) {
	d := dirWithANote(t)
	if taken, _, err := d.TakeMissed("ctr-1"); err != nil || !taken {
		t.Fatalf("first take: %v %v", taken, err)
	}
	if err := d.NoteMissed("ctr-1", "i02", []byte("c")); err != nil { // noted again
		t.Fatal(err)
	}
	if taken, busy, err := d.TakeMissed("ctr-1"); err != nil || taken || !busy {
		t.Fatalf("take while taken: taken %v busy %v err %v; want busy", taken, busy, err)
	}
	prev := staleTake
	staleTake = 0 // the first taker died long ago
	defer func() { staleTake = prev }()
	if taken, busy, err := d.TakeMissed("ctr-1"); err != nil || !taken || busy {
		t.Fatalf("take after the taker died: taken %v busy %v err %v; want taken", taken, busy, err)
	}
}

// MissedNames lists the noted containers, taken ones included.
func TestMissedNamesListsTakenNotesToo(t *testing.T) {
	d, err := OpenDir(t.TempDir(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, id := range []string{"ctr-1", "ctr-2"} {
		if err := d.NoteMissed(id, "i01", nil); err != nil {
			t.Fatal(err)
		}
	}
	if taken, _, err := d.TakeMissed("ctr-2"); err != nil || !taken {
		t.Fatalf("take: %v %v", taken, err)
	}
	got, err := d.MissedNames()
	if err != nil || len(got) != 2 || !got["ctr-1"] || !got["ctr-2"] {
		t.Fatalf("names %v, %v; want ctr-1 and ctr-2", got, err)
	}
}

// dirWithANote opens a handover directory (closed when the test ends)
// with one note of a missed creation: ctr-1, by instance i01.
func dirWithANote(t *testing.T) *Dir {
	t.Helper()
	d, err := OpenDir(t.TempDir(), "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.NoteMissed("ctr-1", "i01", []byte("c")); err != nil {
		t.Fatal(err)
	}
	return d
}
