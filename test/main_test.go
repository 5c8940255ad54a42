package test

import (
	"flag"
	"io"
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestMain silences the NRI library's logs (it logs through logrus's
// standard logger) unless the tests run with -v.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		logrus.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}
