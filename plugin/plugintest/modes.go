package plugintest

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// Mode says how a Runtime fences a connecting plugin's synchronization from
// events, after a real runtime that embeds the NRI adaptation. In every mode
// events are serialized by a runtime lock (as containerd's and CRI-O's NRI
// wrappers do) and no event runs during a plugin's Synchronize call itself;
// the modes differ in the moment between that call's return and the
// adaptation appending the plugin to its chain, when an event reaches only
// the plugins connected before.
type Mode string

const (
	// ModeContainerd holds the plugin-sync block (BlockPluginSync) around
	// every lifecycle operation, as containerd's CRI paths do: no event
	// runs between a plugin's Synchronize and its append.
	ModeContainerd Mode = "containerd"
	// ModeCRIO holds no plugin-sync block around any event, as CRI-O (which
	// calls BlockPluginSync nowhere): an event may fall between a plugin's
	// Synchronize and its append, whenever the scheduler lets it.
	ModeCRIO Mode = "cri-o"
	// ModeGap is ModeCRIO made deterministic: after each plugin's
	// Synchronize has returned, the sync callback lets waiting operations
	// deliver RuntimeOptions.GapEvents events before it returns and the
	// adaptation appends the plugin, so those events go to the plugins
	// connected before only.
	ModeGap Mode = "gap"
	// ModeExitStop is ModeContainerd plus containers that exit by
	// themselves at random moments: their StopContainer is sent without
	// the plugin-sync block, as containerd's task-exit path does, and a
	// later CRI stop sends none.
	ModeExitStop Mode = "exit-stop"
)

// Modes lists every mode.
func Modes() []Mode { return []Mode{ModeContainerd, ModeCRIO, ModeGap, ModeExitStop} }

// ParseMode returns the mode named s ("" is ModeContainerd).
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if s == "" {
		m = ModeContainerd
	}
	if err := m.check(); err != nil {
		return "", err
	}
	return m, nil
}

func (m Mode) check() error {
	switch m {
	case "", ModeContainerd, ModeCRIO, ModeGap, ModeExitStop:
		return nil
	}
	return fmt.Errorf("plugintest: unknown runtime mode %q (want containerd, cri-o, gap or exit-stop)", string(m))
}

func (m Mode) blocksSync() bool { return m == ModeContainerd || m == ModeExitStop || m == "" }

// Defaults of RuntimeOptions.
const (
	// DefaultExitRate is the default RuntimeOptions.ExitRate.
	DefaultExitRate = 0.02
	// DefaultGapEvents is the default RuntimeOptions.GapEvents.
	DefaultGapEvents = 3
	// maxGap bounds one gap, should the operations under way stall.
	maxGap = time.Second
)

// deliverGap lets operations under way deliver up to GapEvents events
// (ModeGap); called by the sync callback after the plugin's Synchronize
// returned. It ends early when no operation is under way. Further events
// wait for the gap's end (deliverLocked), though one may still fall in the
// moment between the callback's return and the append, as in ModeCRIO.
func (r *Runtime) deliverGap() {
	timer := time.NewTimer(maxGap)
	defer timer.Stop()
	for {
		r.mu.Lock()
		n, busy, ch := r.gapEnded, r.inflight > 0 && !r.stopped, r.evC
		r.mu.Unlock()
		if n >= r.opts.GapEvents || !busy {
			r.logf("plugintest: gap of %d events before the append", n)
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			r.logf("plugintest: gap ended after %v with %d events", maxGap, n)
			return
		}
	}
}

// exitOne makes a random running container exit by itself and sends its
// StopContainer without the plugin-sync block (ModeExitStop).
func (r *Runtime) exitOne() {
	defer r.bg.Done()
	// The container exits and its event is sent in one turn of the event
	// lock, so no later event about it (a RemoveContainer) comes first.
	r.evMu.Lock()
	defer r.evMu.Unlock()
	r.mu.Lock()
	var running []*api.Container
	for _, c := range r.history {
		if r.ctrs[c.Id] == c && c.State == api.ContainerState_CONTAINER_RUNNING {
			running = append(running, c)
		}
	}
	if len(running) == 0 || r.stopped {
		r.mu.Unlock()
		return
	}
	c := running[r.rng.Intn(len(running))]
	ps := r.pods[c.PodSandboxId]
	if ps == nil {
		r.mu.Unlock()
		return
	}
	c.State = api.ContainerState_CONTAINER_STOPPED
	c.FinishedAt = time.Now().UnixNano()
	r.exited[c.Id] = true
	id := c.Id
	req := &api.StopContainerRequest{Pod: cloneMsg(ps.pod), Container: cloneMsg(c)}
	r.mu.Unlock()

	ctx := context.Background()
	var rpl *api.StopContainerResponse
	err := r.deliverLocked(EventStopContainer, id, false, true, func() error {
		var err error
		rpl, err = r.nri.StopContainer(ctx, req)
		return err
	})
	if err != nil {
		r.logf("plugintest: exit StopContainer %s: %v", id, err)
		return
	}
	r.mu.Lock()
	r.applyUpdatesLocked(rpl.GetUpdate())
	r.mu.Unlock()
}

// exitedByItself tells whether the container exited by itself (ModeExitStop).
func (r *Runtime) exitedByItself(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exited[id]
}

// Mode returns the runtime's mode.
func (r *Runtime) Mode() Mode { return r.opts.Mode }
