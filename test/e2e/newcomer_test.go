//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
)

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpGet returns the status code and body of GET url.
func httpGet(url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestFailedNewcomerChangesNothing: a new version whose author Synchronize
// fails starts beside the owner under CRI load, as a maxSurge rollout
// would start it. The old owner keeps serving: every event is acted on
// exactly once, all by it; no container creation fails; the newcomer's
// readiness probe (/readyz) never answers 200 while it runs, and it says
// why: its handover metrics count the claim as not-ready.
func TestFailedNewcomerChangesNothing(t *testing.T) {
	n := newNode(t)
	record := n.dir + "/record"
	v1, load := n.ownerUnderLoad(instanceOpts{binary: "nri-audit-sync", version: "1.0.0",
		extra: []string{"-record", record}}, 3)
	lt := newLedgerTail(n.ledger)
	if err := lt.waitActed(v1.id, settleEvents, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	v2 := n.start(instanceOpts{binary: "nri-audit-sync", version: "2.0.0",
		extra: []string{"-fail-sync", "-record", record, "-metrics-addr", addr}})

	// The probe, as the kubelet's, all along.
	var (
		mu               sync.Mutex
		probes, readyOK  int
		lastWhy, firstOK string
	)
	probeDone := make(chan struct{})
	stopProbe := make(chan struct{})
	go func() {
		defer close(probeDone)
		for {
			select {
			case <-stopProbe:
				return
			case <-time.After(20 * time.Millisecond):
			}
			code, body, err := httpGet("http://" + addr + "/readyz")
			if err != nil {
				continue // not listening yet
			}
			mu.Lock()
			probes++
			lastWhy = strings.TrimSpace(body)
			if code == http.StatusOK {
				if readyOK++; readyOK == 1 {
					firstOK = lastWhy
				}
			}
			mu.Unlock()
		}
	}()

	// Its Synchronize fails at least twice (the harness reconnects and
	// claims again), and the old owner serves on meanwhile.
	failed := func() int {
		c := 0
		for _, r := range readRecords(t, record) {
			if r.kind == "sync-failed" && r.instance == v2.id {
				c++
			}
		}
		return c
	}
	deadline := time.Now().Add(60 * time.Second)
	for failed() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%s's Synchronize failed %d times within 60 s, want 2", v2.id, failed())
		}
		if !v2.running() {
			t.Fatalf("%s exited (%v)", v2.id, v2.exitErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := lt.waitActed(v1.id, 2*settleEvents, 30*time.Second); err != nil {
		t.Errorf("the old owner does not serve on after the newcomer failed: %v", err)
	}
	// v1 owns once the newcomer's last claim has given ownership back: a
	// retry in flight shows v1 retired meanwhile (the newcomer retries
	// after a backoff), while the cut keeps v1 acting on every event (the
	// ledger below). Seen in a fresh-clone CI run: v1 read as retired with
	// a fourth try in flight.
	roleBy := time.Now().Add(10 * time.Second)
	for r := v1.role(); r != hapi.Role_ROLE_OWNER; r = v1.role() {
		if time.Now().After(roleBy) {
			t.Errorf("%s is %v for 10 s after the newcomer failed, want owner", v1.id, r)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := v2.role(); r == hapi.Role_ROLE_OWNER {
		t.Errorf("%s, whose Synchronize fails, is owner", v2.id)
	}

	// The outcome, where an operator looks.
	st, err := v2.status(ctxFor(t, time.Second))
	if err != nil {
		t.Errorf("status of %s: %v", v2.id, err)
	}
	_, metrics, err := httpGet("http://" + addr + "/metrics")
	if err != nil {
		t.Errorf("metrics of %s: %v", v2.id, err)
	}
	notReady := 0.0
	if m := regexp.MustCompile(`nri_handover_handovers_total\{[^}]*outcome="not-ready"[^}]*\} (\S+)`).FindStringSubmatch(metrics); m != nil {
		notReady, _ = strconv.ParseFloat(m[1], 64)
	}
	if notReady < 2 {
		t.Errorf("%s's metrics count %v not-ready claims, want at least 2 (its Synchronize failed %d times):\n%s",
			v2.id, notReady, failed(), grepLines(metrics, "handovers_total"))
	}

	close(stopProbe)
	<-probeDone
	if err := v2.stop(exitWithin); err != nil {
		t.Error(err)
	}
	if err := lt.waitActed(v1.id, settleEvents, 30*time.Second); err != nil {
		t.Error(err)
	}
	load.stop()

	mu.Lock()
	t.Logf("%s: Synchronize failed %d times; readiness probed %d times, 200 %d times; last answer %q; status %s: %q; not-ready claims %v",
		v2.id, failed(), probes, readyOK, lastWhy, st.GetRole(), st.GetReason(), notReady)
	if probes == 0 {
		t.Errorf("the readiness probe of %s never got an answer", v2.id)
	}
	if readyOK > 0 {
		t.Errorf("%s, whose Synchronize fails, answered its readiness probe with 200 %d times (first: %q): a rollout would delete the working pod",
			v2.id, readyOK, firstOK)
	}
	mu.Unlock()

	load.checkNoFailures(t)
	ledger := n.checkExactlyOnce(t, load, nil)
	if runs := instanceRuns(ledger); len(runs) != 1 || runs[0] != v1.id {
		t.Errorf("ledger writers %v, want only %s", runs, v1.id)
	}
	if err := v1.stop(exitWithin); err != nil {
		t.Error(err)
	}
	t.Logf("load: %d containers, %d ledger lines, all by %s", load.count("CreateContainer"), len(ledger), v1.id)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}
