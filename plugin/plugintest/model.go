package plugintest

import (
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

// cloneMsg deep-copies a protobuf message (nil stays nil).
func cloneMsg[T proto.Message](m T) T {
	return proto.Clone(m).(T)
}

// newContainer returns the model of a container being created.
func newContainer(id, podID, name string, annotations map[string]string) *api.Container {
	ann := make(map[string]string, len(annotations))
	for k, v := range annotations {
		ann[k] = v
	}
	return &api.Container{
		Id:           id,
		PodSandboxId: podID,
		Name:         name,
		State:        api.ContainerState_CONTAINER_CREATED,
		Labels:       map[string]string{"io.kubernetes.container.name": name},
		Annotations:  ann,
		Args:         []string{"/bin/sim", name},
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOSTNAME=" + name},
		Mounts:       []*api.Mount{},
		Linux: &api.LinuxContainer{
			Resources: &api.LinuxResources{
				Cpu:    &api.LinuxCPU{Shares: api.UInt64(1024)},
				Memory: &api.LinuxMemory{},
			},
			CgroupsPath: "sim.slice:" + podID + ":" + id,
		},
		CreatedAt: time.Now().UnixNano(),
	}
}

// applyAdjustment applies a CreateContainer adjustment to a container the way
// containerd applies it to the OCI spec (for the parts the model keeps).
func applyAdjustment(c *api.Container, a *api.ContainerAdjustment) {
	if a == nil {
		return
	}

	// Annotations: removals first, then additions (the collected adjustment
	// can hold both "-key" and "key" when a plugin replaced an annotation).
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	for k := range a.Annotations {
		if key, marked := api.IsMarkedForRemoval(k); marked {
			delete(c.Annotations, key)
		}
	}
	for k, v := range a.Annotations {
		if _, marked := api.IsMarkedForRemoval(k); !marked {
			c.Annotations[k] = v
		}
	}

	adjustEnv(c, a.Env)
	adjustMounts(c, a.Mounts)
	if len(a.Args) > 0 {
		c.Args = append([]string(nil), a.Args...)
	}
	if res := a.GetLinux().GetResources(); res != nil {
		mergeResources(c, res)
	}
}

// adjustEnv mirrors the runtime-tools generator's AdjustEnv.
func adjustEnv(c *api.Container, env []*api.KeyValue) {
	if len(env) == 0 {
		return
	}
	mod := map[string]*api.KeyValue{}
	for _, e := range env {
		key, _ := api.IsMarkedForRemoval(e.Key)
		mod[key] = e
	}
	var out []string
	for _, kv := range c.Env {
		key, _, _ := strings.Cut(kv, "=")
		if m, ok := mod[key]; ok {
			delete(mod, key)
			if _, marked := m.IsMarkedForRemoval(); !marked {
				out = append(out, m.Key+"="+m.Value)
			}
			continue
		}
		out = append(out, kv)
	}
	for _, e := range env {
		if _, marked := e.IsMarkedForRemoval(); marked {
			continue
		}
		if _, ok := mod[e.Key]; ok {
			out = append(out, e.Key+"="+e.Value)
			delete(mod, e.Key)
		}
	}
	c.Env = out
}

// adjustMounts mirrors the runtime-tools generator's AdjustMounts (without
// propagation handling): a mount replaces any mount at the same destination.
func adjustMounts(c *api.Container, mounts []*api.Mount) {
	for _, m := range mounts {
		dest, marked := m.IsMarkedForRemoval()
		kept := c.Mounts[:0:0]
		for _, old := range c.Mounts {
			if old.Destination != dest {
				kept = append(kept, old)
			}
		}
		c.Mounts = kept
		if !marked {
			c.Mounts = append(c.Mounts, cloneMsg(m))
		}
	}
}

// mergeResources merges the set fields of res into the container's resources.
func mergeResources(c *api.Container, res *api.LinuxResources) {
	if res == nil {
		return
	}
	if c.Linux == nil {
		c.Linux = &api.LinuxContainer{}
	}
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	dst := c.Linux.Resources

	if cpu := res.Cpu; cpu != nil {
		if dst.Cpu == nil {
			dst.Cpu = &api.LinuxCPU{}
		}
		d := dst.Cpu
		setOpt(&d.Shares, cpu.Shares)
		setOpt(&d.Quota, cpu.Quota)
		setOpt(&d.Period, cpu.Period)
		setOpt(&d.RealtimeRuntime, cpu.RealtimeRuntime)
		setOpt(&d.RealtimePeriod, cpu.RealtimePeriod)
		if cpu.Cpus != "" {
			d.Cpus = cpu.Cpus
		}
		if cpu.Mems != "" {
			d.Mems = cpu.Mems
		}
	}
	if mem := res.Memory; mem != nil {
		if dst.Memory == nil {
			dst.Memory = &api.LinuxMemory{}
		}
		d := dst.Memory
		setOpt(&d.Limit, mem.Limit)
		setOpt(&d.Reservation, mem.Reservation)
		setOpt(&d.Swap, mem.Swap)
		setOpt(&d.Kernel, mem.Kernel)
		setOpt(&d.KernelTcp, mem.KernelTcp)
		setOpt(&d.Swappiness, mem.Swappiness)
		setOpt(&d.DisableOomKiller, mem.DisableOomKiller)
		setOpt(&d.UseHierarchy, mem.UseHierarchy)
	}
	if len(res.HugepageLimits) > 0 {
		dst.HugepageLimits = nil
		for _, h := range res.HugepageLimits {
			dst.HugepageLimits = append(dst.HugepageLimits, cloneMsg(h))
		}
	}
	setOpt(&dst.BlockioClass, res.BlockioClass)
	setOpt(&dst.RdtClass, res.RdtClass)
	setOpt(&dst.Pids, res.Pids)
	if len(res.Unified) > 0 {
		if dst.Unified == nil {
			dst.Unified = map[string]string{}
		}
		for k, v := range res.Unified {
			dst.Unified[k] = v
		}
	}
	if len(res.Devices) > 0 {
		dst.Devices = nil
		for _, d := range res.Devices {
			dst.Devices = append(dst.Devices, cloneMsg(d))
		}
	}
}

// setOpt replaces *dst with a copy of src if src is set.
func setOpt[T proto.Message](dst *T, src T) {
	if !src.ProtoReflect().IsValid() {
		return
	}
	*dst = cloneMsg(src)
}
