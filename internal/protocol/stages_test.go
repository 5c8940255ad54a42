package protocol

import (
	"testing"

	"github.com/sirupsen/logrus"
)

// TestStageOnlyMovesForward: advanceLocked moves the stage forward,
// skipping stages, and refuses to move it back (loudly: counted as an
// illegal change).
func TestStageOnlyMovesForward(t *testing.T) {
	c := &Coordinator{log: logrus.NewEntry(logrus.New()), changed: make(chan struct{})}
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
