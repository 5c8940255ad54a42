package test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/plugin/metrics"
	"github.com/nri-handover/nri-handover/stamp"
)

// get fetches url and returns the status code and the body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsFollowAHandover scrapes both instances before and after a
// handover and checks that role, outcomes, switch durations and event
// counters move as they should.
func TestMetricsFollowAHandover(t *testing.T) {
	n := newNode(t)
	a := n.start("a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	sa := httptest.NewServer(metrics.Handler(a.p))
	defer sa.Close()

	n.lifecycles(3)
	m := scrape(t, sa.URL)
	if value(m, "nri_handover_role", map[string]string{"role": "owner"}) != 1 {
		t.Fatal("owner does not report role owner")
	}
	if value(m, "nri_handover_handovers_total", map[string]string{"outcome": "first-owner"}) != 1 {
		t.Fatal("first claim not counted")
	}
	actedA := value(m, "nri_handover_events_total", map[string]string{"event": "StartContainer", "result": "acted"})
	if actedA != 6 {
		t.Fatalf("StartContainer acted = %v, want 6 (3 pods x 2 containers)", actedA)
	}
	if code, body := get(t, sa.URL+"/readyz"); code != 200 || !strings.Contains(body, "owner") {
		t.Fatalf("owner /readyz: %d %q", code, body)
	}

	b := n.start("b", "2.0.0")
	waitRole(t, b, handover.RoleOwner)
	sb := httptest.NewServer(metrics.Handler(b.p))
	defer sb.Close()
	n.lifecycles(2)

	// A forged stamp is counted by the owner.
	key, _ := stamp.AnnotationKey("audit")
	pod, err := n.rt.RunPod(context.Background(), "forged")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.rt.CreateContainer(context.Background(), pod.Id, "c", map[string]string{key: "v1;1.0.0;x;AAAAAAAAAAAAAAAAAAAAAA"}); err != nil {
		t.Fatal(err)
	}

	ma, mb := scrape(t, sa.URL), scrape(t, sb.URL)
	if value(ma, "nri_handover_role", map[string]string{"role": "retired"}) != 1 ||
		value(ma, "nri_handover_role", map[string]string{"role": "owner"}) != 0 {
		t.Fatal("old owner does not report role retired")
	}
	if value(ma, "nri_handover_handovers_total", map[string]string{"outcome": "yielded"}) != 1 {
		t.Fatal("yield not counted on the old owner")
	}
	if value(mb, "nri_handover_handovers_total", map[string]string{"outcome": "took-over"}) != 1 {
		t.Fatal("take-over not counted on the new owner")
	}
	if value(mb, "nri_handover_switch_duration_seconds", nil) != 1 {
		t.Fatal("switch duration not observed once")
	}
	if value(mb, "nri_handover_epoch", nil) != 2 {
		t.Fatalf("epoch %v, want 2", value(mb, "nri_handover_epoch", nil))
	}
	if got := value(ma, "nri_handover_events_total", map[string]string{"event": "StartContainer", "result": "acted"}); got != actedA {
		t.Fatalf("retired instance acted after the handover: %v -> %v", actedA, got)
	}
	if got := value(ma, "nri_handover_events_total", map[string]string{"event": "StartContainer", "result": "skipped"}); got != 4 {
		t.Fatalf("retired instance skipped %v StartContainer, want 4", got)
	}
	if got := value(mb, "nri_handover_events_total", map[string]string{"event": "StartContainer", "result": "acted"}); got != 4 {
		t.Fatalf("new owner acted on %v StartContainer, want 4", got)
	}
	if value(mb, "nri_handover_invalid_stamps_total", nil) != 1 {
		t.Fatal("forged stamp not counted")
	}
	if value(mb, "nri_handover_info", map[string]string{"version": "2.0.0", "instance": "b"}) != 1 {
		t.Fatal("info metric missing")
	}
	// a yielded to b, which owns: a is b's live fallback and stays ready.
	if code, body := get(t, sa.URL+"/readyz"); code != http.StatusOK || !strings.Contains(body, "live fallback for owner b") {
		t.Fatalf("retired /readyz: %d %q", code, body)
	}
	if code, _ := get(t, sa.URL+"/healthz"); code != 200 {
		t.Fatalf("retired /healthz: %d", code)
	}
	rep := n.check()
	if rep.ByVersion["2.0.0"] == 0 {
		t.Fatal("new owner never acted")
	}
}
