package plugintest

import (
	"flag"
	"io"
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestMain keeps the NRI library's and the harness's logs (logrus's
// standard logger) quiet unless the tests run with -v.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		logrus.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}
