package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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
	demoErr := demo([]string{"-events", "600", "-handovers", "1", "-faults", "2", "-request-timeout", "200ms", "--json"}, &out)
	var rep struct {
		Faults           []string          `json:"faults"`
		Unacted          int               `json:"unacted"`
		Missed           int               `json:"missed"`
		MissedCaughtUp   int               `json:"missed_caught_up"`
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
	if sorted := rep.MissedInGap + rep.MissedInDoubt + rep.MissedCaughtUp + rep.MissedUndeclared; sorted < rep.Unacted ||
		rep.Duplicates == 0 && sorted != rep.Unacted || rep.Missed != rep.MissedInGap+rep.MissedUndeclared {
		t.Errorf("unacted %d, sorted %d (%d in a gap window, %d in doubt, %d caught up, %d undeclared), missed %d",
			rep.Unacted, sorted, rep.MissedInGap, rep.MissedInDoubt, rep.MissedCaughtUp, rep.MissedUndeclared, rep.Missed)
	}
	if len(rep.GapWindows) != rep.Gaps {
		t.Errorf("%d gap windows, %d gaps", len(rep.GapWindows), rep.Gaps)
	}
	// A kill of the only instance leaves a gap: the events in it are lost,
	// and the demo says so in its exit status.
	if (rep.MissedInGap == 0) != (demoErr == nil) {
		t.Errorf("demo returned %v with %d events missed in gap windows:\n%s", demoErr, rep.MissedInGap, strings.Join(rep.Problems, "\n"))
	}
	out.Reset()
	if err := demo([]string{"-events", "300", "-handovers", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "runtime mode") || !strings.Contains(out.String(), "OK: every event") {
		t.Fatalf("default tables:\n%s", out.String())
	}
}

// demoFaultsReport is the part of the demo's JSON that
// TestDemoFaultsInEveryMode checks.
type demoFaultsReport struct {
	Faults            []string `json:"faults"`
	Duplicates        int      `json:"duplicates"`
	FailedCreates     int      `json:"failed_creates"`
	Unacted           int      `json:"unacted"`
	Missed            int      `json:"missed"`
	MissedInGap       int      `json:"missed_in_gap"`
	MissedInDoubt     int      `json:"missed_in_doubt"`
	MissedCaughtUp    int      `json:"missed_caught_up"`
	MissedUndeclared  int      `json:"missed_undeclared"`
	Unstamped         int      `json:"unstamped"`
	UnstampedCaughtUp int      `json:"unstamped_caught_up"`
	UnstampedUnseen   int      `json:"unstamped_unseen"`
	Unprocessed       int      `json:"unprocessed"`
	InDoubt           int      `json:"in_doubt"`
	CaughtUp          int      `json:"caught_up"`
	CaughtUpChanges   int      `json:"caught_up_changes"`
	Gaps              int      `json:"gaps"`
	GapWindows        []struct {
		Missed int `json:"missed"`
	} `json:"gap_windows"`
	Problems []string `json:"problems"`
}

// In every runtime mode, ten owner kills and freezes at fixed-seed random
// moments: nothing is acted on twice, no creation fails, at most one event
// per fault is in doubt, and every event no instance acted on is accounted
// for: in doubt, caught up (its container was handed to the author
// afterwards) or in a declared gap window (no instance connected: the
// runtime sent it to nobody); none undeclared. Every container created
// unprocessed was handed to an author, unless it lived and ended while no
// instance was connected (then the run has events missed in a declared gap
// window). The run ends only once an instance acts again after
// the last fault, so no fault is left without its takeover.
func TestDemoFaultsInEveryMode(t *testing.T) {
	const faults = 10
	for _, mode := range []string{"containerd", "cri-o", "gap", "exit-stop"} {
		t.Run(mode, func(t *testing.T) {
			var out bytes.Buffer
			logFile := filepath.Join(t.TempDir(), "instances.log")
			err := demo([]string{"-runtime", mode, "-faults", strconv.Itoa(faults), "-seed", "2",
				"-events", "4000", "-handovers", "8", "-request-timeout", "300ms", "-log", logFile, "--json"}, &out)
			// A failure in CI can then be read: the instances' logs of the
			// run (a few hundred lines).
			defer func() {
				if t.Failed() {
					if b, err := os.ReadFile(logFile); err == nil {
						t.Logf("the instances' logs:\n%s", b)
					}
				}
			}()
			if err != nil && err != errGuarantee {
				t.Fatalf("%v\n%s", err, out.String())
			}
			var rep demoFaultsReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			t.Logf("%s: unacted %d = %d in doubt + %d caught up + %d in gap windows + %d undeclared; unstamped %d = %d caught up + %d unseen + %d unprocessed; in doubt %d, caught up %d, gaps %d",
				mode, rep.Unacted, rep.MissedInDoubt, rep.MissedCaughtUp, rep.MissedInGap, rep.MissedUndeclared,
				rep.Unstamped, rep.UnstampedCaughtUp, rep.UnstampedUnseen, rep.Unprocessed, rep.InDoubt, rep.CaughtUp, rep.Gaps)
			problems := strings.Join(rep.Problems, "\n")
			if len(rep.Faults) != faults {
				t.Errorf("faults %v, want %d", rep.Faults, faults)
			}
			if rep.Duplicates != 0 || rep.FailedCreates != 0 || rep.InDoubt > faults {
				t.Errorf("duplicates %d, failed creates %d, in doubt %d (faults %d); faults %v:\n%s", rep.Duplicates, rep.FailedCreates, rep.InDoubt, faults, rep.Faults, problems)
			}
			// 0 in 240 runs of the release build (seeds 1-60, every
			// mode) and 12 of this test under -race, 2026-12-07; before,
			// the test allowed 5 (docs/reliability.md, session 12).
			if rep.MissedUndeclared != 0 {
				t.Errorf("%d missed events undeclared:\n%s", rep.MissedUndeclared, problems)
			}
			if sorted := rep.MissedInDoubt + rep.MissedCaughtUp + rep.MissedInGap + rep.MissedUndeclared; sorted != rep.Unacted ||
				rep.Missed != rep.MissedInGap+rep.MissedUndeclared {
				t.Errorf("unacted %d, sorted %d; missed %d", rep.Unacted, sorted, rep.Missed)
			}
			inWindows := 0
			for _, w := range rep.GapWindows {
				inWindows += w.Missed
			}
			if len(rep.GapWindows) != rep.Gaps || inWindows != rep.MissedInGap {
				t.Errorf("%d gap windows with %d missed events; %d gaps, %d missed in a gap", len(rep.GapWindows), inWindows, rep.Gaps, rep.MissedInGap)
			}
			if rep.Unstamped != rep.UnstampedCaughtUp+rep.UnstampedUnseen+rep.Unprocessed ||
				rep.Unprocessed != 0 && rep.MissedInGap == 0 {
				t.Errorf("unstamped %d: %d caught up, %d unseen, %d never handed to an author (with %d events missed in declared gap windows; none may be left unprocessed without one):\n%s",
					rep.Unstamped, rep.UnstampedCaughtUp, rep.UnstampedUnseen, rep.Unprocessed, rep.MissedInGap, problems)
			} else if rep.Unprocessed != 0 {
				t.Logf("%d containers never handed to an author, created in a declared gap window:\n%s", rep.Unprocessed, problems)
			}
			// The verdict (exit status, "ok") follows the contract: events
			// in doubt and caught up keep it, events in a gap window do not.
			if kept := rep.MissedInGap == 0 && rep.Unprocessed == 0; kept != (err == nil) {
				t.Errorf("demo returned %v with %d events in gap windows and %d containers unprocessed:\n%s", err, rep.MissedInGap, rep.Unprocessed, problems)
			}
			if rep.UnstampedCaughtUp+rep.CaughtUpChanges != rep.CaughtUp {
				t.Errorf("%d unstamped containers and %d lifecycle changes handed to an author, the instances count %d caught up:\n%s",
					rep.UnstampedCaughtUp, rep.CaughtUpChanges, rep.CaughtUp, problems)
			}
		})
	}
}

// With -at-least-once every instance acts on an event in doubt again: an
// event an instance declared in doubt by name (the runtime had called it
// for that event) is acted on again, at once or handed late, except a
// creation (its container is handed to a catch-up as unprocessed); an
// event acted on twice is allowed only if it was declared in doubt. Mode
// cri-o: the fallback is called before the owner for the event the owner
// dies in, so it declares it at its next event. Before, such an event was
// named to InDoubt and acted on by no instance (7 of them in this run).
func TestDemoFaultsAtLeastOnce(t *testing.T) {
	const faults = 10
	var out bytes.Buffer
	logFile := filepath.Join(t.TempDir(), "instances.log")
	err := demo([]string{"-runtime", "cri-o", "-faults", strconv.Itoa(faults), "-seed", "2", "-at-least-once",
		"-events", "4000", "-handovers", "8", "-request-timeout", "300ms", "-log", logFile, "--json"}, &out)
	defer func() {
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("the instances' logs:\n%s", b)
			}
		}
	}()
	var rep struct {
		demoFaultsReport
		AtLeastOnce bool `json:"at_least_once"`
		ActedAgain  int  `json:"acted_again"`
	}
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("%v: %s", jerr, out.String())
	}
	t.Logf("unacted %d = %d in doubt + %d caught up + %d in gap windows + %d undeclared; acted on again %d; in doubt %d",
		rep.Unacted, rep.MissedInDoubt, rep.MissedCaughtUp, rep.MissedInGap, rep.MissedUndeclared, rep.ActedAgain, rep.InDoubt)
	if !rep.AtLeastOnce || len(rep.Faults) != faults {
		t.Fatalf("at_least_once %v, faults %v", rep.AtLeastOnce, rep.Faults)
	}
	if err != nil || rep.Duplicates != 0 || rep.MissedUndeclared != 0 || rep.InDoubt > faults {
		t.Errorf("demo returned %v: duplicates not declared in doubt %d, undeclared misses %d, in doubt %d:\n%s",
			err, rep.Duplicates, rep.MissedUndeclared, rep.InDoubt, strings.Join(rep.Problems, "\n"))
	}
}
