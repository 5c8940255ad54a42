// Package versioned is a sample NRI plugin whose behaviour changes between
// versions, to show how a new version brings the containers of an older one
// up to date with the nri-handover Reconcile hook.
//
// Every version injects the environment variable VERSIONED_TIER into the
// containers it creates and gives those that have no CPU limit a CFS quota;
// the values come from the major version (see ProfileFor):
//
//	v1.x  VERSIONED_TIER=v1  cpu quota 50 ms per 50 ms period (1 CPU)
//	v2.x  VERSIONED_TIER=v2  cpu quota 100 ms per 50 ms period (2 CPUs)
//
// An environment variable is fixed when a container is created, a resource
// is not: when v2 takes over from v1 on a node, its Reconcile asks the
// runtime (Plugin.UpdateContainers) to raise the quota of the running
// containers v1 created, and only of those that are not up to date yet. The
// environment of v1's containers keeps saying v1: that is what the container
// was started with.
//
// The resource is one the runtimes update in place: containerd (v2.2 to
// v2.4) applies an NRI update through its CRI resource update, which has no
// pids limit, so a pids.max update is accepted and silently dropped. The
// plugin never fights the kubelet: it sets a quota only on a container the
// kubelet gave none (no CPU limit in the pod spec), and it marks its quotas
// with a period the kubelet does not use (Period, 50 ms; the kubelet's is
// 100 ms), so a later version changes only the quotas a version set.
package versioned

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/hashicorp/go-version"

	"github.com/nri-handover/nri-handover/plugin"
)

// EnvVar is the environment variable the plugin injects into every
// container it creates; its value is the tier of the creating version.
const EnvVar = "VERSIONED_TIER"

// Period is the CFS period (microseconds) of every quota the plugin sets;
// it tells the plugin's quotas from the kubelet's (100000).
const Period = 50000

// Profile is what one major version applies to containers.
type Profile struct {
	// Tier is the value of EnvVar.
	Tier string
	// CPUQuota is the container's CFS quota in microseconds per Period.
	CPUQuota int64
}

// ProfileFor returns the profile of a plugin version: v1 for major version
// 1 (and 0), v2 for major version 2 and later.
func ProfileFor(v *version.Version) Profile {
	if seg := v.Segments(); len(seg) > 0 && seg[0] >= 2 {
		return Profile{Tier: "v2", CPUQuota: 100000}
	}
	return Profile{Tier: "v1", CPUQuota: 50000}
}

// Plugin is the versioned sample plugin. Create it with New.
type Plugin struct {
	version *version.Version
	profile Profile

	// OnReconcile, if set, is called at the end of every Reconcile with
	// the ids of the containers it updated (sorted) and its error. Tests
	// use it to wait for the reconciliation.
	OnReconcile func(updated []string, err error)

	mu     sync.Mutex
	logf   func(format string, args ...any)
	synced []string
}

// New returns the plugin for version v (hashicorp/go-version syntax).
func New(v string) (*Plugin, error) {
	ver, err := version.NewVersion(v)
	if err != nil {
		return nil, fmt.Errorf("versioned: version %q: %w", v, err)
	}
	return &Plugin{version: ver, profile: ProfileFor(ver), logf: func(string, ...any) {}}, nil
}

// SetLogf sets where the plugin logs what it does.
func (p *Plugin) SetLogf(logf func(format string, args ...any)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.logf = logf
}

func (p *Plugin) log(format string, args ...any) {
	p.mu.Lock()
	logf := p.logf
	p.mu.Unlock()
	logf(format, args...)
}

// Version is the plugin's version as given to New.
func (p *Plugin) Version() string { return p.version.Original() }

// Profile is what this version applies.
func (p *Plugin) Profile() Profile { return p.profile }

// CreateContainer injects EnvVar and, if the container has no CPU limit,
// sets the CPU quota of this version.
// The harness calls it only on the instance that owns the plugin, and never
// for a container another instance already handled.
func (p *Plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv(EnvVar, p.profile.Tier)
	if CPUQuota(c) <= 0 {
		adjust.SetLinuxCPUPeriod(Period)
		adjust.SetLinuxCPUQuota(p.profile.CPUQuota)
		p.log("container %s: %s=%s, cpu quota %d/%d", c.GetId(), EnvVar, p.profile.Tier, p.profile.CPUQuota, Period)
	} else {
		p.log("container %s: %s=%s, its own cpu limit kept", c.GetId(), EnvVar, p.profile.Tier)
	}
	return adjust, nil, nil
}

