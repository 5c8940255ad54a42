package protocol

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// setPageLayout writes the layout word of the plugin's page under root, as
// a build with another layout would have.
func setPageLayout(t *testing.T, root string, layout uint64) {
	t.Helper()
	d, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.genMu.RLock()
	atomic.StoreUint64(d.word(layoutOffset), layout)
	d.genMu.RUnlock()
}

func TestPageLayoutStampedOnANewOrUnversionedPage(t *testing.T) {
	root := testRoot(t)
	d, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.LayoutErr(); err != nil {
		t.Fatalf("new page: %v", err)
	}
	d.genMu.RLock()
	got := atomic.LoadUint64(d.word(layoutOffset))
	d.genMu.RUnlock()
	if got != pageLayout {
		t.Fatalf("new page has layout %d, want %d", got, pageLayout)
	}
	// A page written by a build from before the layout word (same offsets).
	setPageLayout(t, root, 0)
	d2, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d2.LayoutErr(); err != nil {
		t.Fatalf("unversioned page: %v", err)
	}
}

// An instance that finds a page of a layout it does not speak takes no
// part: its claim asks nobody to yield, it stays standby and not Ready
// with the reason, it acts on no event; the owner serves on.
func TestForeignPageLayoutTakesNoPart(t *testing.T) {
	root := testRoot(t)
	old := newInstance(t, root, "old", "1.0.0", 1, nil)
	oldTag := old.Conn(1 << 2)
	if r, err := old.ClaimConn(context.Background(), oldTag, nil, nil); r != api.Role_ROLE_OWNER {
		t.Fatalf("old: role %s (%v), want owner", RoleName(r), err)
	}
	if d := old.Decide(oldTag, EventKey(2, "c1"), 1<<2, nil); !d.Act {
		t.Fatalf("old owner does not act: %+v", d)
	}
	old.Finish(oldTag, EventKey(2, "c1"))

	setPageLayout(t, root, pageLayout+1) // a page of a layout this build does not speak
	nw := newInstance(t, root, "new", "2.0.0", 2, nil)
	if err := nw.cfg.Dir.LayoutErr(); !errors.Is(err, ErrPageLayout) {
		t.Fatalf("LayoutErr = %v, want ErrPageLayout", err)
	}
	tag := nw.Conn(1 << 2)
	role, err := nw.ClaimConn(context.Background(), tag, func(context.Context) error { return nil }, nil)
	if !errors.Is(err, ErrPageLayout) || role == api.Role_ROLE_OWNER {
		t.Fatalf("claim on a foreign page: role %s, err %v; want not owner, ErrPageLayout", RoleName(role), err)
	}
	if r := nw.Status().Role; r != api.Role_ROLE_STANDBY {
		t.Fatalf("new: role %s, want standby", RoleName(r))
	}
	if ok, why := nw.Ready(); ok || !strings.Contains(why, "layout") {
		t.Fatalf("new: Ready = %v, %q; want not ready, saying why (layout)", ok, why)
	}
	if d := nw.Decide(tag, EventKey(2, "c2"), 1<<2, nil); d.Act || d.Promoted {
		t.Fatalf("new acts on a foreign page: %+v", d)
	}
	if r := old.Status().Role; r != api.Role_ROLE_OWNER {
		t.Fatalf("old: role %s, want owner (the failed upgrade changes nothing)", RoleName(r))
	}
	if d := old.Decide(oldTag, EventKey(2, "c2"), 1<<2, nil); !d.Act {
		t.Fatalf("old owner stopped acting: %+v", d)
	}
	old.Finish(oldTag, EventKey(2, "c2"))
}
