//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClient talks CRI to containerd over gRPC, as the kubelet does.
type criClient struct {
	conn *grpc.ClientConn
	rt   cri.RuntimeServiceClient
	img  cri.ImageServiceClient
}

func dialCRI(sock string) (*criClient, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial CRI at %s: %w", sock, err)
	}
	return &criClient{conn: conn, rt: cri.NewRuntimeServiceClient(conn), img: cri.NewImageServiceClient(conn)}, nil
}

func (c *criClient) close() { _ = c.conn.Close() }

func (c *criClient) version(ctx context.Context) (string, error) {
	v, err := c.rt.Version(ctx, &cri.VersionRequest{})
	if err != nil {
		return "", err
	}
	return v.GetRuntimeName() + " " + v.GetRuntimeVersion(), nil
}

func (c *criClient) imageExists(ctx context.Context, name string) error {
	st, err := c.img.ImageStatus(ctx, &cri.ImageStatusRequest{Image: &cri.ImageSpec{Image: name}})
	if err != nil {
		return fmt.Errorf("image status %s: %w", name, err)
	}
	if st.GetImage() == nil {
		return fmt.Errorf("image %s not found after import", name)
	}
	return nil
}

// pod is a pod sandbox the tests created.
type pod struct {
	id  string
	cfg *cri.PodSandboxConfig
}

var podSeq, ctrSeq atomic.Int64

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runPod starts a pod on the host network (no CNI here) in the run's own
// cgroup parent, so teardown finds everything it left.
func (c *criClient) runPod(ctx context.Context, cgroupParent, name string) (*pod, error) {
	cfg := &cri.PodSandboxConfig{
		Metadata: &cri.PodSandboxMetadata{
			Name:      fmt.Sprintf("%s-%d", name, podSeq.Add(1)),
			Uid:       randomHex(8),
			Namespace: "e2e",
		},
		Labels: map[string]string{"nri-handover.test/e2e": "1"},
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent: "/" + cgroupParent,
			SecurityContext: &cri.LinuxSandboxSecurityContext{
				NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
			},
		},
	}
	r, err := c.rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return nil, err
	}
	return &pod{id: r.GetPodSandboxId(), cfg: cfg}, nil
}

func (c *criClient) createContainer(ctx context.Context, p *pod, name string) (string, error) {
	r, err := c.rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId: p.id,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: fmt.Sprintf("%s-%d", name, ctrSeq.Add(1))},
			Image:    &cri.ImageSpec{Image: imageName},
			Command:  []string{"/sleep"},
			Labels:   map[string]string{"nri-handover.test/e2e": "1"},
		},
		SandboxConfig: p.cfg,
	})
	if err != nil {
		return "", err
	}
	return r.GetContainerId(), nil
}

func (c *criClient) startContainer(ctx context.Context, id string) error {
	_, err := c.rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: id})
	return err
}

func (c *criClient) updateContainer(ctx context.Context, id string, cpuShares int64) error {
	_, err := c.rt.UpdateContainerResources(ctx, &cri.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &cri.LinuxContainerResources{CpuShares: cpuShares},
	})
	return err
}

func (c *criClient) stopContainer(ctx context.Context, id string) error {
	_, err := c.rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: id, Timeout: 5})
	return err
}

func (c *criClient) removeContainer(ctx context.Context, id string) error {
	_, err := c.rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id})
	return err
}

func (c *criClient) stopPod(ctx context.Context, id string) error {
	_, err := c.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func (c *criClient) removePod(ctx context.Context, id string) error {
	_, err := c.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

// stopRemovePod stops and removes a pod and its containers.
func (c *criClient) stopRemovePod(ctx context.Context, id string) error {
	return errors.Join(c.stopPod(ctx, id), c.removePod(ctx, id))
}

// removeAllPods stops and removes every pod, one by one, and returns how
// many there were.
func (c *criClient) removeAllPods(ctx context.Context) (int, error) {
	r, err := c.rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, p := range r.GetItems() {
		errs = append(errs, c.stopRemovePod(ctx, p.GetId()))
	}
	return len(r.GetItems()), errors.Join(errs...)
}

// listContainers returns the ids of the containers CRI knows.
func (c *criClient) listContainers(ctx context.Context) ([]string, error) {
	r, err := c.rt.ListContainers(ctx, &cri.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, ct := range r.GetContainers() {
		ids = append(ids, ct.GetId())
	}
	return ids, nil
}

// runtimeSpec is the part of a container's OCI spec the tests read.
type runtimeSpec struct {
	Annotations map[string]string `json:"annotations"`
	Process     struct {
		Env []string `json:"env"`
	} `json:"process"`
	Linux struct {
		Resources struct {
			CPU struct {
				Shares *uint64 `json:"shares"`
			} `json:"cpu"`
		} `json:"resources"`
	} `json:"linux"`
}

// env returns the values of the environment variable name in the spec,
// one per occurrence.
func (s *runtimeSpec) env(name string) []string {
	var vals []string
	for _, kv := range s.Process.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			vals = append(vals, v)
		}
	}
	return vals
}

// spec returns a container's runtime spec. Annotations added by NRI plugins
// are only there (ContainerStatus.Annotations shows the CRI config's), in
// the verbose info that `crictl inspect` prints.
func (c *criClient) spec(ctx context.Context, id string) (*runtimeSpec, error) {
	r, err := c.rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return nil, err
	}
	raw, ok := r.GetInfo()["info"]
	if !ok {
		return nil, fmt.Errorf("container %s: no verbose info", id)
	}
	var info struct {
		RuntimeSpec *runtimeSpec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return nil, fmt.Errorf("container %s: verbose info: %w", id, err)
	}
	if info.RuntimeSpec == nil {
		return nil, fmt.Errorf("container %s: no runtimeSpec in verbose info", id)
	}
	return info.RuntimeSpec, nil
}
