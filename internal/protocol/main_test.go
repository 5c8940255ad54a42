package protocol

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the package's tests if any test made a stage or role
// change that breaks the rules of stages.go (each is logged at error
// level where it happens).
func TestMain(m *testing.M) {
	code := m.Run()
	if n := illegalChanges.Load(); n != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d illegal stage or role changes (see the error logs)\n", n)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
