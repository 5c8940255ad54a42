package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The demo's JSON names the runtime mode and carries in_doubt and
// caught_up; a mode it does not know is refused.
func TestDemoRuntimeModes(t *testing.T) {
	for _, mode := range []string{"containerd", "exit-stop"} {
		var out bytes.Buffer
		err := demo([]string{"-runtime", mode, "-events", "600", "-handovers", "2", "--json"}, &out)
		if err != nil && (mode == "containerd" || err != errGuarantee) {
			t.Fatalf("-runtime %s: %v\n%s", mode, err, out.String())
		}
		var rep map[string]any
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"in_doubt", "caught_up", "gaps", "missed_undeclared"} {
			if v, ok := rep[k].(float64); !ok || v != 0 {
				t.Fatalf("-runtime %s: %s = %v, want 0", mode, k, rep[k])
			}
		}
		// Today's protocol is exact only in containerd mode (issue 10).
		if rep["runtime"] != mode || rep["handovers"] != float64(2) || mode == "containerd" && rep["ok"] != true {
			t.Fatalf("-runtime %s: %s", mode, out.String())
		}
	}
	err := demo([]string{"-runtime", "docker"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "unknown runtime mode") {
		t.Fatalf("-runtime docker: %v", err)
	}
}

// With faults, the demo reports each one and sorts every missed event
// into declared (in a gap window, or in doubt) and undeclared: here (a kill
// of the only instance, then a freeze with a retired instance connected)
// every one is declared. The default tables do not show the mode lines.
func TestDemoFaults(t *testing.T) {
	var out bytes.Buffer
	_ = demo([]string{"-events", "600", "-handovers", "1", "-faults", "2", "-request-timeout", "200ms", "--json"}, &out)
	var rep struct {
		Faults           []string          `json:"faults"`
		Missed           int               `json:"missed"`
		Duplicates       int               `json:"duplicates"`
		MissedInGap      int               `json:"missed_in_gap"`
		MissedInDoubt    int               `json:"missed_in_doubt"`
		MissedUndeclared int               `json:"missed_undeclared"`
		Gaps             int               `json:"gaps"`
		GapWindows       []json.RawMessage `json:"gap_windows"`
		Problems         []string          `json:"problems"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Faults) != 2 {
		t.Fatalf("faults %v, want 2", rep.Faults)
	}
	if rep.MissedUndeclared != 0 {
		t.Errorf("%d of %d missed events undeclared:\n%s", rep.MissedUndeclared, rep.Missed, strings.Join(rep.Problems, "\n"))
	}
	if sorted := rep.MissedInGap + rep.MissedInDoubt + rep.MissedUndeclared; sorted < rep.Missed || rep.Duplicates == 0 && sorted != rep.Missed {
		t.Errorf("missed %d, sorted %d (%d in a gap window, %d in doubt, %d undeclared)",
			rep.Missed, sorted, rep.MissedInGap, rep.MissedInDoubt, rep.MissedUndeclared)
	}
	if len(rep.GapWindows) != rep.Gaps {
		t.Errorf("%d gap windows, %d gaps", len(rep.GapWindows), rep.Gaps)
	}
	out.Reset()
	if err := demo([]string{"-events", "300", "-handovers", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "runtime mode") || !strings.Contains(out.String(), "OK: every event") {
		t.Fatalf("default tables:\n%s", out.String())
	}
}
