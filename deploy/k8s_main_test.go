//go:build k8s

package deploy_test

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// node is the one-node cluster of the run, brought up by TestMain.
var node *cluster

// TestMain brings the node up once for the k8s suite (test/k8s/run.sh runs
// it with -tags k8s), runs the tests and tears the node down, also on
// SIGINT/SIGTERM and shortly before the test binary's -timeout would kill
// it without running any cleanup.
func TestMain(m *testing.M) {
	flag.Parse()
	if why := cannotRun(); why != "" {
		fmt.Println("k8s: SKIPPED:", why)
		os.Exit(0)
	}
	node = &cluster{start: time.Now()}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		node.progress("got %v", s)
		node.teardown()
		os.Exit(1)
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > time.Minute {
			time.AfterFunc(d-45*time.Second, func() {
				node.progress("the test timeout (%v) is near: tearing down", d)
				node.teardown()
				os.Exit(1)
			})
		}
	}
	if err := node.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "k8s: setup:", err)
		node.teardown()
		os.Exit(1)
	}
	code := m.Run()
	node.teardown()
	node.progress("done")
	os.Exit(code)
}