// Synchronize sets this version's CPU quota on the running containers no
// instance of the plugin created (they existed before it was installed):
// the harness hands those, once, to the first owner's Synchronize; a newer
// version gets them in Reconcile, as if that owner had stamped them.
func (p *Plugin) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	updates, ids := p.updatesFor(ctrs)
	if len(ids) > 0 {
		p.log("synchronize: cpu quota %d on %d containers created before the plugin: %v", p.profile.CPUQuota, len(ids), ids)
	}
	p.mu.Lock()
	p.synced = ids
	p.mu.Unlock()
	return updates, nil
}

// Synchronized returns the containers the last Synchronize updated.
func (p *Plugin) Synchronized() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.synced...)
}

// Reconcile brings the containers created by older versions up to this
// version's profile. The harness calls it once each time this instance
// becomes owner, outside any NRI request, with the running containers whose
// stamp names an older version; it skips those already up to date (a
// previous instance of this version reconciled them), so running it again
// changes nothing.
func (p *Plugin) Reconcile(_ context.Context, hp *plugin.Plugin, older []*plugin.StampedContainer) (err error) {
	var ctrs []*api.Container
	for _, sc := range older {
		ctrs = append(ctrs, sc.Container)
	}
	updates, ids := p.updatesFor(ctrs)
	defer func() {
		if p.OnReconcile != nil {
			p.OnReconcile(ids, err)
		}
	}()
	if len(updates) == 0 {
		p.log("reconcile: %d containers of older versions, all up to date", len(older))
		return nil
	}
	failed, err := hp.UpdateContainers(updates)
	if err != nil {
		return fmt.Errorf("versioned: reconcile %d containers: %w", len(updates), err)
	}
	if len(failed) > 0 {
		var bad []string
		for _, u := range failed {
			bad = append(bad, u.GetContainerId())
		}
		return fmt.Errorf("versioned: reconcile: the runtime failed to update %v", bad)
	}
	p.log("reconcile: cpu quota %d on %d containers of older versions: %v", p.profile.CPUQuota, len(ids), ids)
	return nil
}

// updatesFor returns updates for the containers whose CPU quota is not
// this version's: those with no quota, and those with a quota of the
// plugin's (its Period) of another value; a container with the kubelet's
// quota is left alone. It returns their ids too (sorted).
func (p *Plugin) updatesFor(ctrs []*api.Container) ([]*api.ContainerUpdate, []string) {
	var (
		updates []*api.ContainerUpdate
		ids     []string
	)
	for _, c := range ctrs {
		q := CPUQuota(c)
		if q == p.profile.CPUQuota && CPUPeriod(c) == Period || q > 0 && CPUPeriod(c) != Period {
			continue
		}
		u := &api.ContainerUpdate{ContainerId: c.GetId()}
		u.SetLinuxCPUPeriod(Period)
		u.SetLinuxCPUQuota(p.profile.CPUQuota)
		updates = append(updates, u)
		ids = append(ids, c.GetId())
	}
	sort.Strings(ids)
	return updates, ids
}

// CPUQuota returns a container's CFS quota (0 if none is set, -1 for
// unlimited).
func CPUQuota(c *api.Container) int64 {
	return c.GetLinux().GetResources().GetCpu().GetQuota().GetValue()
}

// CPUPeriod returns a container's CFS period (0 if none is set).
func CPUPeriod(c *api.Container) uint64 {
	return c.GetLinux().GetResources().GetCpu().GetPeriod().GetValue()
}

// Tier returns the value of EnvVar in a container's environment ("" if
// it has none).
func Tier(c *api.Container) string {
	prefix := EnvVar + "="
	for _, kv := range c.GetEnv() {
		if len(kv) >= len(prefix) && kv[:len(prefix)] == prefix {
			return kv[len(prefix):]
		}
	}
	return ""
}
