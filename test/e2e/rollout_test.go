//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// ledgerTail counts the ledger's lines by instance, reading only what was
// appended since its last look, so tests can wait on "the new owner has
// acted on k events" instead of sleeping.
type ledgerTail struct {
	path   string
	off    int64
	rest   string
	byInst map[string]int
}

func newLedgerTail(path string) *ledgerTail { return &ledgerTail{path: path, byInst: map[string]int{}} }

// actedBy returns how many ledger lines instance id has written so far.
func (lt *ledgerTail) actedBy(id string) int {
	f, err := os.Open(lt.path)
	if err == nil {
		if fi, err := f.Stat(); err == nil && fi.Size() > lt.off {
			buf := make([]byte, fi.Size()-lt.off)
			if k, _ := f.ReadAt(buf, lt.off); k > 0 {
				lt.off += int64(k)
				lines := strings.Split(lt.rest+string(buf[:k]), "\n")
				lt.rest = lines[len(lines)-1]
				for _, l := range lines[:len(lines)-1] {
					if fs := strings.Fields(l); len(fs) == 4 {
						lt.byInst[fs[2]]++
					}
				}
			}
		}
		f.Close()
	}
	return lt.byInst[id]
}

// waitActed waits until instance id has acted on at least k more events
// than it had when called (the load must be running).
func (lt *ledgerTail) waitActed(id string, k int, timeout time.Duration) error {
	want := lt.actedBy(id) + k
	deadline := time.Now().Add(timeout)
	for lt.actedBy(id) < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s acted on %d of %d events within %v", id, lt.actedBy(id)-want+k, k, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// settleEvents is how many events a new owner must have acted on under
// load before the next step of a test: it serves, not merely owns.
const settleEvents = 8

// rolloutResult is what a series of make-before-break handovers did.
type rolloutResult struct {
	owners  []string // every owner, in order, the first included
	windows []window // one per handover: the newcomer's start to the old one's exit
	took    []time.Duration
}

// rollout plays count DaemonSet rollouts with maxSurge 1 under the load,
// alternating the versions v2.0.0 and v1.0.0: the new instance starts
// beside the owner; once it reports owning the plugin (its readiness)
// the old one gets SIGTERM and must exit; each step begins once the
// owner has acted on settleEvents events.
func (n *node) rollout(t *testing.T, cur *instance, count int, opts func(version string) instanceOpts) rolloutResult {
	t.Helper()
	lt := newLedgerTail(n.ledger)
	r := rolloutResult{owners: []string{cur.id}}
	if err := lt.waitActed(cur.id, settleEvents, 30*time.Second); err != nil {
		t.Fatalf("the first owner: %v", err)
	}
	for i := 0; i < count; i++ {
		v := []string{"2.0.0", "1.0.0"}[i%2]
		from := time.Now()
		next := n.start(opts(v))
		took, err := next.waitOwner(ownerWithin)
		if err != nil {
			t.Fatalf("handover %d: %v", i+1, err)
		}
		if err := cur.stop(exitWithin); err != nil {
			t.Errorf("handover %d: %v", i+1, err)
		}
		r.windows = append(r.windows, window{label: cur.id + "->" + next.id, from: from, to: time.Now()})
		r.took = append(r.took, took)
		r.owners = append(r.owners, next.id)
		cur = next
		if err := lt.waitActed(cur.id, settleEvents, 30*time.Second); err != nil {
			t.Fatalf("handover %d: %v", i+1, err)
		}
	}
	return r
}

// checkRollout checks what every rollout test asserts: no CRI call
// failed, every container stamped once, every event in the ledger exactly
// once, written by each owner in turn. It returns the closing-plugin lines
// of containerd's log and fails the test on any timeout among them.
func (n *node) checkRollout(t *testing.T, load *loadGen, r rolloutResult) (closed []string) {
	t.Helper()
	load.checkNoFailures(t)
	loadTime := load.ended.Sub(load.began)
	t.Logf("load: %d pods, %d containers, %d CRI calls in %v", load.pods, load.count("CreateContainer"),
		len(load.calls), loadTime.Round(time.Second))
	ledger := n.checkExactlyOnce(t, load, nil)
	if runs := instanceRuns(ledger); !slices.Equal(runs, r.owners) {
		t.Errorf("the ledger was written by %d runs of instances, want each of the %d owners once, in order:\n got  %v\n want %v",
			len(runs), len(r.owners), first(runs, 8), first(r.owners, 8))
	}
	t.Logf("handovers: %d; new instance owner after its start: p50 %v, max %v", len(r.windows),
		percentile(r.took, 50).Round(time.Millisecond), maxDur(r.took).Round(time.Millisecond))
	return n.checkNoTimeouts(t)
}

// closedByRequest counts containerd's closing-plugin lines by what was in
// flight: "CreateContainer request: ttrpc: closed", "event
// REMOVE_CONTAINER: ttrpc: closed" and the like.
func closedByRequest(closed []string) string {
	re := regexp.MustCompile(`failed to handle (.*?)"`)
	ev := regexp.MustCompile(`^event (\d+)`)
	c := map[string]int{}
	for _, l := range closed {
		if m := re.FindStringSubmatch(l); m != nil {
			what := ev.ReplaceAllStringFunc(m[1], func(s string) string {
				k, _ := strconv.Atoi(strings.TrimPrefix(s, "event "))
				return "event " + api.Event(k).String()
			})
			c[what]++
		} else {
			c[l]++
		}
	}
	var parts []string
	for k, v := range c {
		parts = append(parts, fmt.Sprintf("%d x %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// TestFiftyHandoversUnderLoad: 50 make-before-break handovers of the audit
// sample (plain builds, as users run it), v1 -> v2 -> v1 ..., under CRI
// load. Every container is stamped once, every event is in the ledger
// exactly once, each owner wrote it in turn, no CRI call fails, and
// retirement is invisible to containerd: it never logs that it closed a
// plugin connection ("closing plugin 10-audit, failed to handle ...
// request: ttrpc: closed", an error that with NRI's FailRequest policy
// would fail the request).
func TestFiftyHandoversUnderLoad(t *testing.T) {
	n := newNode(t)
	opts := func(v string) instanceOpts { return instanceOpts{version: v, noRace: true} }
	cur, load := n.ownerUnderLoad(opts("1.0.0"), 3)
	r := n.rollout(t, cur, 50, opts)
	load.stop()
	closed := n.checkRollout(t, load, r)
	t.Logf("retirement visible to containerd: %d 'closing plugin' lines over %d handovers (%s)",
		len(closed), len(r.windows), closedByRequest(closed))
	n.checkRetirementInvisible(t, closed)
}

// checkRetirementInvisible fails the test for each closing-plugin line of
// containerd's log, showing what containerd logged about the plugin's
// connections just before it (which connection closed, which was appended)
// to tie it to the close that caused it; and for each instance log line
// saying the harness had to fall back to closing a connection at its
// socket, or plainly.
func (n *node) checkRetirementInvisible(t *testing.T, closed []string) {
	t.Helper()
	lines := strings.Split(n.containerdLog(), "\n")
	for _, c := range closed {
		i := slices.Index(lines, c)
		var ctx []string
		for j := i - 1; j >= 0 && len(ctx) < 6; j-- {
			if strings.Contains(lines[j], "connection to plugin") || strings.Contains(lines[j], "connected and synchronized") ||
				strings.Contains(lines[j], "synchronizing plugin") {
				ctx = append([]string{lines[j]}, ctx...)
			}
		}
		t.Errorf("containerd saw a retiring instance's connection close:\n  %s\n after:\n  %s", c, strings.Join(ctx, "\n  "))
	}
	logs, _ := filepath.Glob(filepath.Join(n.dir, pluginName+"-*.log"))
	for _, l := range logs {
		for _, line := range strings.Split(readFile(l), "\n") {
			if strings.Contains(line, "closing it at the socket") || strings.Contains(line, "closing it plainly") {
				t.Errorf("%s: %s", filepath.Base(l), line)
			}
		}
	}
}

// TestFailRequestUpgrades: a plugin that asks NRI to fail a request it
// fails (stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true}),
// through plugin.WithStubOptions, which the harness accepts) is upgraded
// 20 times under CRI load; no container creation fails and every event is
// acted on exactly once.
//
// containerd v2.2.9 embeds NRI v0.11.0, which has no failure policy (nor
// has v0.12.3, in containerd v2.4.2): it ignores the field, fails a request
// on any error a plugin returns, and drops a plugin whose connection breaks
// while letting the request proceed. On such a runtime a retiring instance
// cannot fail a creation by disconnecting; the test shows that the harness
// returns no error of its own across handovers, and that containerd never
// logs a closing-plugin line, each of which a runtime honouring
// FailRequest would have turned into a failed request.
func TestFailRequestUpgrades(t *testing.T) {
	n := newNode(t)
	opts := func(v string) instanceOpts {
		return instanceOpts{binary: "nri-audit-sync", version: v, noRace: true,
			extra: []string{"-fail-request", "-record", n.dir + "/record"}}
	}
	cur, load := n.ownerUnderLoad(opts("1.0.0"), 3)
	if !strings.Contains(cur.logText(), "FailRequest") {
		t.Fatalf("%s does not say it runs with the FailRequest policy:\n%s", cur.id, tail(cur.logText(), 10))
	}
	r := n.rollout(t, cur, 20, opts)
	load.stop()
	closed := n.checkRollout(t, load, r)
	t.Logf("containerd %s: %d failed creations; %d 'closing plugin' lines over %d handovers (%s)", n.e.ctrdVer,
		len(load.failures()["CreateContainer"]), len(closed), len(r.windows), closedByRequest(closed))
	n.checkRetirementInvisible(t, closed)
}
