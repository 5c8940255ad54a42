package lifecycle

import (
	"github.com/containerd/nri/pkg/api"
)

// Change is a lifecycle change the record shows no instance acted on: the
// runtime's list has the object in a later state, or no longer lists it.
type Change struct {
	// Event is the NRI event the author missed: StartContainer,
	// StopContainer, RemoveContainer, StopPodSandbox or RemovePodSandbox.
	Event api.Event
	// Entry is the record's entry before the change.
	Entry Entry
	// Container and Pod are the runtime's listed objects, if listed; nil
	// for an object the list no longer has (then only Entry's ids are
	// known).
	Container *api.Container
	Pod       *api.PodSandbox
}

// Diff compares the record's entries with the runtime's list (as a
// Synchronize gives it) and returns the lifecycle changes nobody acted
// on, in the order they happened for each object (start, stop, remove;
// the containers of a pod before the pod), and what the record should
// hold afterwards (Set calls: entries gone become Removed).
//
// The rules, for an entry with no change pending:
//   - a container recorded created and listed running: StartContainer;
//   - recorded created or running and listed stopped, or not listed:
//     StopContainer (runtimes do not list exited containers, so an
//     unlisted one has stopped, and may be removed);
//   - recorded, not listed, and its pod not listed either:
//     RemoveContainer (a pod is removed after its containers);
//   - a pod recorded running and not listed: StopPodSandbox, then
//     RemovePodSandbox; recorded stopped and not listed: RemovePodSandbox.
//
// A container not listed while its pod is, is kept recorded as stopped:
// whether it was removed is known only once its pod is gone (a later
// Diff) or its RemoveContainer comes. Unknown entries (recorded first by
// a later event than their creation) hand no StartContainer. Entries with
// a pending change are the caller's to resolve first (in doubt).
func Diff(entries []Entry, pods []*api.PodSandbox, ctrs []*api.Container) (changes []Change, sets []Entry) {
	listedPod := make(map[string]*api.PodSandbox, len(pods))
	for _, p := range pods {
		listedPod[p.GetId()] = p
	}
	listedCtr := make(map[string]*api.Container, len(ctrs))
	for _, c := range ctrs {
		listedCtr[c.GetId()] = c
	}
	recorded := map[string]bool{}
	var podChanges []Change
	for _, e := range entries {
		if e.Kind == Pod {
			recorded["p/"+e.ID] = true
		} else {
			recorded["c/"+e.ID] = true
		}
		if e.Pending != Unknown || e.State == Removed {
			continue // in doubt, or handed already (the caller drops it)
		}
		switch e.Kind {
		case Container:
			c, listed := listedCtr[e.ID]
			pod := listedPod[e.PodID]
			if listed {
				switch c.GetState() {
				case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
					if e.State == Created {
						changes = append(changes, Change{Event: api.Event_START_CONTAINER, Entry: e, Container: c, Pod: pod})
					}
					if e.State < Running {
						sets = append(sets, Entry{Kind: Container, ID: e.ID, PodID: e.PodID, State: Running})
					}
				case api.ContainerState_CONTAINER_STOPPED:
					if e.State < Stopped {
						changes = append(changes, Change{Event: api.Event_STOP_CONTAINER, Entry: e, Container: c, Pod: pod})
						sets = append(sets, Entry{Kind: Container, ID: e.ID, PodID: e.PodID, State: Stopped})
					}
				}
				continue
			}
			if e.State < Stopped {
				changes = append(changes, Change{Event: api.Event_STOP_CONTAINER, Entry: e, Pod: pod})
			}
			if pod == nil {
				changes = append(changes, Change{Event: api.Event_REMOVE_CONTAINER, Entry: e})
				sets = append(sets, Entry{Kind: Container, ID: e.ID, PodID: e.PodID, State: Removed})
			} else if e.State < Stopped {
				sets = append(sets, Entry{Kind: Container, ID: e.ID, PodID: e.PodID, State: Stopped})
			}
		case Pod:
			if _, listed := listedPod[e.ID]; listed {
				continue
			}
			if e.State < Stopped {
				podChanges = append(podChanges, Change{Event: api.Event_STOP_POD_SANDBOX, Entry: e})
			}
			podChanges = append(podChanges, Change{Event: api.Event_REMOVE_POD_SANDBOX, Entry: e})
			sets = append(sets, Entry{Kind: Pod, ID: e.ID, State: Removed})
		}
	}
	changes = append(changes, podChanges...)
	// The listed objects the record does not have: recorded now, so that
	// a later gap's changes to them are known.
	for _, p := range pods {
		if !recorded["p/"+p.GetId()] {
			sets = append(sets, Entry{Kind: Pod, ID: p.GetId(), State: Running})
		}
	}
	for _, c := range ctrs {
		if recorded["c/"+c.GetId()] {
			continue
		}
		st := Created
		switch c.GetState() {
		case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
			st = Running
		case api.ContainerState_CONTAINER_STOPPED:
			st = Stopped
		}
		sets = append(sets, Entry{Kind: Container, ID: c.GetId(), PodID: c.GetPodSandboxId(), State: st})
	}
	return changes, sets
}
