// Command nri-resources-bare runs the resources sample plugin: nri-resources on the
// nri-handover harness, nri-resources-bare on the bare NRI stub, from the same
// source but for the stub's import path and the version.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/sample-plugins/resources"
)

// version is set at build time: -ldflags "-X main.version=2.0.0".
var version = "1.0.0"

type plugin struct {
	*resources.Defaults
	stub stub.Stub
}

func main() {
	var (
		pluginName = flag.String("name", "resources", "plugin name to register with NRI")
		pluginIdx  = flag.String("idx", "", "plugin index to register with NRI")
		socketPath = flag.String("socket-path", "", "NRI socket to connect to")
		memory     = flag.Int64("default-memory", 256<<20, "memory limit for containers without one (bytes)")
		shares     = flag.Uint64("cpu-shares", 512, "CPU shares for every container")
	)
	flag.Parse()
	log := logrus.StandardLogger()
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano[:19] + ".000Z07:00"})

	p := &plugin{Defaults: &resources.Defaults{MemoryLimit: *memory, CPUShares: *shares, Log: logrus.NewEntry(log)}}
	opts := []stub.Option{
		stub.WithPluginName(*pluginName),
		stub.WithOnClose(func() { log.Warn("connection to the runtime lost") }),
	}
	if *pluginIdx != "" {
		opts = append(opts, stub.WithPluginIdx(*pluginIdx))
	}
	if *socketPath != "" {
		opts = append(opts, stub.WithSocketPath(*socketPath))
	}
	var err error
	if p.stub, err = stub.New(p, opts...); err != nil {
		log.Fatalf("failed to create the plugin stub: %v", err)
	}
	if err := p.stub.Run(context.Background()); err != nil {
		log.Errorf("plugin exited: %v", err)
		os.Exit(1)
	}
}
