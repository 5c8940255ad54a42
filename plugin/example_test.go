package plugin_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-handover/nri-handover/plugin"
)

// envInjector is an ordinary NRI stub plugin: the same handler interfaces
// as github.com/containerd/nri/pkg/stub.
type envInjector struct{}

func (envInjector) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("INJECTED_BY", "env-injector")
	return adjust, nil, nil
}

func (envInjector) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	log.Printf("container %s stopped", c.GetId())
	return nil, nil
}

// Converting a stub plugin: stub.New(p, stub.WithPluginName(...), ...)
// becomes plugin.New(p, plugin.WithVersion(...), plugin.WithPluginName(...),
// ...); Run is the same. The handlers do not change.
func Example() {
	p, err := plugin.New(envInjector{},
		plugin.WithVersion("1.2.0"), // new: the plugin's own version
		plugin.WithPluginName("env-injector"),
		plugin.WithPluginIdx("50"),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// On SIGTERM, an owner first hands over to a standby instance.
	if err := p.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
