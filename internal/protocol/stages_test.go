package protocol

import (
	"io"
	"os"
	"slices"
	"strings"
	"testing"

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
