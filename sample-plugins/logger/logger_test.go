package logger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/sample-plugins/logger"
)

// counter counts the logger's entries by event and object.
type counter struct {
	mu   sync.Mutex
	seen map[sim.EventKey]int
}

func (c *counter) Levels() []logrus.Level { return logrus.AllLevels }
func (c *counter) Fire(e *logrus.Entry) error {
	if ev, ok := e.Data["event"].(string); ok {
		c.mu.Lock()
		c.seen[sim.EventKey{Event: sim.Event(ev), ID: e.Data["id"].(string)}]++
		c.mu.Unlock()
	}
	return nil
}

func (c *counter) newLogger() *logger.Logger {
	l := logrus.New()
	l.SetOutput(testutil.Discard)
	l.AddHook(c)
	return &logger.Logger{Log: logrus.NewEntry(l)}
}

// TestUpgrade: logger v1 serves, v2 takes over, v1 stops; across both,
// every event the runtime issued was logged exactly once.
func TestUpgrade(t *testing.T) {
	rt := testutil.StartRuntime(t, sim.Options{})
	root := testutil.ShortTempDir(t, "nhl-")
	c := &counter{seen: map[sim.EventKey]int{}}
	_, v1 := testutil.StartOwner(t, rt, root, "logger", "v1", "1.0.0", c.newLogger())
	for i := 0; i < 3; i++ {
		if err := rt.Lifecycle(context.Background(), fmt.Sprintf("a%d", i), 2); err != nil {
			t.Fatal(err)
		}
	}
	testutil.StartOwner(t, rt, root, "logger", "v2", "2.0.0", c.newLogger())
	if err := v1.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := rt.Lifecycle(context.Background(), fmt.Sprintf("b%d", i), 2); err != nil {
			t.Fatal(err)
		}
	}
	issued := rt.Issued()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range issued {
		if c.seen[k] != n {
			t.Errorf("%v: issued %d, logged %d", k, n, c.seen[k])
		}
	}
	if len(c.seen) != len(issued) {
		t.Errorf("logged %d distinct events, issued %d", len(c.seen), len(issued))
	}
}
