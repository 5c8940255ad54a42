package plugintest

import (
	"flag"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/protocol"
)

// TestMain keeps the NRI library's and the harness's logs (logrus's
// standard logger) quiet unless the tests run with -v, and fails the tests
// if a coordinator made a role or stage change outside the rules of
// internal/protocol/stages.go (logged at error level where it happened).
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		logrus.SetOutput(io.Discard)
	}
	code := m.Run()
	if n := protocol.IllegalChanges(); n != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d illegal role or stage changes of a coordinator (run with -v for the error logs)\n", n)
		code = max(code, 1)
	}
	os.Exit(code)
}
