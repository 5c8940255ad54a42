package plugintest_test

import (
	"context"
	"fmt"
	"log"
	"sort"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/plugintest"
)

// envInjector is an ordinary NRI stub plugin: it adds an environment
// variable naming its version to every container and watches stops.
type envInjector struct{ version string }

func (p *envInjector) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("INJECTED_BY", "env-injector "+p.version)
	return adjust, nil, nil
}

func (p *envInjector) StopContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func newEnvInjector(version string) (interface{}, []plugin.Option) {
	return &envInjector{version: version}, nil
}

// An upgrade and a rollback under load: every event reached the plugin's
// handlers exactly once, and every container carries one valid stamp.
func Example() {
	node, err := plugintest.NewNode(plugintest.Config{Plugin: newEnvInjector, Name: "env-injector"})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()

	v1, err := node.Start("1.0.0")
	if err != nil {
		log.Fatal(err)
	}
	if err := v1.WaitOwner(ctx); err != nil {
		log.Fatal(err)
	}
	must(node.Lifecycles(ctx, 3, 2))
	_, err = node.Upgrade(ctx, "2.0.0") // v2 takes over, then v1 stops
	must(err)
	must(node.Lifecycles(ctx, 3, 2))
	_, err = node.Rollback(ctx, "1.0.0")
	must(err)
	must(node.Lifecycles(ctx, 3, 2))

	res, err := node.Check()
	must(err)
	fmt.Println(res.Events)
	versions := make([]string, 0, len(res.Events.ByVersion))
	for v := range res.Events.ByVersion {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		fmt.Printf("version %s acted on %d events\n", v, res.Events.ByVersion[v])
	}
	fmt.Println("stamp problems:", len(res.StampProblems))
	// Output:
	// events 36, acted 36, duplicates 0, missed 0
	// version 1.0.0 acted on 24 events
	// version 2.0.0 acted on 12 events
	// stamp problems: 0
}

// A crashed owner hands nothing over; the instance it took over from
// (still running, retired) takes ownership back, and nothing is lost.
func ExampleInstance_Crash() {
	node, err := plugintest.NewNode(plugintest.Config{Plugin: newEnvInjector, Name: "env-injector"})
	must(err)
	defer node.Close()
	ctx := context.Background()

	v1, err := node.Start("1.0.0")
	must(err)
	must(v1.WaitOwner(ctx))
	v2, err := node.Start("2.0.0")
	must(err)
	must(v2.WaitOwner(ctx))
	must(node.Lifecycles(ctx, 2, 2))

	v2.Crash()
	must(v1.WaitOwner(ctx))
	must(node.Lifecycles(ctx, 2, 2))
	fmt.Println(node.Verify())
	// Output:
	// <nil>
}

// Upgrades under load: pod lifecycles run on two workers while the
// plugin is upgraded and rolled back ten times.
func ExampleNode_Load() {
	node, err := plugintest.NewNode(plugintest.Config{Plugin: newEnvInjector, Name: "env-injector"})
	must(err)
	defer node.Close()
	ctx := context.Background()

	v1, err := node.Start("1.0.0")
	must(err)
	must(v1.WaitOwner(ctx))
	stop := node.Load(ctx, 2, 2)
	for i := 0; i < 10; i++ {
		version := []string{"2.0.0", "1.0.0"}[i%2]
		_, err := node.Upgrade(ctx, version)
		must(err)
	}
	must(stop())

	res, err := node.Check()
	must(err)
	fmt.Println("duplicates", res.Events.Duplicates, "missed", res.Events.Missed, "ok", res.OK())
	// Output:
	// duplicates 0 missed 0 ok true
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
