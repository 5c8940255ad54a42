package names

import (
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/stamp"
)

func TestKeyKeepsValidNames(t *testing.T) {
	for _, n := range []string{"audit", "a", "my_plugin.v2", "device-injector", strings.Repeat("a", 63)} {
		if got := Key(n); got != n {
			t.Errorf("Key(%q) = %q, want it unchanged", n, got)
		}
	}
}

// TestKeyMapsEveryNameNRIAccepts: each name NRI accepts maps to a valid
// annotation key segment, the same each time, and distinct names (here
// ones that differ only in characters the mapping replaces) to distinct keys.
func TestKeyMapsEveryNameNRIAccepts(t *testing.T) {
	in := []string{
		"abcd-0123+EFGH_4567.ijkl", "abcd-0123-EFGH_4567.ijkl", "abcd-0123.EFGH_4567.ijkl",
		"a+b", "a-b", "a_b", "+", "++", "-", "_", ".", "-a-", "_lead", "trail.",
		strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("x", 62) + "+",
		strings.Repeat("+", 80),
	}
	seen := map[string]string{}
	for _, n := range in {
		if err := api.CheckPluginName(n); err != nil {
			t.Fatalf("test input %q is not an NRI name: %v", n, err)
		}
		k := Key(n)
		if !Valid(k) {
			t.Errorf("Key(%q) = %q: not valid", n, k)
		}
		if _, err := stamp.AnnotationKey(k); err != nil {
			t.Errorf("Key(%q) = %q: stamp refuses it: %v", n, k, err)
		}
		if Key(n) != k {
			t.Errorf("Key(%q) not deterministic", n)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("Key(%q) = Key(%q) = %q", n, prev, k)
		}
		seen[k] = n
	}
	if got := Key("abcd-0123+EFGH_4567.ijkl"); !strings.HasPrefix(got, "abcd-0123-EFGH_4567.ijkl-x") {
		t.Errorf("Key keeps no readable prefix: %q", got)
	}
}
