package handover

import "time"

// Role is the part an instance plays among its plugin's instances on a
// node; only RoleOwner acts on events.
type Role int

// The roles. The zero value, RoleUnknown, is no role reported.
const (
	RoleUnknown Role = iota
	// RoleJoining: connected or connecting to the runtime, not yet
	// synchronized.
	RoleJoining
	// RoleOwner: acts on every event.
	RoleOwner
	// RoleStandby: synchronized, acts on nothing, may take over later.
	RoleStandby
	// RoleRetired: yielded to a successor; acts on nothing and takes over
	// again only if its successor disappears.
	RoleRetired
)

// String is the role's short lower-case name, as logs, status and probes
// show it: "joining", "owner", "standby", "retired" or "unknown".
func (r Role) String() string {
	switch r {
	case RoleJoining:
		return "joining"
	case RoleOwner:
		return "owner"
	case RoleStandby:
		return "standby"
	case RoleRetired:
		return "retired"
	}
	return "unknown"
}

// Instance identifies one running instance of a plugin.
type Instance struct {
	// Plugin is the plugin's key: the name of its handover directory and
	// stamp annotation.
	Plugin string
	// ID is the instance's id, unique on the node.
	ID string
	// Version is the plugin's version as the instance was given it.
	Version string
	// Started is when the instance started; NewestInstance compares it.
	Started time.Time
	// PID is the instance's process id (0 if not reported).
	PID int
}

// Handover describes one completed handover.
type Handover struct {
	FromID, FromVersion string // the instance that gave ownership away
	ToID, ToVersion     string // the instance that took it
	At                  time.Time
	Took                time.Duration // from the taker's claim to it owning
	Epoch               uint64        // the epoch the taker owns from
}

// Status is a snapshot of one instance's handover state. It is a value
// the caller owns: nothing changes it after it was returned.
type Status struct {
	Instance Instance
	Role     Role
	// Epoch counts ownership changes of the plugin on the node.
	Epoch uint64
	// Reason says why the instance has its role (for a standby: why it was
	// refused).
	Reason string
	// LastHandover is the last handover this instance took part in, nil if
	// none.
	LastHandover *Handover
	// Watchers are the standby instances currently watching this one.
	Watchers []Instance
	// Leaving is true once the instance is stopping.
	Leaving bool
}
