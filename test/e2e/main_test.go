//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

var (
	theRun     *env
	skipReason string
)

// theEnv returns the run's environment, or skips the test when this machine
// cannot run the suite.
func theEnv(t *testing.T) *env {
	t.Helper()
	if skipReason != "" {
		t.Skip("e2e: skipped: " + skipReason)
	}
	return theRun
}

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		logrus.SetOutput(io.Discard)
	}
	e := &env{start: time.Now()}
	if skipReason = cannotRun(); skipReason != "" {
		e.progress("skipped: %s", skipReason)
		os.Exit(m.Run())
	}

	// Interrupted (Ctrl-C, CI cancelling): tear down in order, then exit.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		e.progress("got %v; tearing down", s)
		e.teardown()
		os.Exit(2)
	}()
	// `go test -timeout` kills the test binary without running deferred
	// code: tear down shortly before that, with the goroutines printed.
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			margin := min(30*time.Second, d/10)
			time.AfterFunc(d-margin, func() {
				e.progress("test timeout (%v) is %v away: tearing down; goroutines:", d, margin)
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				e.teardown()
				os.Exit(3)
			})
		}
	}

	if err := e.setup(); err != nil {
		e.progress("set-up failed: %v", err)
		e.teardown()
		fmt.Println("FAIL: e2e set-up failed")
		os.Exit(1)
	}
	theRun = e
	e.progress("set-up done; running the tests")
	code := m.Run()
	e.teardown()
	e.progress("done")
	os.Exit(code)
}
