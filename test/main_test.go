package test

import (
	"testing"

	"github.com/nri-handover/nri-handover/internal/testutil"
)

// TestMain silences the NRI library's logs (it logs through logrus's
// standard logger) unless the tests run with -v.
func TestMain(m *testing.M) { testutil.Main(m) }
