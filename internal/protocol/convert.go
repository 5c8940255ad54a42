package protocol

import (
	"time"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// PublicRole is r as the public Role.
func PublicRole(r api.Role) Role {
	switch r {
	case api.Role_ROLE_JOINING:
		return RoleJoining
	case api.Role_ROLE_OWNER:
		return RoleOwner
	case api.Role_ROLE_STANDBY:
		return RoleStandby
	case api.Role_ROLE_RETIRED:
		return RoleRetired
	}
	return RoleUnknown
}

// PublicInstance is in as the public Instance value (the zero Instance for
// nil).
func PublicInstance(in *api.Instance) Instance {
	if in == nil {
		return Instance{}
	}
	return Instance{Plugin: in.GetPlugin(), ID: in.GetId(), Version: in.GetVersion(),
		Started: time.Unix(0, in.GetStartedUnixNano()), PID: int(in.GetPid())}
}

// PublicStatus is st as the public Status value, sharing nothing with st.
func PublicStatus(st *api.StatusResponse) Status {
	out := Status{Instance: PublicInstance(st.GetInstance()), Role: PublicRole(st.GetRole()),
		Epoch: st.GetEpoch(), Reason: st.GetReason(), Leaving: st.GetLeaving()}
	if h := st.GetLastHandover(); h != nil {
		out.LastHandover = &Handover{FromID: h.GetFromId(), FromVersion: h.GetFromVersion(),
			ToID: h.GetToId(), ToVersion: h.GetToVersion(), At: time.Unix(0, h.GetAtUnixNano()),
			Took: time.Duration(h.GetDurationNano()), Epoch: h.GetEpoch()}
	}
	for _, w := range st.GetWatchers() {
		out.Watchers = append(out.Watchers, PublicInstance(w))
	}
	return out
}
