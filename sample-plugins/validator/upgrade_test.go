package validator_test

import (
	"context"
	"io"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
	"github.com/nri-handover/nri-handover/sample-plugins/validator"
)

// TestUpgradeWithPlugintest: upgrade 1.0.0 -> 2.0.0 and roll back under
// pod lifecycles; every event reached exactly one instance's handlers and
// every container carries one valid stamp.
func TestUpgradeWithPlugintest(t *testing.T) {
	node, err := plugintest.NewNode(plugintest.Config{Name: "validator", Plugin: func(string) (interface{}, []plugin.Option) {
		l := logrus.New()
		l.SetOutput(io.Discard)
		return &validator.MountPolicy{Allowed: []string{"/var/lib/shared"}, Log: logrus.NewEntry(l)}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	res, err := node.Rollout(context.Background(), "1.0.0", "2.0.0", "1.0.0")
	if err != nil || !res.OK() {
		t.Fatalf("rollout: %v %v", err, res.Err())
	}
	t.Logf("%v", res.Events)
}
