// Command nri-mounts runs the mounts sample plugin: nri-mounts on the
// nri-handover harness, nri-mounts-bare on the bare NRI stub, from the same
// source but for the stub's import path and the version.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/nri-handover/nri-handover/plugin/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/sample-plugins/mounts"
)

// version is set at build time: -ldflags "-X main.version=2.0.0".
var version = "1.0.0"

type plugin struct {
	*mounts.Injector
	stub stub.Stub
}

func main() {
	var (
		pluginName = flag.String("name", "mounts", "plugin name to register with NRI")
		pluginIdx  = flag.String("idx", "", "plugin index to register with NRI")
		socketPath = flag.String("socket-path", "", "NRI socket to connect to")
	)
	flag.Parse()
	log := logrus.StandardLogger()
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano[:19] + ".000Z07:00"})

	p := &plugin{Injector: &mounts.Injector{Log: logrus.NewEntry(log)}}
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
	opts = append(opts, stub.WithVersion(version))
	var err error
	if p.stub, err = stub.New(p, opts...); err != nil {
		log.Fatalf("failed to create the plugin stub: %v", err)
	}
	if err := p.stub.Run(context.Background()); err != nil {
		log.Errorf("plugin exited: %v", err)
		os.Exit(1)
	}
}
