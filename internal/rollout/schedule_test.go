package rollout

import (
	"math/rand"
	"testing"
)

// With handovers and the retired instance kept, a run with faults starts
// with a handover, so that every fault finds another instance to survive
// it (Config.Faults); the number of each kind of step is unchanged. Without
// a handover to come first, a fault may come first (it then strikes a lone
// owner).
func TestScheduleStartsWithAHandoverBeforeAnyFault(t *testing.T) {
	faultFirst := 0
	for seed := int64(1); seed <= 200; seed++ {
		for _, keepOld := range []bool{true, false} {
			r := &runner{cfg: Config{Events: 1000, Handovers: 3, Faults: 5, KeepOld: keepOld}, rng: rand.New(rand.NewSource(seed))}
			steps := r.schedule()
			faults := 0
			for i, st := range steps {
				if st.fault {
					faults++
				}
				if i > 0 && st.at < steps[i-1].at {
					t.Fatalf("seed %d: step %d at %d comes before step %d at %d", seed, i, st.at, i-1, steps[i-1].at)
				}
			}
			if len(steps) != 8 || faults != 5 {
				t.Fatalf("seed %d: %d steps, %d faults; want 8, 5", seed, len(steps), faults)
			}
			switch {
			case keepOld && steps[0].fault:
				t.Fatalf("seed %d: the first step is a fault, with no retired instance to survive it", seed)
			case !keepOld && steps[0].fault:
				faultFirst++
			}
		}
	}
	if faultFirst == 0 {
		t.Fatal("without KeepOld no seed put a fault first: the check above proves nothing")
	}
}
