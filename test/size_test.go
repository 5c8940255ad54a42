package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHarnessAddsAtMostTwoMB builds the logger sample on the bare NRI stub
// and on the harness (as make build does, without the race detector) and
// checks that the harness binary links no Prometheus client (its metrics
// are off: it does not import plugin/metrics) and is at most 2 MB larger.
func TestHarnessAddsAtMostTwoMB(t *testing.T) {
	dir := t.TempDir()
	size := func(pkg string) int64 {
		out := filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		st, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	const pkg = "github.com/nri-handover/nri-handover/sample-plugins/logger/cmd/"
	bare, harness := size(pkg+"nri-logger-bare"), size(pkg+"nri-logger")
	t.Logf("logger: bare stub %.2f MB, harness %.2f MB: +%.2f MB", mb(bare), mb(harness), mb(harness-bare))
	if harness-bare > 2<<20 {
		t.Errorf("the harness adds %.2f MB, want at most 2 MB", mb(harness-bare))
	}
	out, err := exec.Command("go", "version", "-m", filepath.Join(dir, "nri-logger")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "prometheus") {
		t.Errorf("the harness binary, metrics off, links a Prometheus module:\n%s", out)
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }
