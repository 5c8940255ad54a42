package plugin

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-handover/nri-handover/handover"
	"github.com/sirupsen/logrus"
)

// benchAuthor handles two events and does nothing.
type benchAuthor struct{}

func (benchAuthor) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("BENCH", "1")
	return adjust, nil, nil
}

func (benchAuthor) StartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

// BenchmarkEvent: the harness's own work per event, without the runtime
// and the wire (test/bench measures those), on an owner: the author's
// handler called directly, and through the harness's adapter. For
// StartContainer that is the gate (the event section, the owner-name fence,
// the counters); for CreateContainer also the stamp check, the signing and
// the annotation.
func BenchmarkEvent(b *testing.B) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	root, err := os.MkdirTemp("", "nhb-") // short: socket paths are limited
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	author := benchAuthor{}
	p, err := New(author, WithVersion("1.0.0"), WithPluginName("bench"), WithPluginIdx("10"),
		WithHandoverDir(root), WithInstanceID("b1"), WithLogger(logrus.NewEntry(quiet)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.coord.Close(); p.dir.Close() })
	a := &adapter{p: p, synced: make(chan struct{}), tag: p.coord.Conn(^uint64(0))}
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, nil, nil); err != nil {
		b.Fatal(err)
	}
	if r := p.Role(); r != handover.RoleOwner {
		b.Fatalf("role %v after Synchronize, want owner", r)
	}
	pod := &api.PodSandbox{Id: "pod-1", Name: "pod", Namespace: "default"}
	c := &api.Container{Id: "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", PodSandboxId: pod.Id,
		Annotations: map[string]string{"io.kubernetes.container.name": "c"}}

	b.Run("StartContainer/author", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := author.StartContainer(ctx, pod, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StartContainer/harness", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := a.StartContainer(ctx, pod, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CreateContainer/author", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := author.CreateContainer(ctx, pod, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CreateContainer/harness", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			adjust, _, err := a.CreateContainer(ctx, pod, c)
			if err != nil || adjust.GetAnnotations()[p.stampKey] == "" {
				b.Fatalf("CreateContainer: %v, %v", adjust, err)
			}
		}
	})
}
