package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// samples are the sample plugins built both on the bare NRI stub and on
// the harness, from the same source but for the lines that port them.
var samples = []string{"logger", "resources", "mounts", "validator"}

// changedLines is how many lines of b are not in a longest common
// subsequence of a and b's lines, and how many of a are not: the lines a
// port adds or changes, and those it removes.
func changedLines(a, b []string) (added, removed int) {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	return len(b) - lcs[0][0], len(a) - lcs[0][0]
}

// TestSamplesPortInFiveLines: each sample's harness main differs from its
// bare-stub main in at most 5 lines (added or changed), and removes none
// but those it changes.
func TestSamplesPortInFiveLines(t *testing.T) {
	for _, s := range samples {
		read := func(cmd string) []string {
			b, err := os.ReadFile(filepath.Join("..", "sample-plugins", s, "cmd", cmd, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			return strings.Split(string(b), "\n")
		}
		bare, harness := read("nri-"+s+"-bare"), read("nri-"+s)
		added, removed := changedLines(bare, harness)
		t.Logf("%s: the port adds or changes %d lines, removes %d (of %d)", s, added, removed, len(bare))
		if added > 5 || removed > added {
			t.Errorf("%s: the harness main adds or changes %d lines and removes %d: want at most 5, removing none but those changed",
				s, added, removed)
		}
		if added == 0 {
			t.Errorf("%s: the two mains are the same", s)
		}
	}
}
