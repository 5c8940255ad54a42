package protocol

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// TestMain records every role change the package's tests make and fails
// the run if any stage or role change broke the rules of stages.go (each
// is logged at error level where it happens, and a role change missing
// from legal is counted there). With -v it lists the changes of legal the
// tests made and those they did not.
func TestMain(m *testing.M) {
	var mu sync.Mutex
	seen := map[[2]api.Role]int{}
	recordRoleChange = func(c *Coordinator, from, to api.Role) {
		if c.self == nil {
			return // a bare coordinator of a table test
		}
		mu.Lock()
		seen[[2]api.Role{from, to}]++
		mu.Unlock()
	}
	code := m.Run()
	if testing.Verbose() {
		mu.Lock()
		var lines []string
		for from, tos := range legal {
			for to := range tos {
				lines = append(lines, fmt.Sprintf("  %s -> %s: %d", roleName(from), roleName(to), seen[[2]api.Role{from, to}]))
			}
		}
		mu.Unlock()
		sort.Strings(lines)
		fmt.Println("role changes made by the tests (of legal):")
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	if n := illegalChanges.Load(); n != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d illegal stage or role changes (see the error logs)\n", n)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
