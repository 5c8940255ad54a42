package protocol

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// TestStageOnlyMovesForward: advanceLocked moves the stage forward,
// skipping stages, and refuses to move it back (loudly: counted as an
// illegal change).
func TestStageOnlyMovesForward(t *testing.T) {
	c := &Coordinator{log: logrus.NewEntry(logrus.New()), changed: make(chan struct{})}
	c.log.Logger.SetOutput(io.Discard)
	c.advanceLocked(stageLeaving)
	c.advanceLocked(stageLeaving) // again: nothing changes, nothing illegal
	c.advanceLocked(stageClosed)
	if c.stage != stageClosed || !c.leavingLocked() || !c.goneLocked() {
		t.Fatalf("stage %v after leaving, closed", c.stage)
	}
	before := illegalChanges.Load()
	c.advanceLocked(stageLeft)
	if c.stage != stageClosed {
		t.Fatalf("stage moved back to %v", c.stage)
	}
	if illegalChanges.Load() != before+1 {
		t.Fatal("moving the stage back was not counted as illegal")
	}
	illegalChanges.Add(^uint64(0)) // expected here: do not fail TestMain
}

// TestDesignListsTheRoleChanges: docs/design.md's table of role changes
// lists exactly the pairs of legal.
func TestDesignListsTheRoleChanges(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]api.Role{}
	for r := range legal {
		byName[roleName(r)] = r
	}
	inDoc := map[[2]api.Role]bool{}
	lines := strings.Split(string(doc), "\n")
	start := slices.Index(lines, "| from | to | when |")
	if start < 0 {
		t.Fatal(`docs/design.md has no table headed "| from | to | when |"`)
	}
	for _, line := range lines[start+2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("docs/design.md: role change row %q has no from and to", line)
		}
		from, okf := byName[strings.TrimSpace(cells[1])]
		to, okt := byName[strings.TrimSpace(cells[2])]
		if !okf || !okt {
			t.Fatalf("docs/design.md: role change row %q names an unknown role", line)
		}
		inDoc[[2]api.Role{from, to}] = true
	}
	for from, tos := range legal {
		for to := range tos {
			if !inDoc[[2]api.Role{from, to}] {
				t.Errorf("legal has %s -> %s, docs/design.md does not", roleName(from), roleName(to))
			}
			delete(inDoc, [2]api.Role{from, to})
		}
	}
	for p := range inDoc {
		t.Errorf("docs/design.md has %s -> %s, legal does not", roleName(p[0]), roleName(p[1]))
	}
}

// TestTransitionChecksTheTable walks every pair of roles through
// transitionLocked: a listed change (or a reason change within a role)
// passes, an unlisted one is counted as illegal, and either way the
// change is made (a missing entry must not change behaviour).
func TestTransitionChecksTheTable(t *testing.T) {
	roles := []api.Role{api.Role_ROLE_JOINING, api.Role_ROLE_OWNER, api.Role_ROLE_STANDBY, api.Role_ROLE_RETIRED}
	for _, from := range roles {
		for _, to := range roles {
			c := &Coordinator{log: logrus.NewEntry(logrus.New()), changed: make(chan struct{}), role: from}
			c.log.Logger.SetOutput(io.Discard)
			before := illegalChanges.Load()
			c.transitionLocked(to, "test", OutcomeKept)
			counted := illegalChanges.Load() - before
			want := uint64(1)
			if from == to || legal[from][to] != "" {
				want = 0
			}
			if counted != want {
				t.Errorf("%s -> %s: counted %d illegal, want %d", roleName(from), roleName(to), counted, want)
			}
			illegalChanges.Add(-counted) // expected here: do not fail TestMain
			if c.role != to || c.outcome != OutcomeKept {
				t.Errorf("%s -> %s: role %s, outcome %q after the change", roleName(from), roleName(to), roleName(c.role), c.outcome)
			}
		}
	}
}

// newCheckedInstance starts a coordinator whose callbacks check that they
// run with its mu released (they ask for its Status, which takes mu) and
// count their calls.
func newCheckedInstance(t *testing.T, root, id string, order int64, calls *atomic.Int64) *Coordinator {
	t.Helper()
	dir, err := OpenDir(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var self atomic.Pointer[Coordinator]
	check := func(what string) {
		calls.Add(1)
		done := make(chan struct{})
		go func() {
			self.Load().Status()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Errorf("%s: %s called with mu held (Status blocked for 2 s)", id, what)
		}
	}
	c, err := New(Config{
		Dir:        dir,
		Self:       &api.Instance{Plugin: "demo", Id: id, Version: "1.0.0", StartedUnixNano: startClock + order},
		OnOutcome:  func(o Outcome, _ time.Duration) { check("OnOutcome(" + string(o) + ")") },
		OnPromoted: func(uint64) { check("OnPromoted") },
		OnResync:   func(string) { check("OnResync") },
		OnInDoubt:  func(uint32) { check("OnInDoubt") },
		OnGap:      func(time.Duration) { check("OnGap") },
	})
	if err != nil {
		t.Fatal(err)
	}
	self.Store(c)
	t.Cleanup(c.Close)
	return c
}

// TestCallbacksRunWithoutMu: the callbacks of a claim, a yield, a refusal
// and a take-back are called with the coordinator's mu released.
func TestCallbacksRunWithoutMu(t *testing.T) {
	root := testRoot(t)
	var calls atomic.Int64
	a := newCheckedInstance(t, root, "a", 1, &calls)
	b := newCheckedInstance(t, root, "b", 3, &calls)
	old := newCheckedInstance(t, root, "old", 0, &calls)
	if r, err := a.Claim(context.Background()); r != api.Role_ROLE_OWNER {
		t.Fatalf("a: %v, %v", r, err) // first-owner
	}
	if r, err := b.Claim(context.Background()); r != api.Role_ROLE_OWNER {
		t.Fatalf("b: %v, %v", r, err) // a: yielded, b: took-over
	}
	if r, _ := old.Claim(context.Background()); r != api.Role_ROLE_STANDBY {
		t.Fatalf("old: %v", r) // b: declined, old: refused
	}
	b.Close() // a takes back or old is promoted (promoted, OnPromoted)
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		aCh, oldCh := a.Changed(), old.Changed()
		if a.currentRole() == api.Role_ROLE_OWNER || old.currentRole() == api.Role_ROLE_OWNER {
			break
		}
		select {
		case <-aCh:
		case <-oldCh:
		case <-limit.C:
			t.Fatalf("nobody owns 10 s after the owner closed: a %v, old %v", a.Status(), old.Status())
		}
	}
	if n := calls.Load(); n < 6 {
		t.Fatalf("%d callback calls, want at least 6", n)
	}
}
